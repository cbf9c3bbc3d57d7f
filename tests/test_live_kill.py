"""kill -9 in the middle of `fastmmeval live build`, then run it again: the same dataset as a build
never interrupted, and no call asked again whose answer had come back before the kill."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from kill_calls import body_hash, kill_mid_calls
from live_llm import KEY_ENV, LiveLLM
from live_sites import SiteServer

ROLE_ARGS = "base_url={url},model=scripted,api_key_env=" + KEY_ENV + ",cache_dir=off,max_retries=0,timeout=20"


def live(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastmmeval", "live", *args, "--month", "2026-12"]


def test_a_build_killed_mid_way_resumes_to_the_same_dataset_without_asking_again(tmp_path: Path) -> None:
    env = os.environ | {KEY_ENV: "test-key"}
    with SiteServer(editions=6) as sites, LiveLLM(delay_s=0.05) as llm:
        registry = tmp_path / "sources.yaml"
        registry.write_text(yaml.safe_dump({"sources": [s.record() for s in sites.editions]}))
        # Both builds start from the same captures, so their pages (and capture times) are the same.
        shared = tmp_path / "shared"
        subprocess.run(live("capture", "--out", str(shared), "--sources", str(registry), "--no_progress"), env=env,
                       check=True, capture_output=True)
        build = ["--sources", str(registry), "--generator", "openai", "--generator_args",
                 ROLE_ARGS.format(url=llm.url), "--no_progress", "--workers", "4"]
        whole, killed = tmp_path / "whole", tmp_path / "killed"
        shutil.copytree(shared, whole)
        shutil.copytree(shared, killed)

        subprocess.run(live("build", "--out", str(whole), *build), env=env, check=True, capture_output=True)
        calls_whole = len(llm.server.calls)
        target = calls_whole + calls_whole // 2
        settled = kill_mid_calls(live("build", "--out", str(killed), *build), env, llm.server, target)
        first_run = llm.server.calls[calls_whole:]
        assert 0 < len(settled) < calls_whole
        before_rerun = len(llm.server.calls)
        subprocess.run(live("build", "--out", str(killed), *build), env=env, check=True, capture_output=True)
        rerun = [body_hash(body) for _, body, _ in llm.server.calls[before_rerun:]]

    assert not settled & set(rerun), "the rerun asked again calls answered before the kill"
    assert len(first_run) + len(rerun) - calls_whole <= 4  # at most the calls in flight at the kill, asked twice
    for build_dir in (whole, killed):
        subprocess.run(live("export", "--out", str(build_dir)), env=env, check=True, capture_output=True)
    assert (killed / "dataset" / "test.parquet").read_bytes() == (whole / "dataset" / "test.parquet").read_bytes()
    items = [json.loads((b / "build.json").read_text())["items"] for b in (killed, whole)]
    assert items[0] == items[1] and items[0]
