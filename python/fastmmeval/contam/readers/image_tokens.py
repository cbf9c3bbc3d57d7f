"""Image tokenizers for contamination audits: image -> 32 discrete token ids, batched.

The paper tokenizes images with SEED (32 codes from a 8,192-entry codebook) and calls two images
overlapping when they share an 8-gram of those codes. `SeedImageTokenizer` runs the real SEED tokenizer
from weights the user provides. `OfflineImageTokenizer` is a built-in substitute that needs no download:
a perceptual hash laid out as 32 tokens, so that resized, re-encoded and lightly cropped copies of an
image share an 8-token window while different images do not (docs/contam.md has the measured rates). It
finds copies, not semantically similar images: SEED's codes capture content, the substitute's only
appearance.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

from fastmmeval.errors import ConfigError

TOKENS_PER_IMAGE = 32


class ImageTokenizer(Protocol):
    """Images -> (n, 32) uint32 token ids; picklable (shard sources carry one to Ray workers). Work on one
    image (`prepare`: resizing, normalising) is separate from the batched step (`encode_prepared`), so that
    corpus readers run it on their decoding threads."""

    name: str

    @property
    def fingerprint(self) -> str:
        """Changes whenever the same image could map to other ids."""
        ...

    def prepare(self, image: Image.Image) -> np.ndarray:
        """One image's model input (thread-safe)."""
        ...

    def encode(self, images: Sequence[Image.Image]) -> np.ndarray:
        """encode_prepared of the prepared images."""
        ...

    def encode_prepared(self, prepared: Sequence[np.ndarray]) -> np.ndarray:
        """The 32 token ids of each prepared image, as an (n, 32) uint32 array."""
        ...

    def informative_windows(self, tokens: np.ndarray, n: int) -> np.ndarray:
        """For each n-token window of one image's tokens, whether a scan should look it up."""
        ...


class ImageTokenizerBase:
    """Gives `encode` to an image tokenizer that defines `prepare` and `encode_prepared`, and says every window
    of its tokens is worth looking up (a tokenizer whose tokens can carry no information overrides that)."""

    def encode(self, images: Sequence[Image.Image]) -> np.ndarray:
        """The 32 token ids of each image, as an (n, 32) uint32 array."""
        return self.encode_prepared([self.prepare(image) for image in images])  # type: ignore[attr-defined]

    def informative_windows(self, tokens: np.ndarray, n: int) -> np.ndarray:
        """For each n-token window of one image's tokens, whether it tells images apart (bool array)."""
        return np.ones(max(len(tokens) - n + 1, 0), bool)


def as_rgb(image: Image.Image) -> Image.Image:
    """The image in RGB (itself, not a copy, if it already is)."""
    return image if image.mode == "RGB" else image.convert("RGB")


def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix of size n."""
    x = np.arange(n)
    m = np.cos(np.pi * (2 * x[None, :] + 1) * np.arange(n)[:, None] / (2 * n)) * np.sqrt(2 / n)
    m[0] /= np.sqrt(2)
    return m


@dataclass(frozen=True)
class OfflineParams:
    """What changes between versions of the offline tokenizer."""

    sigma: float  # centre weighting: a Gaussian with this std (a fraction of the side)
    floor: float  # the dead zone is at least this wide (coefficients of a unit-variance image)
    chroma: float  # chroma dead zone, in 0..255 pixel units


class OfflineImageTokenizer(ImageTokenizerBase):
    """The built-in substitute for SEED: 32 tokens from the low-frequency 2-D DCT of a centre-weighted 32x32
    thumbnail.

    Token i describes the i-th lowest-frequency coefficient (zig-zag order, DC left out) of the grey level
    (contrast-normalised) quantised to five levels with a dead zone: below -B*t, -B*t..-t, within +-t,
    t..B*t, above B*t, where t is a fraction of the median magnitude of the 32 coefficients, and at least a
    floor: an image whose low frequencies are weak (flat, or a fine texture, where a light crop would move
    them at random) gets neutral tokens there rather than noise. Even positions also carry the same
    coefficient of the blue-yellow chroma (Cb) quantised to three levels on an absolute scale: grey images
    get a neutral level there, colour ones a colour cue that resizing, JPEG and small crops barely move.
    The dead zones absorb the small coefficients whose value a resize, JPEG or crop would push across a
    boundary; the centre weighting makes the border that a light crop removes matter little. The token id
    also encodes its position, so a window only matches the same window of another image.

    Version 2 (the default) has a higher floor, a slightly narrower centre weighting and a wider chroma dead
    zone than version 1: light crops of textures no longer break every window (docs/contam.md has the
    measured rates). Version 1 stays available (`offline:1`) for indexes built with it.
    """

    name = "offline"
    VERSION = 2  # the default (latest) version
    PARAMS = {
        1: OfflineParams(sigma=0.3, floor=0.05, chroma=6.0),
        2: OfflineParams(sigma=0.28, floor=0.4, chroma=14.0),
    }
    SIZE = 32
    DEAD_ZONE = 0.6  # t = DEAD_ZONE * median |coefficient| (at least the version's floor)
    OUTER = 4.0  # the outer levels start at OUTER * t
    NEUTRAL = 2 * 3 + 1  # a token's id modulo 16 when its grey level is within the dead zone and chroma neutral

    def __init__(self, version: int = VERSION) -> None:
        if version not in self.PARAMS:
            raise ConfigError(f"offline image tokenizer version {version}: expected one of {sorted(self.PARAMS)}")
        self.version = version
        self.params = self.PARAMS[version]
        n = self.SIZE
        self._dct = _dct_matrix(n)
        grid = (np.arange(n) - (n - 1) / 2) / (n * self.params.sigma)
        self._weight = np.exp(-(grid[:, None] ** 2 + grid[None, :] ** 2) / 2)
        freqs = [(u, v) for u in range(n) for v in range(n) if 0 < u + v <= 8]
        freqs.sort(key=lambda p: (p[0] + p[1], p[0]))
        self._rows = np.array([u for u, _ in freqs[:TOKENS_PER_IMAGE]])
        self._cols = np.array([v for _, v in freqs[:TOKENS_PER_IMAGE]])

    @property
    def fingerprint(self) -> str:
        """`offline-v<version>`."""
        return f"offline-v{self.version}"

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The (SIZE, SIZE, 3) RGB thumbnail (area-averaged, aspect ratio ignored)."""
        return np.asarray(as_rgb(image).resize((self.SIZE, self.SIZE), Image.Resampling.BOX))

    def _low_frequencies(self, planes: np.ndarray) -> np.ndarray:
        """(n, 32) centre-weighted DCT coefficients of (n, SIZE, SIZE) planes, in token order."""
        c = self._dct @ (planes * self._weight) @ self._dct.T
        return c[:, self._rows, self._cols]

    def informative_windows(self, tokens: np.ndarray, n: int) -> np.ndarray:
        """False for windows of neutral tokens only (no low-frequency content within the dead zones): such
        windows of two unrelated images match each other, so they are not evidence of a copy."""
        neutral = np.asarray(tokens) % 16 == self.NEUTRAL
        if len(neutral) < n:
            return np.zeros(0, bool)
        return ~np.lib.stride_tricks.sliding_window_view(neutral, n).all(axis=1)

    def encode_prepared(self, prepared: Sequence[np.ndarray]) -> np.ndarray:
        """The 32 token ids of each thumbnail: position * 16 + 3 * grey level (0..4) + chroma level (0..2)."""
        if not prepared:
            return np.zeros((0, TOKENS_PER_IMAGE), np.uint32)
        rgb = np.stack(prepared).astype(np.float64)
        grey = rgb @ np.array([0.299, 0.587, 0.114])
        grey = grey - grey.mean(axis=(1, 2), keepdims=True)
        grey = grey / (grey.std(axis=(1, 2), keepdims=True) + 1e-6)
        c = self._low_frequencies(grey)
        t = np.maximum(self.DEAD_ZONE * np.median(np.abs(c), axis=1, keepdims=True), self.params.floor)
        level = np.digitize(c / t, [-self.OUTER, -1.0, 1.0 + 1e-12, self.OUTER + 1e-12])
        chroma = self._low_frequencies(rgb @ np.array([-0.168736, -0.331264, 0.5]))
        cue = np.digitize(chroma, [-self.params.chroma, self.params.chroma + 1e-12])
        cue[:, 1::2] = 1
        return (np.arange(TOKENS_PER_IMAGE)[None, :] * 16 + level * 3 + cue).astype(np.uint32)


# The SEED tokenizer (AILab-CVC/seed-tokenizer-2): files expected in the weights folder.
SEED_QUANTIZER = "seed_quantizer.pt"
SEED_VIT = "eva_vit_g.pth"
SEED_CODE = "SEED"  # a checkout of github.com/AILab-CVC/SEED (for models/seed_qformer)
SEED_BERT = "bert-base-uncased"  # the Q-Former's BERT config and vocabulary (hub folder layout)
SEED_MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
SEED_STD = np.array([0.26862954, 0.26130258, 0.27577711])


@contextlib.contextmanager
def _working_dir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class SeedImageTokenizer(ImageTokenizerBase):
    """The real SEED tokenizer, from a folder holding `seed_quantizer.pt` (huggingface.co/AILab-CVC/
    seed-tokenizer-2), `eva_vit_g.pth` (the EVA-CLIP ViT-g that BLIP-2 uses, from the LAVIS bucket),
    `SEED/` (a checkout of github.com/AILab-CVC/SEED, whose `models/seed_qformer` defines the model) and
    `bert-base-uncased/` (config and vocabulary of the Q-Former's BERT). Loaded on first use; 224x224
    bicubic resize and CLIP normalisation as SEED does. About 0.5 TFLOP per image: use a GPU.
    """

    name = "seed"

    def __init__(self, weights_dir: Path | str, device: str | None = None, fp16: bool | None = None) -> None:
        self.weights_dir = Path(weights_dir)
        self.device = device
        self.fp16 = fp16
        self._model: Any = None
        self.check_files()

    def __getstate__(self) -> dict[str, Any]:
        return {"weights_dir": self.weights_dir, "device": self.device, "fp16": self.fp16}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._model = None

    def check_files(self) -> None:
        """A ConfigError naming the first file or folder the weights folder lacks."""
        if not self.weights_dir.is_dir():
            raise ConfigError(f"--image_tokenizer seed:{self.weights_dir}: no such folder")
        for name in (SEED_QUANTIZER, SEED_VIT, SEED_CODE, SEED_BERT):
            if not (self.weights_dir / name).exists():
                raise ConfigError(
                    f"--image_tokenizer seed:{self.weights_dir}: missing {self.weights_dir / name} "
                    "(see docs/contam.md, 'Images: seed:<folder>, the real SEED tokenizer')"
                )

    @property
    def fingerprint(self) -> str:
        """`seed:<hash of the size and first 4 MiB of seed_quantizer.pt>` (same weights, same codes, wherever
        the folder lives)."""
        path = self.weights_dir / SEED_QUANTIZER
        with open(path, "rb") as f:
            head = f.read(4 << 20)
        return f"seed:{hashlib.sha256(str(path.stat().st_size).encode() + head).hexdigest()[:16]}"

    def model(self) -> Any:
        """The SEED quantizer, built from the SEED code with the local ViT and BERT files."""
        if self._model is not None:
            return self._model
        import torch

        code = str(self.weights_dir / SEED_CODE)
        if code not in sys.path:
            sys.path.insert(0, code)
        from models.seed_qformer import eva_vit  # type: ignore[import-not-found]
        from models.seed_qformer.qformer_quantizer import Blip2QformerQuantizer  # type: ignore[import-not-found]

        vit = str(self.weights_dir / SEED_VIT)
        # SEED's ViT builder downloads eva_vit_g.pth from a URL; point it at the local copy instead.
        eva_vit.download_cached_file = lambda url, check_hash=False, progress=False: vit
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        fp16 = device != "cpu" if self.fp16 is None else self.fp16
        # The Q-Former loads "bert-base-uncased" by name: resolve it to the folder in weights_dir.
        with _working_dir(self.weights_dir):
            model = Blip2QformerQuantizer.from_pretrained(
                pretrained_model_path=str(self.weights_dir / SEED_QUANTIZER), vit_precision="fp16" if fp16 else "fp32"
            )
        model = model.eval().to(device)
        self._model = model.half() if fp16 else model
        self.device, self.fp16 = device, fp16
        return self._model

    def prepare(self, image: Image.Image) -> np.ndarray:
        """The (3, 224, 224) float32 input: bicubic resize, CLIP normalisation."""
        pixels = np.asarray(as_rgb(image).resize((224, 224), Image.Resampling.BICUBIC), np.float32) / 255
        return ((pixels - SEED_MEAN) / SEED_STD).astype(np.float32).transpose(2, 0, 1)

    def encode_prepared(self, prepared: Sequence[np.ndarray]) -> np.ndarray:
        """The 32 SEED codes of each prepared image."""
        if not prepared:
            return np.zeros((0, TOKENS_PER_IMAGE), np.uint32)
        import torch

        model = self.model()
        x = torch.from_numpy(np.stack(prepared)).to(self.device)
        with torch.no_grad():
            ids, _ = model.get_codebook_indices(x.half() if self.fp16 else x)
        return ids.view(len(prepared), -1).cpu().numpy().astype(np.uint32)


def make_image_tokenizer(spec: str) -> OfflineImageTokenizer | SeedImageTokenizer | None:
    """`offline` (the built-in substitute, latest version), `offline:<version>`, `seed:<weights folder>`, or
    `none` (text only)."""
    if spec == "none":
        return None
    if spec == "offline":
        return OfflineImageTokenizer()
    if spec.startswith("offline:") and spec[8:].isdigit():
        return OfflineImageTokenizer(int(spec[8:]))
    if spec.startswith("seed:"):
        return SeedImageTokenizer(spec.split(":", 1)[1])
    raise ConfigError(
        f"--image_tokenizer {spec!r}: expected offline, offline:<version>, seed:<weights folder> or none"
    )
