"""kill -9 in the middle of `fastmmeval evolve run`, then run it again: the same new version as a run
never interrupted, and no call asked again whose answer had come back before the kill (counted at the
scripted server)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from evolve_llm import KEY_ENV, EvolveLLM

ROLE_ARGS = "base_url={url},model=scripted,api_key_env=" + KEY_ENV + ",cache_dir=off,max_retries=0,timeout=20"
SETTLED_S = 0.5  # a call answered this long before the kill has surely reached the cache (a commit per answer)


def evolve(out: Path, data: Path, images: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "fastmmeval", "evolve", "run", "--tasks", "mmbench_en_dev", "--out", str(out),
            "--data_dir", str(data), "--writer", "openai", "--writer_args", ROLE_ARGS.format(url=url),
            "--images_dir", str(images), "--k", "4", "--retrieve", "6", "--images", "5", "--queries", "1",
            "--workers", "4", "--no_progress"]


def body_hash(body: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def test_a_run_killed_mid_way_resumes_to_the_same_version_without_asking_again(tmp_path: Path) -> None:
    env = os.environ | {KEY_ENV: "test-key"}
    data, images = tmp_path / "data", tmp_path / "images"
    counts = {"image_scene": 3, "ocr": 3, "spatial_relationship": 2}
    save_mmbench_dev(data, counts)
    write_folder(images, 24, topics=sorted(counts))
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    with EvolveLLM(delay_s=0.05) as llm:
        subprocess.run(evolve(whole, data, images, llm.url), env=env, check=True, capture_output=True)
        calls_whole = len(llm.server.calls)
        child = subprocess.Popen(evolve(killed, data, images, llm.url), env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(llm.server.answered) < calls_whole + calls_whole // 2 and time.monotonic() < deadline:
            assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        killed_at = time.monotonic()
        first_run = llm.server.calls[calls_whole:]
        settled = {body_hash(llm.server.calls[n][1]) for at, n in llm.server.answered
                   if n >= calls_whole and at < killed_at - SETTLED_S}
        assert 0 < len(settled) < calls_whole
        before_rerun = len(llm.server.calls)
        subprocess.run(evolve(killed, data, images, llm.url), env=env, check=True, capture_output=True)
        rerun = [body_hash(body) for _, body, _ in llm.server.calls[before_rerun:]]

    assert not settled & set(rerun), "the rerun asked again calls answered before the kill"
    assert len(first_run) + len(rerun) - calls_whole <= 4 * 3  # at most the calls in flight at the kill
    for name in ("dev.parquet", "mmbench_en_dev_live_v1.yaml"):
        assert (killed / "v1" / name).read_bytes() == (whole / "v1" / name).read_bytes()
    for stage in ("acquired", "generated", "verified"):
        assert (killed / f"{stage}.json").read_bytes() == (whole / f"{stage}.json").read_bytes()
