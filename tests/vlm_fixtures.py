"""Tiny random-weight vision-language models of real architectures, saved to a folder.

Each builder writes a model, a trained BPE tokenizer with the family's special tokens and chat
template, and the family's image processor (and processor where one applies) into `folder`, so that
`AutoModelForImageTextToText`, `AutoTokenizer` and `AutoImageProcessor` load it by path like a
user's checkpoint. Weights are drawn at a large scale so greedy choices are far from ties.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastmmeval.testing.random_init import LLAVA_TEMPLATE, draw_large_weights

CORPUS = [
    "The cat sat on the mat. A rocket flew to the moon. Coffee is hot.",
    "What animal is in this image? Answer with one word: cat, dog, horse or bird.",
    "Describe the picture. Is there a person? How many coins are there? Yes, no, maybe.",
    "You answer questions about images. USER: ASSISTANT: User: Assistant: system user assistant",
    "0 1 2 3 4 5 6 7 8 9 the quick brown fox jumps over the lazy dog",
]

# Chat templates in the style each family ships on the hub (simplified where harmless).
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IDEFICS3_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
SMOLVLM_TEMPLATE = "<|im_start|>" + IDEFICS3_TEMPLATE.removeprefix("<|begin_of_text|>")


def _tokenizer(specials: list[str], **named: str) -> Any:
    """A byte-level BPE trained on CORPUS with `specials` as special tokens, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=400 + len(specials), special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, **named)


def _text_config(tok: Any) -> dict[str, Any]:
    return dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                tie_word_embeddings=False)


def build_llava(folder: str | Path) -> Path:
    """LLaVA-1.5 style: CLIP vision tower (32 px, 8 px patches: 16 image tokens), Llama text model,
    CLIP image processor and LlavaProcessor."""
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    folder = Path(folder)
    tok = _tokenizer(["<pad>", "<s>", "</s>", "<image>"], bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tok.padding_side = "left"
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    config = LlavaConfig(vision_config=vision.to_dict(), text_config=_text_config(tok),
                         image_token_index=tok.convert_tokens_to_ids("<image>"), image_seq_length=16,
                         vision_feature_select_strategy="default", vision_feature_layer=-2)
    config.text_config.model_type = "llama"
    model = LlavaForConditionalGeneration(config)
    draw_large_weights(model, seed=1, head_scale=8.0)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=8,
                               vision_feature_select_strategy="default", chat_template=LLAVA_TEMPLATE,
                               num_additional_image_tokens=1)
    tok.chat_template = LLAVA_TEMPLATE
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def build_qwen2_vl(folder: str | Path) -> Path:
    """Qwen2-VL: 14 px patches merged 2x2, images resized to 28-56 px (1-4 image tokens each),
    M-RoPE text model; saves the image processor and tokenizer (its processor needs torchvision)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
    tok = _tokenizer(specials, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.padding_side = "left"
    tok.chat_template = QWEN2_VL_TEMPLATE
    text = _text_config(tok)
    text.update(bos_token_id=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision,
                           image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
                           video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                           vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
                           vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    model = Qwen2VLForConditionalGeneration(config)
    draw_large_weights(model, seed=2, head_scale=8.0)
    image_processor = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=56 * 56, patch_size=14,
                                            merge_size=2, temporal_patch_size=2)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    image_processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def build_idefics3(folder: str | Path) -> Path:
    """Idefics3 / SmolVLM layout: SigLIP-like vision tower on 32 px tiles (4 image tokens per tile
    after pixel shuffle), images split into up to 2x2 tiles plus a global view, Llama text model."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

    folder = Path(folder)
    specials = ["<pad>", "<|begin_of_text|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
                "<global-img>"] + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = _tokenizer(specials, bos_token="<|begin_of_text|>", eos_token="<end_of_utterance>", pad_token="<pad>")
    tok.padding_side = "left"
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text = _text_config(tok)
    text["model_type"] = "llama"
    config = Idefics3Config(vision_config=vision, text_config=text, scale_factor=2,
                            image_token_id=tok.convert_tokens_to_ids("<image>"),
                            pad_token_id=tok.pad_token_id)
    model = Idefics3ForConditionalGeneration(config)
    draw_large_weights(model, seed=3, head_scale=8.0)
    image_processor = Idefics3ImageProcessor(size={"longest_edge": 64}, max_image_size={"longest_edge": 32},
                                             do_image_splitting=True)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok, image_seq_len=4,
                                  chat_template=IDEFICS3_TEMPLATE)
    tok.chat_template = IDEFICS3_TEMPLATE
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def build_smolvlm(folder: str | Path) -> Path:
    """SmolVLM: the Idefics3 layout with SmolVLM's classes and template. Its processor cannot be
    built without torchvision (video processor), so the folder holds what a hub checkpoint holds:
    model, image processor, tokenizer, chat template and `processor_config.json`."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration, SmolVLMImageProcessor

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
                "<global-img>"] + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = _tokenizer(specials, bos_token="<|im_start|>", eos_token="<end_of_utterance>", pad_token="<|endoftext|>")
    tok.padding_side = "left"
    tok.chat_template = SMOLVLM_TEMPLATE
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  image_size=32, patch_size=8)
    text = _text_config(tok)
    text["model_type"] = "llama"
    config = SmolVLMConfig(vision_config=vision, text_config=text, scale_factor=2,
                           image_token_id=tok.convert_tokens_to_ids("<image>"), pad_token_id=tok.pad_token_id)
    model = SmolVLMForConditionalGeneration(config)
    draw_large_weights(model, seed=4, head_scale=8.0)
    image_processor = SmolVLMImageProcessor(size={"longest_edge": 64}, max_image_size={"longest_edge": 32},
                                            do_image_splitting=True)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    image_processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "processor_config.json").write_text(
        json.dumps({"image_seq_len": 4, "processor_class": "SmolVLMProcessor"}, indent=2))
    return folder


BUILDERS = {"llava": build_llava, "qwen2_vl": build_qwen2_vl, "idefics3": build_idefics3,
            "smolvlm": build_smolvlm}
