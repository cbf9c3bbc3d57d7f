"""_core.ngram_hashes against the per-window `xxhash` Python loop on the same tokens.

Prints one JSON line: {"bench": "ngram_hashes", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: python bench/bench_ngram_hashes.py --tokens 2000000 --n 8
"""

from __future__ import annotations

import argparse
import json
import time
from importlib.metadata import version

import numpy as np

from fastmmeval.contam.ngram.hashing import ngram_hashes, ngram_hashes_reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--doc_len", type=int, default=500, help="mean document length")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=args.tokens, dtype=np.uint32)
    cuts = np.sort(rng.choice(np.arange(1, args.tokens), size=max(args.tokens // args.doc_len - 1, 0), replace=False))
    offsets = np.concatenate([[0], cuts]).astype(np.int64)

    start = time.perf_counter()
    ours = ngram_hashes(tokens, offsets, n=args.n, seed=0)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    peer = ngram_hashes_reference(tokens, offsets, n=args.n, seed=0)
    peer_s = time.perf_counter() - start
    print(
        json.dumps(
            {
                "bench": "ngram_hashes",
                "tokens": args.tokens,
                "n": args.n,
                "ours_s": round(ours_s, 4),
                "peer": f"xxhash {version('xxhash')} (Python loop)",
                "peer_s": round(peer_s, 4),
                "ratio": round(peer_s / ours_s, 1),
                "ours_mtok_per_s": round(args.tokens / ours_s / 1e6, 1),
                "agree": bool(np.array_equal(ours, peer)),
            }
        )
    )


if __name__ == "__main__":
    main()
