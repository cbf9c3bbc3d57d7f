"""Text in images, read with RapidOCR (PP-OCRv4 ONNX models shipped inside its wheel)."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from fastmmeval.errors import ConfigError

INSTALL_HINT = "pip install --no-deps rapidocr-onnxruntime==1.4.4 (plus onnxruntime, opencv-python-headless, " \
               "pyclipper, shapely, six)"


class TextReader:
    """Reads the text lines of an image, in reading order, with their confidence."""

    def __init__(self, min_confidence: float = 0.5) -> None:
        spec = importlib.util.find_spec("rapidocr_onnxruntime")
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"OCR needs rapidocr-onnxruntime: {INSTALL_HINT}")
        self.model_dir = Path(spec.submodule_search_locations[0]) / "models"
        models = sorted(self.model_dir.glob("*.onnx"))
        if not models:
            raise ConfigError(f"no OCR models in {self.model_dir}: reinstall rapidocr-onnxruntime==1.4.4")
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as e:
            raise ConfigError(f"OCR cannot load rapidocr-onnxruntime ({e}): {INSTALL_HINT}") from None
        self.min_confidence = min_confidence
        self.models = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in models}
        # RapidOCR's own score filter is replaced by ours so both sides of the threshold are visible.
        self.engine = RapidOCR(text_score=0.0)

    def read(self, image: Image.Image) -> list[tuple[str, float]]:
        """Text lines (top to bottom, then left to right) with confidence >= the threshold."""
        result, _ = self.engine(image.convert("RGB"))
        found = []
        for box, text, score in result or []:
            pts = np.asarray(box, dtype=np.float32)
            if text.strip() and float(score) >= self.min_confidence:
                found.append((pts[:, 1].min(), pts[:, 1].max(), pts[:, 0].min(), text.strip(), float(score)))
        return [(text, score) for *_, text, score in _reading_order(found)]

    def fingerprint(self) -> dict[str, Any]:
        """The OCR model files (name and content hash) and the confidence threshold."""
        return {
            "ocr": "rapidocr-onnxruntime",
            "models": self.models,
            "min_confidence": self.min_confidence,
        }


def _reading_order(boxes: list[tuple[float, float, float, str, float]]) -> list[tuple]:
    """Groups boxes (top, bottom, left, ...) into lines by vertical overlap; lines top to bottom,
    boxes in a line left to right."""
    lines: list[list[tuple]] = []
    for box in sorted(boxes, key=lambda b: (b[0] + b[1]) / 2):
        centre = (box[0] + box[1]) / 2
        if lines and lines[-1][0][0] <= centre <= lines[-1][0][1]:
            lines[-1].append(box)
        else:
            lines.append([box])
    return [box for line in lines for box in sorted(line, key=lambda b: b[2])]
