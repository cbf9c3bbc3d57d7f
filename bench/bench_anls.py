"""ANLS (DocVQA / InfographicVQA) here against lmms-eval 0.7.3's `anls` on the same questions.

Scores agree except where lmms-eval divides by the lengths of the raw, unnormalized strings (its
known bug): every such question is checked to equal our distance over lmms-eval's denominator,
and counted. Prints one JSON line: {"bench": "anls", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: python bench/bench_anls.py --n 50000
"""

from __future__ import annotations

import argparse
import json
import random
import time
from importlib.metadata import version

from fastmmeval.metrics.edit_distance import levenshtein_distances
from fastmmeval.metrics.vqa import ANLS_THRESHOLD, anls_scores, normalize_anls_answer

WORDS = [
    "Total", "Revenue", "Net", "Income", "Dr.", "Smith", "R&D", "1998", "12/15/89", "$1,234.00", "45%", "3.5",
    "million", "Board", "of", "Directors", "Tobacco", "Institute", "Washington,", "D.C.", "Denver", "Broncos",
    "Philip", "Morris", "Inc.", "Q4", "ß-Straße", "İstanbul", "São", "Paulo", "北京", "大学", "Ω", "😀", "ﬁnance",
    "Ελλάδα", "Москва",
]  # fmt: skip


def make_questions(n: int, seed: int) -> tuple[list[str], list[list[str]]]:
    """DocVQA-like short references (1-3 per question) and model answers: exact, re-cased,
    re-spaced, with OCR-like typos, verbose, or wrong."""
    rng = random.Random(seed)
    predictions, references = [], []
    for _ in range(n):
        refs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        answer = rng.choice(refs)
        kind = rng.random()
        if kind < 0.35:
            pass
        elif kind < 0.5:
            answer = rng.choice([answer.upper(), answer.lower(), answer.title()])
        elif kind < 0.6:
            answer = rng.choice([f" {answer} ", answer.replace(" ", "  "), f"{answer}\n", f"\t{answer}"])
        elif kind < 0.8:
            chars = list(answer)
            for _ in range(rng.randint(1, 3)):
                chars[rng.randrange(len(chars))] = rng.choice("abcdeilo01 .,")
            answer = "".join(chars)
        elif kind < 0.9:
            answer = f"The answer is {answer}, as stated in the document."
        else:
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.1:
            refs[0] = f" {refs[0]} "
        predictions.append(answer)
        references.append(refs)
    return predictions, references


def lmms_eval_value(distances: list[int], prediction: str, refs: list[str]) -> float:
    """lmms-eval's formula with our distances: divided by the raw upper-cased lengths."""
    values = [1 - d / max(len(r.upper()), len(prediction.upper()), 1) for d, r in zip(distances, refs, strict=True)]
    return max(values) if max(values) >= ANLS_THRESHOLD else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=50_000, help="questions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from lmms_eval.api.metrics import anls as peer_anls  # heavy import (torch, transformers): not timed

    predictions, references = make_questions(args.n, args.seed)
    start = time.perf_counter()
    ours = anls_scores(predictions, references)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    peer = [peer_anls(refs, [prediction])["anls"] for prediction, refs in zip(predictions, references, strict=True)]
    peer_s = time.perf_counter() - start

    differ = [i for i, (a, b) in enumerate(zip(ours, peer, strict=True)) if a != b]
    left = [normalize_anls_answer(predictions[i]) for i in differ for _ in references[i]]
    right = [normalize_anls_answer(r) for i in differ for r in references[i]]
    distances = levenshtein_distances(left, right).tolist()
    explained, start = 0, 0
    for i in differ:
        count = len(references[i])
        explained += lmms_eval_value(distances[start : start + count], predictions[i], references[i]) == peer[i]
        start += count
    print(
        json.dumps(
            {
                "bench": "anls",
                "n": args.n,
                "pairs": sum(len(refs) for refs in references),
                "ours_s": round(ours_s, 4),
                "peer": f"lmms-eval {version('lmms-eval')}",
                "peer_s": round(peer_s, 4),
                "ratio": round(peer_s / ours_s, 1),
                "agree": explained == len(differ),
                "n_differ_raw_length_bug": len(differ),
                "n_differ_explained": explained,
                "ours_mean": round(sum(ours) / args.n, 6),
                "peer_mean": round(sum(peer) / args.n, 6),
            }
        )
    )


if __name__ == "__main__":
    main()
