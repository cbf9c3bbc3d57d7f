"""The LiveBench build end to end, ours against a serial pipeline in the order lmms-eval's removed tool
ran it (tools/live_bench: one browser, one page after another, then for that page the three extraction
calls, the generation, and check -> finalize -> score for each question, one call at a time).

Both capture the same fixture pages (`--pages` news pages served on 127.0.0.1 by tests/live_sites.py)
with the real Chromium and ask the same scripted model server (tests/live_llm.py: a valid reply per
stage, made from the call's own text, so both sides get the same replies to the same calls). In front
of the server runs the fault proxy (fastmmeval.testing.faults): `--latency` seconds per call and a quota
that answers 429 (Retry-After `--retry_after`) to a call arriving while `--quota` are in flight: a stand-in
for a hosted API. Ours is `fastmmeval.live.build` as `live build` runs it (4 browser contexts, stages
overlapping across pages, API roles at their default max_concurrency of 32 adapting to the quota); the
serial side runs the same stage functions one call at a time (its role at max_concurrency 1). Each round
uses fresh caches, so every call is made. `agree`: both sides finished the same items with the same
text and scores.

Prints one JSON line last: {"bench": "live", "ours_s", "peer", "peer_s", "ratio", "agree", ...}, the
medians over `--rounds`.

Usage: python bench/bench_live.py [--pages 40] [--latency 0.3] [--quota 8] [--retry_after 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fixture sites and model server

from live_llm import KEY_ENV, LiveLLM  # noqa: E402
from live_sites import SiteServer  # noqa: E402

from fastmmeval.live.capture import CaptureSettings, capture_pages  # noqa: E402
from fastmmeval.live.check import check_draft  # noqa: E402
from fastmmeval.live.extract import extract_page  # noqa: E402
from fastmmeval.live.finalize import finalize_draft  # noqa: E402
from fastmmeval.live.generate import generate_drafts  # noqa: E402
from fastmmeval.live.pipeline import BuildConfig, build  # noqa: E402
from fastmmeval.live.records import Failure, Source  # noqa: E402
from fastmmeval.live.roles import ROLE_NAMES, Role, RoleSpec, build_roles  # noqa: E402
from fastmmeval.live.score import score_item  # noqa: E402
from fastmmeval.live.store import Blobs, StageCache  # noqa: E402
from fastmmeval.testing.faults import start_proxy  # noqa: E402

MONTH = "2026-12"


def specs(llm: LiveLLM, url: str, **args: str) -> tuple[RoleSpec, ...]:
    """Every role played by the scripted server behind the proxy at `url` (retries on, like a real run)."""
    return tuple(RoleSpec(role, "openai", llm.role_args(url, max_retries="8", **args)) for role in ROLE_NAMES)


def ours(sources: list[Source], roles: tuple[RoleSpec, ...], work: Path) -> tuple[float, dict[str, Any]]:
    """`live build` over `sources`: seconds and {item id: (draft, score)}."""
    config = BuildConfig(MONTH, work, tuple(sources), roles, CaptureSettings(), progress=False)
    start = time.perf_counter()
    built = build(config)
    seconds = time.perf_counter() - start
    return seconds, {i.id: (i.draft, i.score) for i in built.items}


def serial(sources: list[Source], roles: dict[str, Role], work: Path) -> tuple[float, dict[str, Any]]:
    """The same stages in lmms-eval's tool's order, one browser page and one call at a time."""
    cache, blobs = StageCache(work / "cache.sqlite"), Blobs(work / "blobs")
    start = time.perf_counter()
    captures = capture_pages(sources, CaptureSettings(contexts=1), blobs, cache, MONTH)
    items: dict[str, Any] = {}
    for capture in captures:
        if capture.error is not None:
            continue
        info = extract_page(capture, roles["extractor"], cache, blobs)
        drafts = [] if isinstance(info, Failure) else generate_drafts(capture, info, roles["generator"], cache, blobs)
        for draft in [] if isinstance(drafts, Failure) else [d for d in drafts if not isinstance(d, Failure)]:
            checked = check_draft(draft, capture, info, roles["checker"], cache, blobs)
            final = checked if isinstance(checked, Failure) else finalize_draft(checked, capture, roles["finalizer"],
                                                                                 cache, blobs)
            score = final if isinstance(final, Failure) else score_item(final, capture, roles["scorer"], cache, blobs)
            if not isinstance(score, Failure):
                items[final.id] = (final.record(), score.record())
    seconds = time.perf_counter() - start
    cache.close()
    return seconds, items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.3, help="seconds the proxy adds to every call")
    parser.add_argument("--quota", type=int, default=8, help="calls in flight above which the proxy answers 429")
    parser.add_argument("--retry_after", type=float, default=1.0, help="the 429s' Retry-After")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "bench-key")
    rounds = []
    with (
        SiteServer(max_requests=100_000, lifetime_s=3600, editions=args.pages) as sites,
        LiveLLM() as llm,
        start_proxy(llm.url, latency_s=args.latency, max_concurrency=args.quota, retry_after=args.retry_after) as proxy,
    ):
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="bench_live_") as tmp:
                before = sum(llm.counts().values())
                ours_s, ours_items = ours(sites.editions, specs(llm, proxy.url), Path(tmp) / "ours")
                calls = sum(llm.counts().values()) - before
                roles = build_roles(specs(llm, proxy.url, max_concurrency="1"))
                peer_s, peer_items = serial(sites.editions, roles, Path(tmp) / "serial")
            rounds.append({"ours_s": ours_s, "peer_s": peer_s, "calls": calls, "items": len(ours_items),
                           "agree": ours_items == peer_items and bool(ours_items)})
            print(f"round {r + 1}: ours {ours_s:.2f} s, serial {peer_s:.2f} s ({peer_s / ours_s:.1f}x), "
                  f"{calls} calls, {len(ours_items)} items, agree={rounds[-1]['agree']}", file=sys.stderr)
    ours_s = statistics.median(r["ours_s"] for r in rounds)
    peer_s = statistics.median(r["peer_s"] for r in rounds)
    ratios = [r["peer_s"] / r["ours_s"] for r in rounds]
    print(json.dumps({
        "bench": "live", "ours_s": round(ours_s, 3), "peer": "serial pipeline in lmms-eval's tool's order",
        "peer_s": round(peer_s, 3), "ratio": round(peer_s / ours_s, 2), "ratio_min": round(min(ratios), 2),
        "ratio_max": round(max(ratios), 2), "agree": all(r["agree"] for r in rounds), "pages": args.pages,
        "calls": rounds[0]["calls"], "items": rounds[0]["items"], "latency_s": args.latency, "quota": args.quota,
        "rounds": len(rounds),
    }))


if __name__ == "__main__":
    main()
