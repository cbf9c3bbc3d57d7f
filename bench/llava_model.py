"""A random-weight LLaVA-1.5-architecture model with realistic shapes, saved like a hub checkpoint.

CLIP ViT vision tower (224 px images, 14 px patches: 16 x 16 = 256 image tokens after the CLS
token is dropped, as LLaVA-1.5 does), a two-layer GELU projector and a Llama text model, with a
byte-level BPE tokenizer (BOS added, LLaVA-1.5 `USER: <image>\\n... ASSISTANT:` chat template), a
Pillow `CLIPImageProcessor` and a `LlavaProcessor` (`num_additional_image_tokens=1`). The folder
loads with `AutoProcessor` + `LlavaForConditionalGeneration` (what lmms-eval's `llava_hf` does)
and with `AutoModelForImageTextToText`, in any venv with transformers 5.

Weights are drawn at a large scale (Linear std 1/sqrt(fan_in), embeddings std 1) so the top two
logits differ clearly and greedy outputs do not flip on floating-point noise between batch
shapes. The EOS row of the output layer is scaled up (`eos_scale`) so that greedy replies end
on their own after a geometric-looking spread of lengths, like real short answers.

Usage: python bench/llava_model.py OUT_DIR [--layers 2 --hidden 512 ...]
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import time
from pathlib import Path
from typing import Any

from fastmmeval.testing.random_init import LLAVA_TEMPLATE, draw_large_weights

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]


def corpus() -> list[str]:
    """English text for the tokenizer: docstrings of the standard library and of the photo
    datasets the benches use, plus the chat words and question phrasings."""
    import collections
    import email
    import functools
    import http.client
    import itertools
    import json as json_module
    import os
    import pathlib
    import re
    import string
    import textwrap

    texts = []
    for module in (
        collections,
        email,
        functools,
        http.client,
        itertools,
        json_module,
        os,
        pathlib,
        re,
        string,
        textwrap,
        inspect,
        math,
        argparse,
    ):
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj)
            if doc:
                texts.append(doc)
    try:
        import skimage.data

        texts += [inspect.getdoc(getattr(skimage.data, n)) or "" for n in skimage.data.__all__]
    except ImportError:
        pass
    texts += [
        "USER: ASSISTANT: <image> What is shown in this image? Describe the photo in detail.",
        "What color is the object in the center? Answer with one word. How many people are there?",
        "Is there a cat, a dog, a rocket, a coin, a cup of coffee, an astronaut, a flower or a camera?",
        "yes no maybe one two three four five six seven eight nine ten red green blue white black",
    ] * 20
    return texts


def build_tokenizer(vocab_size: int = 4096) -> Any:
    """A byte-level BPE (`<s>` prepended on encode, like Llama's) wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus(),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIALS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bos = bpe.token_to_id("<s>")
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        padding_side="left",
        model_max_length=4096,
    )
    tok.chat_template = LLAVA_TEMPLATE
    return tok



def build_llava(
    folder: str | Path,
    layers: int = 2,
    hidden: int = 512,
    intermediate: int = 1408,
    heads: int = 8,
    kv_heads: int = 8,
    vision_layers: int = 2,
    vision_hidden: int = 384,
    vision_intermediate: int = 1536,
    vision_heads: int = 6,
    image_size: int = 224,
    patch: int = 14,
    vocab_size: int = 4096,
    eos_scale: float = 1.8,
    seed: int = 0,
) -> Path:
    """Write the model, tokenizer and processor into `folder` and return it. Image tokens per
    image: (image_size / patch)^2 (256 by default)."""
    import torch
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    if image_size % patch:
        raise ValueError(f"image_size {image_size} is not a multiple of patch {patch}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(vocab_size)
    image_tokens = (image_size // patch) ** 2
    vision = CLIPVisionConfig(
        hidden_size=vision_hidden,
        intermediate_size=vision_intermediate,
        num_hidden_layers=vision_layers,
        num_attention_heads=vision_heads,
        image_size=image_size,
        patch_size=patch,
        projection_dim=vision_hidden,
        hidden_act="quick_gelu",
    )
    text = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    config = LlavaConfig(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=image_tokens,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        projector_hidden_act="gelu",
        pad_token_id=tok.pad_token_id,
    )
    config.text_config.model_type = "llama"
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    draw_large_weights(model, seed)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[tok.eos_token_id] *= eos_scale
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
        image_mean=mean,
        image_std=std,
        do_convert_rgb=True,
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=patch,
        vision_feature_select_strategy="default",
        chat_template=LLAVA_TEMPLATE,
        num_additional_image_tokens=1,
    )
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    # Pin the Pillow image processor by name: where torchvision is installed, a plain
    # "CLIPImageProcessor" would load the torchvision one, whose resize differs in the last bits
    # from what lmms-eval's venv (no torchvision) uses.
    pin = folder / "processor_config.json"
    data = json.loads(pin.read_text())
    data.setdefault("image_processor", {})["image_processor_type"] = "CLIPImageProcessorPil"
    pin.write_text(json.dumps(data, indent=2) + "\n")
    return folder


def build_kwargs(text: str) -> dict[str, Any]:
    """`build_llava` keyword arguments from "k=v,k2=v2" (values typed like the defaults)."""
    defaults = {k: p.default for k, p in inspect.signature(build_llava).parameters.items() if k != "folder"}
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in defaults:
            raise SystemExit(f"unknown build_llava argument {key!r} (have: {', '.join(defaults)})")
        out[key] = type(defaults[key])(value)
    return out


def main() -> None:
    params = inspect.signature(build_llava).parameters
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    for name, p in params.items():
        if name != "folder":
            parser.add_argument(f"--{name}", type=type(p.default), default=p.default)
    args = vars(parser.parse_args())
    start = time.perf_counter()
    folder = build_llava(**args)
    print(f"wrote {folder} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
