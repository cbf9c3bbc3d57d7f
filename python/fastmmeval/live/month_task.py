"""The task file of a month built with `fastmmeval live`: task `live_bench_<YYYY_MM>`, LiveBench's protocol
(the built-in `_live_bench` template) over the month's `test.parquet`, so that
`fastmmeval run --include_path <month folder> --tasks live_bench_<YYYY_MM>` evaluates it."""

from __future__ import annotations

import json
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import check_month

DATA_FILE = "test.parquet"


def month_task_name(month: str) -> str:
    """`live_bench_2026_12` for month "2026-12"; ConfigError unless `month` is YYYY-MM."""
    return "live_bench_" + check_month(month).replace("-", "_")


def month_task_file(month: str, dataset_dir: Path) -> str:
    """The YAML text of the month's task, to be written into `dataset_dir` (beside its `test.parquet`,
    lmms-eval's LiveBench schema): the data file is named relative to the task file, so the folder can
    move. ConfigError when `dataset_dir` holds no readable test.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = month_task_name(month)
    data = dataset_dir / DATA_FILE
    try:
        docs = pq.read_metadata(data).num_rows
    except (OSError, pa.ArrowException) as e:
        raise ConfigError(f"{data}: no readable parquet file for month {month} ({str(e)[:200]})") from None
    description = (
        f"LiveBench {month}, built with fastmmeval live: questions on screenshots of web pages at four levels, "
        "rated 0-10 by a judge that sees the screenshot (needs --judge_model or --judge_config), overall and per "
        "subtask, scored as lmms-eval's LiveBench months."
    )
    lines = [
        f"task: {name}",
        "extends: _live_bench",
        f"description: {json.dumps(description)}",
        f"dataset: {{data_files: {{test: {json.dumps(DATA_FILE)}}}}}",
        f"docs: {docs}",
    ]
    return "\n".join(lines) + "\n"
