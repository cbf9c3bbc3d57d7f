"""CIDEr-D + BLEU-1..4 + ROUGE-L: fastmmeval against pycocoevalcap 1.2 on the same pre-tokenized
COCO-like captions (Java is not needed), end to end from the caption strings.

The captions are drawn from a Zipf vocabulary with COCO's caption lengths (about 10.5 words);
each image has a scene caption that its references and candidate paraphrase by replacing,
dropping and inserting words. Agreement: every corpus and per-image score within 1e-9.
Prints one JSON line: {"bench": "captioning", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: python bench/bench_captioning.py --n 5000 --refs 5
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge

from fastmmeval.metrics.caption import CaptionScorer

TOLERANCE = 1e-9


def make_captions(n: int, refs: int, vocab: int, seed: int) -> tuple[list[str], list[list[str]]]:
    """`n` candidates with `refs` references each, as space-separated words."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocab)])

    def zipf(size: int) -> np.ndarray:
        return words[np.minimum(rng.zipf(1.3, size) - 1, vocab - 1)]

    def paraphrase(scene: np.ndarray, change: float) -> str:
        out = scene.copy()
        swap = rng.random(len(out)) < change
        out[swap] = zipf(int(swap.sum()))
        keep = rng.random(len(out)) > change / 3
        out = out[keep]
        inserts = rng.integers(0, 3)
        out = np.insert(out, rng.integers(0, len(out) + 1, inserts), zipf(inserts))
        return " ".join(out)

    preds, all_refs = [], []
    for _ in range(n):
        scene = zipf(int(np.clip(round(rng.normal(10.5, 2.5)), 5, 25)))
        all_refs.append([paraphrase(scene, 0.3) for _ in range(refs)])
        preds.append(paraphrase(scene, 0.45))
    return preds, all_refs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000, help="images")
    parser.add_argument("--refs", type=int, default=5, help="references per image")
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    preds, refs = make_captions(args.n, args.refs, args.vocab, args.seed)

    start = time.perf_counter()
    scorer = CaptionScorer(preds, refs)
    cider_per_image = scorer.cider_d()
    cider = float(np.mean(cider_per_image))
    bleu, bleu_per_image = scorer.bleu()
    rouge_per_image = scorer.rouge_l()
    rouge = float(np.mean(rouge_per_image))
    ours_s = time.perf_counter() - start

    start = time.perf_counter()
    gts = {i: rs for i, rs in enumerate(refs)}
    res = {i: [p] for i, p in enumerate(preds)}
    peer_cider, peer_cider_per_image = Cider().compute_score(gts, res)
    peer_bleu, peer_bleu_per_image = Bleu(4).compute_score(gts, res, verbose=0)
    peer_rouge, peer_rouge_per_image = Rouge().compute_score(gts, res)
    peer_s = time.perf_counter() - start

    diffs = {
        "cider": abs(cider - peer_cider),
        "cider_per_image": float(np.max(np.abs(cider_per_image - peer_cider_per_image))),
        "bleu": float(np.max(np.abs(bleu - np.array(peer_bleu)))),
        "bleu_per_image": float(np.max(np.abs(bleu_per_image - np.array(peer_bleu_per_image).T))),
        "rouge_l": abs(rouge - peer_rouge),
        "rouge_l_per_image": float(np.max(np.abs(rouge_per_image - peer_rouge_per_image))),
    }
    print(
        json.dumps(
            {
                "bench": "captioning",
                "images": args.n,
                "refs_per_image": args.refs,
                "words": int(scorer.buffers.tokens.size),
                "ours_s": round(ours_s, 4),
                "peer": "pycocoevalcap 1.2",
                "peer_s": round(peer_s, 4),
                "ratio": round(peer_s / ours_s, 1),
                "agree": max(diffs.values()) <= TOLERANCE,
                "max_abs_diff": max(diffs.values()),
                "cider": round(cider, 6),
                "bleu_4": round(float(bleu[3]), 6),
                "rouge_l": round(rouge, 6),
            }
        )
    )


if __name__ == "__main__":
    main()
