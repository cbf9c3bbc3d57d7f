"""`--resume` finds a run by its settings; a run recorded before a setting existed ran with that setting's
default, so it is still found."""

from __future__ import annotations

import json
from pathlib import Path

from cli_fixtures import run_argv, write_tasks

from fastmmeval.cli import main


def test_a_run_recorded_before_the_image_settings_existed_is_resumed(tmp_path: Path) -> None:
    tasks, out = write_tasks(tmp_path / "tasks"), tmp_path / "runs"
    assert main(run_argv(tasks, out)) == 0
    [run] = out.iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    for setting in ("max_image_pixels", "allow_absolute_image_paths"):
        del manifest["config"][setting]  # as an earlier fastmmeval wrote it
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main([*run_argv(tasks, out), "--resume"]) == 0
    assert list(out.iterdir()) == [run]
    assert main([*run_argv(tasks, out), "--resume", str(run)]) == 0
    assert main([*run_argv(tasks, out, "--max_image_pixels", "1000"), "--resume"]) == 0
    assert len(list(out.iterdir())) == 2  # another cap is another run
