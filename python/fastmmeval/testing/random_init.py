"""Random weights for test and bench models that make clear greedy choices."""

from __future__ import annotations

import math
from typing import Any


def draw_large_weights(model: Any, seed: int, head_scale: float = 1.0) -> None:
    """Redraw (seeded) Linear and Conv weights with std 1/sqrt(fan_in), biases with std 0.1 and
    embeddings with std 1, and the output head with std head_scale/sqrt(fan_in). Default inits of
    a random model give near-tied logits, so greedy choices flip on float noise; at this scale the
    top two tokens stand well apart."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, 1.0 / math.sqrt(module.in_features))
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1)
            elif isinstance(module, torch.nn.Embedding):
                module.weight.normal_(0.0, 1.0)
            elif isinstance(module, torch.nn.Conv2d | torch.nn.Conv3d):
                module.weight.normal_(0.0, 1.0 / math.sqrt(module.weight[0].numel()))
        if head_scale != 1.0:
            head = model.get_output_embeddings()
            head.weight.normal_(0.0, head_scale / math.sqrt(head.in_features))


# LLaVA-1.5's chat template as llava-hf ships it, also accepting string contents (lmms-eval's
# `llava_hf` passes the user turn as one string with `<image>\n` in front).
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}"
    "{% endfor %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' ' }}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_CORPUS = [
    "The cat sat on the mat. A rocket flew to the moon. Coffee is hot.",
    "What animal is in this image? Answer with one word: cat, dog, horse or bird.",
    "Image: it likely shows tabby cat, tiger cat, Egyptian cat; text in the image: STOP 42.",
    "You answer questions about images from their descriptions. Yes, no, maybe.",
    "0 1 2 3 4 5 6 7 8 9 the quick brown fox jumps over the lazy dog",
]


def write_tiny_chat_lm(folder: Any, seed: int = 0) -> None:
    """Save a tiny random-weight Llama chat model (2 layers, hidden 64) with a real trained
    byte-level BPE tokenizer and a ChatML template into `folder`: a cheap stand-in for a hub
    checkpoint in tests and benches. Weights are drawn by `draw_large_weights`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(TINY_CORPUS * 4, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<pad>", bos_token="<|endoftext|>"
    )
    tok.chat_template = TINY_CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    draw_large_weights(model, seed=seed)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
