"""LiveBench: a fresh benchmark from current web pages, built by a resumable, concurrent pipeline
(sources -> capture -> extract -> generate -> check -> finalize -> score -> select -> dataset).

The API: `build(BuildConfig(month, out, sources, roles, ...))` builds a month into `out` (its
`build.json`, cache and blobs); `capture_sources(...)` runs the capture stage alone; `review(out)`
writes the review page; `export(out, decisions)` writes the dataset and its task file;
`load_sources(path)` reads a site registry (None: the shipped one); `load_month(path)` reads a
month, ours or lmms-lab's."""

from fastmmeval.util import lazy_exports

__all__ = [
    "Build", "BuildConfig", "CaptureSettings", "RoleSpec", "build", "capture_sources", "export", "load_build",
    "load_month", "load_sources", "review",
]  # fmt: skip
# Every `fastmmeval` command imports `live.cli`, and with it this package: its modules load on first use.
__getattr__ = lazy_exports(__name__, {
    **dict.fromkeys(["Build", "BuildConfig", "build", "capture_sources", "export", "load_build", "review"], "pipeline"),
    "CaptureSettings": "capture", "RoleSpec": "roles", "load_month": "dataset", "load_sources": "sources",
})  # fmt: skip
