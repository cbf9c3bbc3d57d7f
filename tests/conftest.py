"""Shared fixtures. Hub access is switched off before anything imports transformers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastmmeval.models.random_init import draw_large_weights

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# Triton kernels run on CPU tensors through its interpreter; read when a kernel module is imported.
os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Built datasets go to a per-session folder, not the user's cache."""
    os.environ["FASTMMEVAL_CACHE"] = str(tmp_path_factory.mktemp("cache"))

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "The cat sat on the mat. A rocket flew to the moon. Coffee is hot.",
    "What animal is in this image? Answer with one word: cat, dog, horse or bird.",
    "Image: it likely shows tabby cat, tiger cat, Egyptian cat; text in the image: STOP 42.",
    "You answer questions about images from their descriptions. Yes, no, maybe.",
    "0 1 2 3 4 5 6 7 8 9 the quick brown fox jumps over the lazy dog",
]


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a tiny random-weight Llama chat model and a real trained BPE tokenizer.

    Weights are drawn at a large scale so that greedy choices are far from ties."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<pad>",
                                  bos_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.bos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    draw_large_weights(model, seed=0)
    folder = tmp_path_factory.mktemp("tiny_lm")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
