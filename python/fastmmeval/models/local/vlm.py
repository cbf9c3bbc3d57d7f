"""A vision-language model over transformers' `AutoModelForImageTextToText`: chats with images
through the model's own processor and chat template, batched prefill inputs (for the engine, which
does the decoding) and prefix-shared log-likelihoods.

Proven on LLaVA (1.5 style), Qwen2-VL (M-RoPE) and Idefics3 / SmolVLM layouts.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from fastmmeval.engine.loading import ready_for_engine
from fastmmeval.engine.probe import PROBE_TEXT
from fastmmeval.engine.pruning import unpruned_config_dict
from fastmmeval.engine.runner import Batch
from fastmmeval.engine.scoring import score_continuations
from fastmmeval.engine.tensors import left_pad
from fastmmeval.errors import ConfigError
from fastmmeval.models.local.causal_lm import DTYPES, _sha
from fastmmeval.protocol import ImagePart, Request, TextPart

# Per-token processor outputs (everything else a processor returns goes with the images).
TOKEN_KEYS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"})


@dataclass
class Prompt:
    """One request's model inputs before batching: token ids plus the image tensors that go with them."""

    ids: list[int]
    mm_token_type_ids: list[int] | None = None
    images: dict[str, torch.Tensor] = field(default_factory=dict)


class VisionLanguageModel:
    """An image-text-to-text model loaded with `from_pretrained` from a local folder or hub id;
    `batch_size` continuations are scored together. With `prune` (the default), work whose result
    is never read is cut at load, each cut kept only where a check shows outputs unchanged
    (`engine.pruning`): vision encoder layers after the deepest one the model reads, and the final
    decoder layer's query projection, MLP and output projection off the last position in the
    engine's prefills."""

    def __init__(self, folder_or_id: str, dtype: str = "float32", batch_size: int = 8, prune: bool = True) -> None:
        from transformers import AutoModelForImageTextToText

        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.name_or_path = folder_or_id
        self.dtype = dtype
        self.batch_size = batch_size
        try:
            self.model = AutoModelForImageTextToText.from_pretrained(folder_or_id, dtype=DTYPES[dtype])
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"cannot load image-text-to-text model {folder_or_id!r}: {first}") from None
        self.model.eval()
        self.processor, self.image_processor, self.tokenizer = _load_processing(folder_or_id)
        self.chat_template = (getattr(self.processor, "chat_template", None) or self.tokenizer.chat_template
                              or _legacy_chat_template(folder_or_id))
        if not self.chat_template:
            raise ConfigError(f"neither the processor nor the tokenizer of {folder_or_id!r} has a chat template")
        config = self.model.config
        self.image_token_id = _first_int(getattr(config, "image_token_id", None),
                                         getattr(config, "image_token_index", None))
        self.eos_ids = self._eos_ids()
        if not self.eos_ids:
            raise ConfigError(f"{folder_or_id!r} declares no EOS token")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self._forward_keys = set(inspect.signature(self.model.forward).parameters)
        self._rope_index = getattr(getattr(self.model, "model", None), "get_rope_index", None)
        ready_for_engine(self.model, self.text_ids(PROBE_TEXT), self.pad_id, prune)

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id,
                       getattr(self.model.config, "eos_token_id", None),
                       getattr(self.model.config.get_text_config(), "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return ids

    # ----- prompts ---------------------------------------------------------------------------

    def chat_text(self, request: Request) -> tuple[str, list[Image.Image]]:
        """The request's chat rendered by the model's own chat template (image placeholders where
        the images stand, assistant turn opened), and its images in order."""
        conversation = []
        for message in request.messages:
            content: list[dict[str, str]] = []
            for part in message.content:
                if isinstance(part, ImagePart):
                    content.append({"type": "image"})
                elif isinstance(part, TextPart):
                    content.append({"type": "text", "text": part.text})
            conversation.append({"role": message.role, "content": content})
        render = self.processor if self.processor is not None else self.tokenizer
        text = render.apply_chat_template(conversation, chat_template=self.chat_template,
                                          add_generation_prompt=True, tokenize=False)
        return text, [img.convert("RGB") for img in request.images]

    def prompt(self, request: Request) -> Prompt:
        """Token ids (image tokens expanded as the model expects) and image tensors of one request."""
        text, images = self.chat_text(request)
        bos = self.tokenizer.bos_token
        special = not (bos and text.startswith(bos))
        if self.processor is not None:
            kwargs: dict[str, Any] = {}
            if images:
                kwargs["images"] = [images] if _nested_images(self.processor) else images
            out = self.processor(text=[text], return_tensors="pt", add_special_tokens=special, **kwargs)
        else:
            out = self._expand_without_processor(text, images, special)
        ids = out["input_ids"][0].tolist()
        mm = out.get("mm_token_type_ids")
        image_tensors = {k: v for k, v in out.items() if k not in TOKEN_KEYS}
        return Prompt(ids=ids, mm_token_type_ids=mm[0].tolist() if mm is not None else None, images=image_tensors)

    def _expand_without_processor(self, text: str, images: list[Image.Image], special: bool) -> dict[str, Any]:
        """What the model's processor would return, built from its image processor and tokenizer
        for when the processor itself does not load (its video processor needs torchvision).
        Two layouts are known: grid-merged patches (Qwen2-VL: each placeholder becomes
        t*h*w/merge^2 image tokens) and tiles (Idefics3/SmolVLM: each tile's image tokens wrapped
        in `<fake_token_around_image>` with `<row_i_col_j>` tags, then the global view)."""
        if self.image_token_id is None:
            raise ConfigError(f"{self.name_or_path!r}: no processor and no image token id in the config")
        image_token = self.tokenizer.convert_ids_to_tokens(self.image_token_id)
        out: dict[str, Any] = {}
        if images:
            pieces = text.split(image_token)
            if len(pieces) - 1 != len(images):
                raise ValueError(f"chat has {len(pieces) - 1} image placeholders but {len(images)} images")
            if hasattr(self.image_processor, "return_row_col_info"):  # tiling processors, one list per text
                pixels = dict(self.image_processor(images=[images], return_tensors="pt", return_row_col_info=True))
            else:
                pixels = dict(self.image_processor(images=images, return_tensors="pt"))
            if "image_grid_thw" in pixels:
                merge = int(getattr(self.image_processor, "merge_size", 1)) ** 2
                expanded = [image_token * (int(g.prod()) // merge) for g in pixels["image_grid_thw"]]
            elif "rows" in pixels and "cols" in pixels:
                rows, cols = pixels.pop("rows")[0], pixels.pop("cols")[0]
                expanded = [_tiled_image_prompt(int(r), int(c), self._image_seq_len(), image_token)
                            for r, c in zip(rows, cols, strict=True)]
            else:
                raise ConfigError(f"{self.name_or_path!r}: its processor did not load and its image processor "
                                  f"({type(self.image_processor).__name__}) is not of a kind usable without it")
            text = pieces[0] + "".join(e + rest for e, rest in zip(expanded, pieces[1:], strict=True))
            out.update(pixels)
        ids = torch.tensor([self.tokenizer(text, add_special_tokens=special)["input_ids"]])
        out["input_ids"] = ids
        if self._rope_index is not None:
            out["mm_token_type_ids"] = (ids == self.image_token_id).long()
        return out

    def _image_seq_len(self) -> int:
        """Image tokens per tile: the processor config's `image_seq_len`, else from the model config."""
        from transformers.utils import cached_file

        try:
            path = cached_file(self.name_or_path, "processor_config.json", _raise_exceptions_for_missing_entries=False)
        except OSError:
            path = None
        if path:
            value = json.loads(Path(path).read_text()).get("image_seq_len")
            if isinstance(value, int):
                return value
        config = self.model.config
        vision = config.vision_config
        return (vision.image_size // vision.patch_size) ** 2 // config.scale_factor ** 2

    def text_ids(self, text: str) -> list[int]:
        """Token ids of plain `text` (no special tokens added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def collate(self, prompts: list[Prompt]) -> Batch:
        """Left-pad prompts into one batch with attention mask, per-row position ids (M-RoPE
        positions from the model's own `get_rope_index` when it has one, with each row's
        `rope_delta` in its next position) and the rows' image tensors joined."""
        input_ids, mask = left_pad([p.ids for p in prompts], self.pad_id)
        inputs: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": mask}
        for key, value in _join_images([p.images for p in prompts]).items():
            inputs[key] = value.to(self.model.dtype) if value.is_floating_point() else value
        mm = None
        if any(p.mm_token_type_ids is not None for p in prompts):
            mm, _ = left_pad([p.mm_token_type_ids or [0] * len(p.ids) for p in prompts], 0)
        if self._rope_index is not None and mm is not None and "image_grid_thw" in inputs:
            positions, deltas = self._rope_index(input_ids, mm_token_type_ids=mm,
                                                 image_grid_thw=inputs["image_grid_thw"], attention_mask=mask)
            next_positions = mask.sum(-1) + deltas.view(-1)
        else:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            next_positions = mask.sum(-1)
        inputs["position_ids"] = positions
        if mm is not None and "mm_token_type_ids" in self._forward_keys:
            inputs["mm_token_type_ids"] = mm
        return Batch(inputs={k: v for k, v in inputs.items() if k in self._forward_keys},
                     next_positions=next_positions)

    # ----- log-likelihood --------------------------------------------------------------------

    @torch.inference_mode()
    def loglikelihood(self, request: Request, continuations: list[str] | None = None,
                      prompt: Prompt | None = None) -> tuple[list[float], list[bool]]:
        """For each continuation (the request's own when not given) placed at the start of the
        assistant turn: the sum of its tokens' log-probabilities (float32), and whether greedy
        decoding would produce exactly those tokens. The image and question (`prompt`, the
        request's own when not given) run once."""
        continuations = list(request.continuations if continuations is None else continuations)
        prompt = self.prompt(request) if prompt is None else prompt
        conts = [self.text_ids(c) for c in continuations]
        batch = self.collate([prompt])
        start = int(batch.next_positions[0])
        return score_continuations(
            self.model, batch.inputs, len(prompt.ids), start, conts, self.pad_id, self.batch_size
        )

    def fingerprint(self) -> dict[str, Any]:
        """The model's name or path, dtype and hashes of its config, chat template, image processor
        settings and weight files (name and size); the same with or without pruning."""
        config = unpruned_config_dict(self.model)
        for volatile in ("_name_or_path", "transformers_version"):
            config.pop(volatile, None)
        image_config = self.image_processor.to_dict() if self.image_processor is not None else {}
        root = Path(self.name_or_path)
        weights = {}
        if root.is_dir():
            weights = {p.name: p.stat().st_size for p in sorted(root.iterdir())
                       if p.suffix in (".safetensors", ".bin") and p.is_file()}
        return {
            "vlm": self.name_or_path,
            "dtype": self.dtype,
            "config_sha256": _sha(json.dumps(config, sort_keys=True, default=str)),
            "image_processor_sha256": _sha(json.dumps(image_config, sort_keys=True, default=str)),
            "chat_template_sha256": _sha(self.chat_template),
            "weight_files": weights,
        }


def is_vision_language(folder_or_id: str) -> bool:
    """Whether the checkpoint's config is one `AutoModelForImageTextToText` loads (so an `hf`
    backend should use VisionLanguageModel rather than a text-only causal LM)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(folder_or_id)
    except (OSError, ValueError):
        return False
    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def _load_processing(folder_or_id: str) -> tuple[Any, Any, Any]:
    """(processor or None, image processor, tokenizer). The processor is used when it loads;
    some (Qwen2-VL, SmolVLM) need torchvision for their video processor, and then the image
    processor and tokenizer are used directly."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        processor = AutoProcessor.from_pretrained(folder_or_id)
    except (ImportError, OSError, ValueError, AttributeError, TypeError):
        processor = None
    if processor is not None and hasattr(processor, "image_processor") and hasattr(processor, "tokenizer"):
        return processor, processor.image_processor, processor.tokenizer
    try:
        image_processor = AutoImageProcessor.from_pretrained(folder_or_id)
        tokenizer = AutoTokenizer.from_pretrained(folder_or_id)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"cannot load the image processor and tokenizer of {folder_or_id!r}: {first}") from None
    return None, image_processor, tokenizer


def _legacy_chat_template(folder_or_id: str) -> str | None:
    """The template in a processor's legacy `chat_template.json`, which tokenizers do not read."""
    from transformers.utils import cached_file

    try:
        path = cached_file(folder_or_id, "chat_template.json", _raise_exceptions_for_missing_entries=False)
    except OSError:
        return None
    if not path:
        return None
    template = json.loads(Path(path).read_text()).get("chat_template")
    return template if isinstance(template, str) else None


def _nested_images(processor: Any) -> bool:
    """Whether the processor takes images as one list per text (Idefics3, SmolVLM) rather than flat."""
    return hasattr(processor, "fake_image_token") or hasattr(processor, "global_image_tag")


def _join_images(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Image tensors of several rows as one batch. Per-row tiles (5-D pixel values, as Idefics3
    gives) are zero-padded to the most tiles (all-zero tiles are ignored by those models); rows
    without images get only padding tiles there. Otherwise tensors are joined along dim 0."""
    keys = sorted({k for row in rows for k in row})
    out: dict[str, torch.Tensor] = {}
    tiled = any(row.get("pixel_values") is not None and row["pixel_values"].ndim == 5 for row in rows)
    for key in keys:
        present = [row[key] for row in rows if key in row]
        if tiled and key in ("pixel_values", "pixel_attention_mask"):
            most = max(t.shape[1] for t in present)
            shape = present[0].shape[2:]
            padded = []
            for row in rows:
                t = row.get(key)
                have = 0 if t is None else t.shape[1]
                pad = present[0].new_zeros((1, most - have, *shape))
                padded.append(pad if t is None else torch.cat([t, pad], dim=1))
            out[key] = torch.cat(padded, dim=0)
        else:
            out[key] = torch.cat(present, dim=0)
    return out


def _tiled_image_prompt(rows: int, cols: int, seq_len: int, image_token: str) -> str:
    """The Idefics3/SmolVLM text for one image split into rows x cols tiles plus a global view."""
    fake, glob = "<fake_token_around_image>", "<global-img>"
    if rows == 0 and cols == 0:
        return fake + glob + image_token * seq_len + fake
    text = ""
    for i in range(rows):
        text += "".join(f"{fake}<row_{i + 1}_col_{j + 1}>" + image_token * seq_len for j in range(cols)) + "\n"
    return text + f"\n{fake}{glob}" + image_token * seq_len + fake


def _first_int(*values: Any) -> int | None:
    return next((v for v in values if isinstance(v, int)), None)
