"""An update's folder and the stages' files in it: each stage writes its records per atomic task as JSON
(failures tagged as such), and the next stage reads them back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.records import Failure
from fastmmeval.live.store import WorkFolder
from fastmmeval.util import write_json_atomic


@dataclass(frozen=True)
class Workspace(WorkFolder):
    """An update's folder: `spec.yaml` (editable), the stages' files, `work/` (stage cache; blobs: the
    original's sampled images and the candidates) and the new version's dataset."""

    @property
    def spec_path(self) -> Path:
        """The benchmark spec (stage 1, with patterns and plans added by stages 2 and 3)."""
        return self.root / "spec.yaml"

    def stage_path(self, stage: str) -> Path:
        """The file of stage `stage` (acquired, generated, verified)."""
        return self.root / f"{stage}.json"

    def review_path(self, version: int) -> Path:
        """The review sheet of version `version` (a sample of its questions to check by hand)."""
        return self.root / f"review_v{version}.html"

    def dataset_dir(self, version: int) -> Path:
        """Where export writes version `version`."""
        return self.root / f"v{version}"

    def write_stage(self, stage: str, by_task: dict[str, Any]) -> None:
        """Write stage `stage`'s records per atomic task (atomically)."""
        write_json_atomic(self.stage_path(stage), by_task)

    def read_stage(self, stage: str, before: str) -> dict[str, Any]:
        """Stage `stage`'s records per atomic task; a ConfigError naming the subcommand `before` to run
        first when it has not been written."""
        path = self.stage_path(stage)
        if not path.is_file():
            raise ConfigError(f"{path}: not there yet (run `fastmmeval evolve {before} --out {self.root}` first)")
        return json.loads(path.read_text(encoding="utf-8"))


def tagged(value: Any) -> dict[str, Any]:
    """A record or a Failure as a stage file holds it: {"ok": ...} or {"failure": ...}."""
    return {"failure" if isinstance(value, Failure) else "ok": value.record()}


def untag(data: dict[str, Any], kind: type) -> Any:
    """Back from `tagged`: a `kind` record or a Failure."""
    return Failure.from_record(data["failure"]) if "failure" in data else kind.from_record(data["ok"])
