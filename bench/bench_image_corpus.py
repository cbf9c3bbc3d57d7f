"""Image throughput of a contamination build's corpus reader: LLaVA-style records whose images are JPEG files.

The corpus is made from the real photos that install offline (scikit-image, scikit-learn, matplotlib):
random crops of each, resized to --side pixels on the long edge and saved as JPEG (quality 90), the size of
LLaVA's COCO images by default. Two readers tokenize the same images with the built-in `offline` image
tokenizer on the same threads:

- ours: `RecordSource.blocks()`, which decodes each image and makes its thumbnail on the decoding threads
  and runs only the batched DCT step on the calling thread, while the next batch is decoded;
- serial prepare: images decoded on the same threads, then `tokenizer.encode(images)` on the calling thread
  (thumbnails one after another), the shape the reader had before.

Both must give the same tokens. The same JPEGs then serve as a benchmark task (one question per image) read
by a contamination scan: `contam.audit.instances.read_instances` (docs read, images decoded and prepared on a pool of
every core, in order) against reading the docs one after another and tokenizing each batch of images, the
shape it had before; both must give the same n-gram hashes. Last, the corpus as a scan streams it again to
name training ids: its image tokens read back from the image cache an index build keeps
(`contam.ngram.image_cache`) against decoding and tokenizing every image again, as a scan did before; both must
give the same image documents and ids. The build's own pass keeping the tokens is timed too, against ours
without (the cost of keeping them). Prints one JSON line (images per second of each reader, their ratio;
the scan's read times and their ratio; the second pass's times and their ratio):
    .venv/bin/python bench/bench_image_corpus.py --images 2000 --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from fastmmeval.contam.audit.instances import read_instances
from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes
from fastmmeval.contam.ngram.image_cache import ImageTokenCache
from fastmmeval.contam.readers.image_tokens import OfflineImageTokenizer
from fastmmeval.contam.readers.shards import IMAGE_BATCH, RecordSource
from fastmmeval.contam.readers.text_tokens import WordTokenizer
from fastmmeval.protocol import ImagePart, TextPart
from fastmmeval.tasks.catalog import Catalog
from fastmmeval.tasks.task import Task
from fastmmeval.util import available_cores

PHOTOS = [
    ("skimage", "data/astronaut.png"), ("skimage", "data/chelsea.png"), ("skimage", "data/coffee.png"),
    ("skimage", "data/motorcycle_left.png"), ("skimage", "data/rocket.jpg"), ("skimage", "data/retina.jpg"),
    ("sklearn", "datasets/images/china.jpg"), ("sklearn", "datasets/images/flower.jpg"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
]  # fmt: skip


def _package_dir(package: str) -> Path:
    return Path(next(iter(importlib.util.find_spec(package).submodule_search_locations)))


def write_corpus(folder: Path, count: int, side: int, seed: int) -> Path:
    """count JPEGs (random crops of the photos, long edge `side`) and a LLaVA JSON with one record each."""
    rng = np.random.default_rng(seed)
    photos = [Image.open(_package_dir(pkg) / rel).convert("RGB") for pkg, rel in PHOTOS]
    (folder / "img").mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = photo.size
        cw, ch = (rng.uniform(0.6, 1.0, 2) * [w, h]).astype(int)
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        crop = photo.crop((x, y, x + cw, y + ch))
        scale = side / max(crop.size)
        crop.resize((round(crop.width * scale), round(crop.height * scale)), Image.Resampling.BILINEAR).save(
            folder / "img" / f"{i:06d}.jpg", quality=90
        )
        records.append({"id": str(i), "image": f"{i:06d}.jpg", "conversations": [{"from": "human", "value": "?"}]})
    path = folder / "train.json"
    path.write_text(json.dumps(records))
    return path


def ours(source: RecordSource) -> np.ndarray:
    """The image tokens of every record, as the index build reads them."""
    return np.concatenate([b.tokens for b in source.blocks() if b.seed == IMAGE_SEED])


def serial_prepare(source: RecordSource, tokenizer: OfflineImageTokenizer) -> np.ndarray:
    """Decode on the source's threads, then tokenize the decoded batch on this thread."""
    refs = [image for record in source.records() for image in record.images]
    out = []
    with ThreadPoolExecutor(source.decode_threads) as pool:
        for start in range(0, len(refs), source.image_batch):
            images = list(pool.map(source._open_image, refs[start : start + source.image_batch]))
            out.append(tokenizer.encode(images).ravel())
    return np.concatenate(out)


def streamed(source: RecordSource) -> tuple[np.ndarray, list[str]]:
    """The image documents' tokens and training ids of every block, as a scan streams the corpus."""
    images = [b for b in source.blocks() if b.seed == IMAGE_SEED]
    return np.concatenate([b.tokens for b in images]), [i for b in images for i in b.ids]


def write_task(folder: Path, count: int) -> Task:
    """A local benchmark task over the corpus's JPEGs (folder/img), one question per image."""
    rows = [{"id": f"q{i}", "image": f"img/{i:06d}.jpg", "question": f"What is shown in picture {i} here?",
             "answer": "x"} for i in range(count)]  # fmt: skip
    (folder / "bench_photos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "bench_photos.yaml").write_text(
        "task: bench_photos\ndataset:\n  data_files: {test: bench_photos.jsonl}\nsplit: test\ndoc_id: id\n"
        "doc_to_messages:\n  - role: user\n    content:\n      - image: image\n      - text: '{question}'\n"
        "output_type: generate\ntarget: answer\nextractor: raw\nmetrics: [exact_match]\n"
    )
    return Task(Catalog([folder]).tasks.get("bench_photos"))


def _digest(items: list[tuple[str, np.ndarray, list[np.ndarray]]]) -> str:
    h = hashlib.sha256()
    for doc_id, text_hashes, image_hashes in items:
        h.update(doc_id.encode())
        h.update(text_hashes.tobytes())
        for x in image_hashes:
            h.update(x.tobytes())
    return h.hexdigest()


def scan_read_ours(task: Task, tokenizer: OfflineImageTokenizer) -> str:
    """A digest of every instance's n-gram hashes, as a scan reads them."""
    instances = read_instances(task, WordTokenizer(), tokenizer, 8, progress=False)
    return _digest([(i.doc_id, i.text_hashes, i.image_hashes) for i in instances])


def scan_read_serial(task: Task, tokenizer: OfflineImageTokenizer) -> str:
    """The same digest, the docs read one after another and each batch of images tokenized on this thread."""
    words = WordTokenizer()
    items, batch = [], []

    def flush() -> None:
        tokens = tokenizer.encode([image for _, image in batch])
        for (item, _), row in zip(batch, tokens, strict=True):
            hashes = ngram_hashes(row, np.zeros(1, np.int64), 8, IMAGE_SEED)
            item[2].append(hashes[tokenizer.informative_windows(row, 8)])  # as a scan looks them up
        batch.clear()

    for ref in task.doc_refs():
        parts = [p for m in task.request(task.doc(ref), 0).messages for p in m.content]
        question = "\n".join(p.text for p in parts if isinstance(p, TextPart))
        ids = words.encode_spans(question)[0]
        item = (ref.id, ngram_hashes(ids, np.zeros(1, np.int64), 8, TEXT_SEED), [])
        items.append(item)
        batch += [(item, p.image) for p in parts if isinstance(p, ImagePart)]
        if len(batch) >= IMAGE_BATCH:
            flush()
    if batch:
        flush()
    return _digest(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--side", type=int, default=640, help="long edge of each JPEG, pixels")
    parser.add_argument("--threads", type=int, default=2, help="decoding threads of both readers")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes of each (alternated); the best is kept")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokenizer = OfflineImageTokenizer()
    with tempfile.TemporaryDirectory(prefix="bench_image_corpus_") as tmp:
        shard = write_corpus(Path(tmp), args.images, args.side, args.seed)
        source = RecordSource(
            shard, "llava", WordTokenizer(), tokenizer, shard.parent / "img", decode_threads=args.threads
        )
        keeping = replace(source, image_cache=ImageTokenCache(Path(tmp) / "cache", write=True))
        times: dict[str, list[float]] = {}
        results = {}
        for _ in range(args.rounds):
            for name, run in (
                ("ours", lambda: ours(source)),
                ("serial_prepare", lambda: serial_prepare(source, tokenizer)),
                ("ours_keeping_tokens", lambda: ours(keeping)),
            ):
                start = time.perf_counter()
                results[name] = run()
                times.setdefault(name, []).append(time.perf_counter() - start)
        task = write_task(Path(tmp), args.images)
        for _ in range(args.rounds):
            for name, run in (
                ("scan_ours", lambda: scan_read_ours(task, tokenizer)),
                ("scan_serial", lambda: scan_read_serial(task, tokenizer)),
            ):
                start = time.perf_counter()
                results[name] = run()
                times.setdefault(name, []).append(time.perf_counter() - start)
        cached = replace(source, image_cache=ImageTokenCache(Path(tmp) / "cache"))
        for _ in range(args.rounds):
            for name, run in (
                ("rescan_cached", lambda: streamed(cached)),
                ("rescan_decoded", lambda: streamed(source)),
            ):
                start = time.perf_counter()
                results[name] = run()
                times.setdefault(name, []).append(time.perf_counter() - start)
        cache_state = cached.cache_state()
    best = {name: min(t) for name, t in times.items()}
    (cached_tokens, cached_ids), (decoded_tokens, decoded_ids) = results["rescan_cached"], results["rescan_decoded"]
    print(
        json.dumps(
            {
                "bench": "image_corpus",
                "images": args.images,
                "side": args.side,
                "threads": args.threads,
                "ours_images_per_s": round(args.images / best["ours"], 1),
                "serial_prepare_images_per_s": round(args.images / best["serial_prepare"], 1),
                "ratio": round(best["serial_prepare"] / best["ours"], 2),
                "ours_s_each": [round(t, 3) for t in times["ours"]],
                "serial_prepare_s_each": [round(t, 3) for t in times["serial_prepare"]],
                "same_tokens": bool(np.array_equal(results["ours"], results["serial_prepare"])),
                "scan_read_s": round(best["scan_ours"], 3),
                "scan_read_serial_s": round(best["scan_serial"], 3),
                "scan_read_ratio": round(best["scan_serial"] / best["scan_ours"], 2),
                "scan_read_threads": available_cores(),
                "scan_same_hashes": results["scan_ours"] == results["scan_serial"],
                "keeping_tokens_s": round(best["ours_keeping_tokens"], 3),
                "keeping_tokens_cost": round(best["ours_keeping_tokens"] / best["ours"] - 1, 3),
                "rescan_cached_s": round(best["rescan_cached"], 3),
                "rescan_decoded_s": round(best["rescan_decoded"], 3),
                "rescan_ratio": round(best["rescan_decoded"] / best["rescan_cached"], 1),
                "rescan_cache_state": cache_state,
                "rescan_same": bool(np.array_equal(cached_tokens, decoded_tokens)) and cached_ids == decoded_ids,
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
