"""The `words` text tokenizer of `fastmmeval contam`: the native split (`_core.word_ids`) against the same rule
in Python (regex, `str.lower`, `xxhash`: `contam.readers.text_tokens.reference_word_ids`, which is what the tokenizer
ran before), and a LLaVA-format JSON index build with each.

The corpus is a seeded LLaVA instruction JSON (`--records` records of 4 turns, 20-80 words each, drawn Zipf
from a 30k vocabulary in which 2% of the words start with a non-ASCII letter, about 12% of the words drawn,
so the lower-casing beyond ASCII is exercised). Both tokenizers must give the same ids. The native split's
table (built once per process, reported as `table_s`) is built before it is timed. The builds run
`NgramIndex.add` on the JSON (parse, tokenize, hash, count, write) in this process, alternating, and report
the median of `--builds`.

Prints one JSON line: {"bench": "words", "split_ratio", "build_ratio", "agree", ...}.
Usage: .venv/bin/python bench/bench_words.py --records 50000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastmmeval.contam.ngram.index import NgramIndex
from fastmmeval.contam.ngram.settings import IndexSettings, concat_arrays
from fastmmeval.contam.readers.shards import RecordSource
from fastmmeval.contam.readers.text_tokens import WordTokenizer, reference_word_ids, word_table


class PythonWordTokenizer(WordTokenizer):
    """The `words` tokenizer with the split done in Python, as before the native split."""

    def encode_concat(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The pure-Python ids of all texts and where each text's ids start."""
        return concat_arrays(reference_word_ids(texts))


def write_corpus(path: Path, records: int, seed: int) -> None:
    """A LLaVA-format JSON of `records` text-only records."""
    rng = np.random.default_rng(seed)
    vocab = [f"é{i}" if i % 50 == 49 else f"w{i}" for i in range(30_000)]
    ranks = np.minimum(rng.zipf(1.2, size=records * 4 * 80), len(vocab)) - 1
    at = 0
    out = []
    for r in range(records):
        turns = []
        for t in range(4):
            n = int(rng.integers(20, 81))
            words = " ".join(vocab[k] for k in ranks[at : at + n])
            at += n
            turns.append({"from": "gpt" if t % 2 else "human", "value": ("<image>\n" if t == 0 else "") + words + "."})
        out.append({"id": str(r), "conversations": turns})
    path.write_text(json.dumps(out), encoding="utf-8")


def non_ascii_share(texts: Sequence[str]) -> float:
    """The share of words with a non-ASCII character."""
    words = [w for t in texts for w in t.split()]
    return sum(not w.isascii() for w in words) / max(len(words), 1)


def build_seconds(corpus: Path, tokenizer: WordTokenizer, workdir: Path) -> float:
    """Seconds to index the corpus with the tokenizer (2 threads, 1 GiB)."""
    index_dir = workdir / "index"
    shutil.rmtree(index_dir, ignore_errors=True)
    settings = IndexSettings(n=8, threshold=10, memory_bytes=1 << 30, threads=2)
    start = time.perf_counter()
    index = NgramIndex.create(index_dir, settings, meta={})
    index.add([RecordSource(corpus, "llava", tokenizer)], progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench_words_"))
    try:
        corpus = workdir / "train.json"
        write_corpus(corpus, args.records, args.seed)
        texts = [text for record in RecordSource(corpus, "llava", WordTokenizer()).records() for text in record.texts]
        start = time.perf_counter()
        word_table()  # built once per process, on first use
        table_s = time.perf_counter() - start
        start = time.perf_counter()
        ours, offsets = WordTokenizer().encode_concat(texts)
        ours_s = time.perf_counter() - start
        start = time.perf_counter()
        peer, peer_offsets = PythonWordTokenizer().encode_concat(texts)
        peer_s = time.perf_counter() - start
        agree = bool(np.array_equal(ours, peer) and np.array_equal(offsets, peer_offsets))
        builds: dict[str, list[float]] = {"ours": [], "peer": []}
        for _ in range(args.builds):
            builds["ours"].append(build_seconds(corpus, WordTokenizer(), workdir))
            builds["peer"].append(build_seconds(corpus, PythonWordTokenizer(), workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ours_build, peer_build = statistics.median(builds["ours"]), statistics.median(builds["peer"])
    print(
        json.dumps(
            {
                "bench": "words",
                "records": args.records,
                "words": int(len(ours)),
                "non_ascii_share": round(non_ascii_share(texts[:10_000]), 4),
                "split_ours_s": round(ours_s, 3),
                "table_s": round(table_s, 3),
                "split_peer": "the same rule in Python (regex, str.lower, xxhash)",
                "split_peer_s": round(peer_s, 3),
                "split_ratio": round(peer_s / ours_s, 1),
                "ours_mwords_per_s": round(len(ours) / ours_s / 1e6, 1),
                "build_ours_s": round(ours_build, 3),
                "build_peer_s": round(peer_build, 3),
                "build_ours_each": [round(s, 3) for s in builds["ours"]],
                "build_peer_each": [round(s, 3) for s in builds["peer"]],
                "build_ratio": round(peer_build / ours_build, 1),
                "agree": agree,
            }
        )
    )


if __name__ == "__main__":
    main()
