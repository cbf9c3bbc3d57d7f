"""The evolve tools that run model weights the user gives as a local folder (what `save_pretrained`
writes): `detect`, open-vocabulary object detection through transformers' zero-shot-object-detection
pipeline (OWL-ViT, OWLv2, Grounding DINO, ...), and `depth`, through its depth-estimation pipeline
(Depth Anything V2, DPT, ...). A folder is checked when the tool is made; its weights load on first use."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.tool_inputs import Param, Region
from fastmmeval.evolve.tools import Lazy, Tool, box_text, position

# Each weighted tool's transformers pipeline task, and what weights it takes.
WEIGHTED = {"detect": "zero-shot-object-detection", "depth": "depth-estimation"}
_EXAMPLES = {"detect": "an open-vocabulary detector such as OWLv2, OWL-ViT or Grounding DINO",
             "depth": "a depth model such as Depth Anything V2 or DPT"}
# Depth models whose output grows towards the camera (relative inverse depth) or away from it (metric depth).
_NEARER_IS_LARGER = frozenset({"dpt", "depth_anything"})
_FARTHER_IS_LARGER = frozenset({"glpn", "zoedepth", "depth_pro"})
MAX_DETECTIONS = 20
_OVERLAP = 0.5  # boxes of one label overlapping more than this (IoU) are one detection
_WEIGHT_FILES = ("*.safetensors", "*.bin")
_GRID = ((("top-left", "top-center", "top-right"), ("middle-left", "center", "middle-right"),
          ("bottom-left", "bottom-center", "bottom-right")))


def weights_hint(name: str) -> str:
    """How to give the weighted tool `name` its weights."""
    return (f"it needs model weights: give a local folder with --tool_weights {name}=DIR ({_EXAMPLES[name]}, "
            f"a transformers {WEIGHTED[name]} model)")


def weighted_tool(name: str, folder: Path) -> Tool:
    """The tool `name` (a key of WEIGHTED) over the model in `folder`, checked now, loaded on first use."""
    config = _check_folder(name, folder)
    model = Lazy(lambda: _pipeline(name, folder))
    fingerprint = Lazy(lambda: _folder_fingerprint(folder, config))
    if name == "detect":
        return _detect_tool(model, fingerprint)
    return _depth_tool(model, fingerprint, _sense(folder, config))


def _check_folder(name: str, folder: Path) -> dict[str, Any]:
    where = f"--tool_weights {name}={folder}"
    if not folder.is_dir():
        raise ConfigError(f"{where}: no such folder ({weights_hint(name)})")
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no config.json in it (a transformers model folder, as save_pretrained "
                          "writes it)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a readable JSON model config ({e})") from None
    from transformers.models.auto import modeling_auto

    known = {"detect": modeling_auto.MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES,
             "depth": modeling_auto.MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES}[name]
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind not in known:
        raise ConfigError(f"{where}: model type {kind!r} is not a {WEIGHTED[name]} model "
                          f"(transformers knows: {', '.join(sorted(known))})")
    if not any(next(folder.glob(pattern), None) for pattern in _WEIGHT_FILES):
        raise ConfigError(f"{where}: no weights in it (*.safetensors or *.bin)")
    return config


def _sense(folder: Path, config: dict[str, Any]) -> float:
    kind = config["model_type"]
    if kind in _FARTHER_IS_LARGER or config.get("depth_estimation_type") == "metric":
        return -1.0
    if kind in _NEARER_IS_LARGER:
        return 1.0
    raise ConfigError(f"--tool_weights depth={folder}: the depth tool does not know whether {kind!r}'s output grows "
                      f"nearer or farther (it takes: {', '.join(sorted(_NEARER_IS_LARGER | _FARTHER_IS_LARGER))})")


def _pipeline(name: str, folder: Path) -> Any:
    import torch
    from transformers import pipeline

    try:
        return pipeline(WEIGHTED[name], model=str(folder), device=0 if torch.cuda.is_available() else -1)
    except Exception as e:  # transformers raises many kinds for a folder it cannot load
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"--tool_weights {name}={folder}: transformers cannot load it as a {WEIGHTED[name]} model "
                          f"({type(e).__name__}: {reason[:200]})") from None


def _folder_fingerprint(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    import transformers

    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin",
                                                                                ".txt", ".model"))
    return {"model_type": config["model_type"], "transformers": transformers.__version__,
            "files": {p.name: _file_sha(p) for p in files}}


def _file_sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0) * max(h, 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _kept(found: list[dict[str, Any]]) -> list[tuple[str, float, tuple[float, ...]]]:
    """The detections, best first, without those overlapping a better one of the same label."""
    kept: list[tuple[str, float, tuple[float, ...]]] = []
    for hit in sorted(found, key=lambda d: -float(d["score"])):
        box = tuple(float(hit["box"][k]) for k in ("xmin", "ymin", "xmax", "ymax"))
        if all(label != hit["label"] or _iou(box, other) <= _OVERLAP for label, _, other in kept):
            kept.append((hit["label"], float(hit["score"]), box))
    return kept[:MAX_DETECTIONS]


def _detect_tool(detector: Lazy[Any], fingerprint: Lazy[dict[str, Any]]) -> Tool:
    def run(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        region: Region = args["region"]
        labels, least = list(args["labels"]), args["min_score"]
        x0, y0, *_ = region.pixels(image.size)
        found = _kept(detector()(region.crop(image), candidate_labels=labels, threshold=least))
        counts = Counter(label for label, *_ in found)
        head = (f"{len(found)} detection(s) of {', '.join(labels)} in {region.describe(image.size)} (score at least "
                f"{least:.2f}); by label: " + ", ".join(f"{label} {counts[label]}" for label in labels))
        items = []
        for i, (label, score, (bx0, by0, bx1, by1)) in enumerate(found, 1):
            box = (round(bx0) + x0, round(by0) + y0, round(bx1) + x0 + 1, round(by1) + y0 + 1)
            centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
            items.append(f"{i}. {label} {score:.2f} at {position(centre, image.size)} ({box_text(box, image.size)})")
        return head + (": " + "; ".join(items) if items else "")

    return Tool("detect", "Finds objects named in words (an open-vocabulary detector).",
                "how many of each label were found and each detection, best first, with its score, position and "
                "box.", {"labels": Param("labels", "what to look for", required=True),
                         "region": Param("region", "the part of the image to look in", default="whole"),
                         "min_score": Param("score", "the least score a detection needs", default="0.1")},
                run, model=fingerprint)


def _depth_tool(estimator: Lazy[Any], fingerprint: Lazy[dict[str, Any]], sense: float) -> Tool:
    def run(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        region: Region = args["region"]
        raw = np.asarray(estimator()(image)["predicted_depth"].detach().float().cpu().numpy(), dtype=np.float64)
        raw = raw.reshape(raw.shape[-2:]) * sense
        span = raw.max() - raw.min()
        near = (raw - raw.min()) / span if span > 0 else np.zeros_like(raw)
        if near.shape[::-1] != image.size:
            near = np.asarray(Image.fromarray(near.astype(np.float32)).resize(image.size, Image.Resampling.BILINEAR))
        h, w = near.shape
        parts = {name: float(near[r * h // 3:(r + 1) * h // 3, c * w // 3:(c + 1) * w // 3].mean())
                 for r, row in enumerate(_GRID) for c, name in enumerate(row)}
        x0, y0, x1, y1 = region.pixels(image.size)
        nearest, farthest = max(parts, key=parts.get), min(parts, key=parts.get)  # type: ignore[arg-type]
        return (f"mean nearness of {region.describe(image.size)}: {near[y0:y1, x0:x1].mean():.2f} (0 = the farthest "
                f"point of the image, 1 = the nearest; whole image {near.mean():.2f}); nearest part: {nearest}, "
                f"farthest: {farthest}; by part: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))

    return Tool("depth", "Estimates how near each part of the picture is to the camera (a depth model).",
                "the mean nearness (0 farthest, 1 nearest) of the region, and of each ninth of the image.",
                {"region": Param("region", "the part of the image to measure", default="whole")}, run,
                model=fingerprint)
