"""Image throughput of a contamination build's corpus reader: LLaVA-style records whose images are JPEG files.

The corpus is made from the real photos that install offline (scikit-image, scikit-learn, matplotlib):
random crops of each, resized to --side pixels on the long edge and saved as JPEG (quality 90), the size of
LLaVA's COCO images by default. Two readers tokenize the same images with the built-in `offline` image
tokenizer on the same threads:

- ours: `RecordSource.blocks()`, which decodes each image and makes its thumbnail on the decoding threads
  and runs only the batched DCT step on the calling thread, while the next batch is decoded;
- serial prepare: images decoded on the same threads, then `tokenizer.encode(images)` on the calling thread
  (thumbnails one after another), the shape the reader had before.

Both must give the same tokens. Prints one JSON line (images per second of each, their ratio):
    .venv/bin/python bench/bench_image_corpus.py --images 2000 --threads 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from fastmmeval.contam.corpus import RecordSource
from fastmmeval.contam.hashing import IMAGE_SEED
from fastmmeval.contam.image_tokens import OfflineImageTokenizer
from fastmmeval.contam.text_tokens import WordTokenizer

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
        times: dict[str, list[float]] = {"ours": [], "serial_prepare": []}
        results = {}
        for _ in range(args.rounds):
            for name, run in (
                ("ours", lambda: ours(source)),
                ("serial_prepare", lambda: serial_prepare(source, tokenizer)),
            ):
                start = time.perf_counter()
                results[name] = run()
                times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}
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
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
