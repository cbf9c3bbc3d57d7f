"""The run folder: manifest, per-task samples appended as docs finish, results; all atomic. And the stamp
of a run (versions, git commit) its manifest records."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import fastmmeval
from fastmmeval.errors import ConfigError, FastmmevalError
from fastmmeval.util import remove_stale_temps, write_bytes_atomic, write_json_atomic

# A file path inside a failure message (an image, a shard), quoted or not: the part that differs per doc.
_PATH = re.compile(r"""'[^'\s]*/[^']*'|"[^"\s]*/[^"]*"|(?<![\w'":/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+""")


class RunDir:
    """`<output_path>/<run_id>/` with manifest.json, results.json, samples/<task>.jsonl and, for tasks scored
    on a server, submissions/<task>.<ext>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.samples_dir = root / "samples"
        self.submissions_dir = root / "submissions"

    @staticmethod
    def check_output_path(output_path: Path) -> None:
        """Refuse an `--output_path` that cannot hold run folders (a file, read-only, a file on the way)."""
        if output_path.exists() and not output_path.is_dir():
            raise ConfigError(f"--output_path {output_path}: not a folder")
        try:
            output_path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--output_path {output_path}: cannot create a run folder there ({e.strerror})") from None
        if not os.access(output_path, os.W_OK | os.X_OK):
            raise ConfigError(f"--output_path {output_path}: cannot create a run folder there (not writable)")

    @classmethod
    def create(cls, output_path: Path, model_name: str) -> RunDir:
        """A new, empty run folder named after the model and the time."""
        cls.check_output_path(output_path)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(1000):
            root = output_path / (f"{model_name}_{stamp}" + (f"_{attempt}" if attempt else ""))
            try:
                root.mkdir(parents=True)
                return cls(root)
            except FileExistsError:
                continue
            except OSError as e:  # read-only, a file on the way, no space
                problem = f"--output_path {output_path}: cannot create a run folder there ({e.strerror})"
                raise ConfigError(problem) from None
        raise ConfigError(f"{output_path}: cannot create a new run folder")

    @classmethod
    def find_resumable(
        cls, output_path: Path, config: dict[str, Any], defaults: dict[str, Any] | None = None
    ) -> RunDir | None:
        """The newest run under `output_path` started with the same run config, if any (a setting its
        manifest lacks, recorded before the setting existed, counts as `defaults` gives it)."""
        if not output_path.is_dir():
            return None
        candidates = []
        for manifest in output_path.glob("*/manifest.json"):
            try:
                data = json.loads(manifest.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and {**(defaults or {}), **(data.get("config") or {})} == config:
                candidates.append((data.get("started", ""), manifest.parent))
        return cls(max(candidates)[1]) if candidates else None

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A JSON file of the run, or None when absent."""
        path = self.root / name
        return json.loads(path.read_text()) if path.exists() else None

    def remove_stale_temps(self) -> None:
        """Delete what killed writes of the run's JSON files left (for the holder of the run's lock)."""
        for name in ("manifest.json", "results.json"):
            remove_stale_temps(self.root / name)
        for tmp in self.submissions_dir.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)

    def write_json(self, name: str, data: Any) -> None:
        """Atomically (re)write a JSON file of the run."""
        try:
            write_json_atomic(self.root / name, data)
        except OSError as e:
            raise self._write_failed(self.root / name, e) from None

    def write_submission(self, name: str, data: bytes) -> str:
        """Atomically (re)write the submission file `name`; returns its path inside the run folder."""
        path = self.submissions_dir / name
        try:
            write_bytes_atomic(path, data)
        except OSError as e:
            raise self._write_failed(path, e) from None
        return str(path.relative_to(self.root))

    def _samples_path(self, task: str) -> Path:
        return self.samples_dir / f"{task}.jsonl"

    def completed(self, task: str, repair: bool = True) -> dict[str, dict[str, Any]]:
        """Samples already written for `task` by doc id. A torn last line (the process was
        killed while writing it) is skipped, and with `repair` (the writer, holding the run's lock)
        cut off so appends continue on a clean line."""
        path = self._samples_path(task)
        if not path.exists():
            return {}
        raw = path.read_bytes()
        lines = raw.splitlines(keepends=True)
        done: dict[str, dict[str, Any]] = {}
        good_end = 0
        for lineno, line in enumerate(lines, 1):
            try:
                sample = json.loads(line) if line.endswith(b"\n") else None
            except json.JSONDecodeError:
                sample = None
            if sample is None:
                if lineno == len(lines):
                    break
                raise ConfigError(f"{path}:{lineno}: corrupt sample line; fix or remove it to resume")
            done[sample["doc_id"]] = sample
            good_end += len(line)
        if repair and good_end != len(raw):
            with path.open("r+b") as f:
                f.truncate(good_end)
        return done

    def failure_reasons(self, task: str) -> list[tuple[int, str, str]]:
        """(count, failure kind, message) of the failed docs of `task`, most frequent first. Messages are
        grouped with the task and doc id they start with taken off and file paths read as `<path>`; a group
        of several messages shows the first as an example."""
        counts: Counter[tuple[str, str]] = Counter()
        examples: dict[tuple[str, str], set[str]] = {}
        for doc_id, sample in self.completed(task, repair=False).items():
            if sample.get("failed"):
                reason = sample["failed"].removeprefix(f"task {task}, doc {doc_id}").lstrip(",: ")
                key = (sample.get("failure_kind") or "other", _PATH.sub("<path>", reason))
                counts[key] += 1
                examples.setdefault(key, set()).add(reason)
        rows = []
        for (kind, grouped), n in counts.items():
            seen = examples[(kind, grouped)]
            rows.append((n, kind, next(iter(seen)) if len(seen) == 1 else f"{grouped} (e.g. {min(seen)})"))
        return sorted(rows, key=lambda r: (-r[0], r[1:]))

    def append(self, task: str, samples: list[dict[str, Any]]) -> None:
        """Append finished samples and make them durable before returning."""
        if not samples:
            return
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        blob = "".join(json.dumps(s, ensure_ascii=False, default=str) + "\n" for s in samples)
        path = self._samples_path(task)
        try:
            with path.open("a", encoding="utf-8") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise self._write_failed(path, e) from None

    def _write_failed(self, path: Path, error: OSError) -> FastmmevalError:
        # The samples already appended stay valid: a torn last line is cut off when the run resumes.
        return FastmmevalError(
            f"{path}: cannot write ({error.strerror or error}); the samples written so far are intact: "
            f"free space or fix the folder, then continue with `fastmmeval run ... --resume {self.root}`"
        )


def versions() -> dict[str, str]:
    """The versions of Python, fastmmeval and the libraries that can change a score, for the manifest."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0], "fastmmeval": fastmmeval.__version__}
    for name in ("torch", "transformers", "datasets", "numpy", "pillow"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def git_hash() -> str | None:
    """The commit of the checkout fastmmeval runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
