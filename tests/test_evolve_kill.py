"""kill -9 in the middle of `fastmmeval evolve run`, then run it again: the same new version as a run
never interrupted, and no call asked again whose answer had come back before the kill (counted at the
scripted server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evolve_benchmarks import save_mmbench_dev
from evolve_images import write_folder
from evolve_llm import KEY_ENV, EvolveLLM
from kill_calls import body_hash, kill_mid_calls

ROLE_ARGS = "base_url={url},model=scripted,api_key_env=" + KEY_ENV + ",cache_dir=off,max_retries=0,timeout=20"


def evolve(out: Path, data: Path, images: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "fastmmeval", "evolve", "run", "--tasks", "mmbench_en_dev", "--out", str(out),
            "--data_dir", str(data), "--writer", "openai", "--writer_args", ROLE_ARGS.format(url=url),
            "--images_dir", str(images), "--k", "4", "--retrieve", "6", "--images", "5", "--queries", "1",
            "--workers", "4", "--no_progress"]


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
        settled = kill_mid_calls(evolve(killed, data, images, llm.url), env, llm.server, calls_whole + calls_whole // 2)
        first_run = llm.server.calls[calls_whole:]
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
