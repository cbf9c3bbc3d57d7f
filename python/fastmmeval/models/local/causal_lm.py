"""A text-only causal language model over transformers: chat generation and log-likelihoods.

Reusable by any backend that turns its requests into text chats.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fastmmeval.engine.engine import Engine
from fastmmeval.engine.loading import ready_for_engine
from fastmmeval.engine.probe import PROBE_TEXT
from fastmmeval.engine.runner import token_prefill
from fastmmeval.engine.scoring import score_continuations
from fastmmeval.errors import ConfigError
from fastmmeval.protocol import GenerationSettings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

ChatMessages = list[dict[str, str]]



class CausalLM:
    """A chat causal LM loaded with `from_pretrained` from a local folder or hub id (optionally a
    GGUF file inside it). With `prune` (the default), the final decoder layer's query projection,
    MLP and output projection run on the last position only in the engine's prefills, where a
    load-time check shows the logits unchanged (`engine.pruning`)."""

    def __init__(self, name_or_path: str, gguf_file: str = "", dtype: str = "float32",
                 batch_size: int = 8, max_batch_tokens: int = 4096, prune: bool = True) -> None:
        if dtype not in DTYPES:
            raise ConfigError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if gguf_file and importlib.util.find_spec("gguf") is None:
            raise ConfigError(f"loading {gguf_file} needs the gguf package: pip install gguf")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.name_or_path = name_or_path
        self.gguf_file = gguf_file
        self.dtype = dtype
        self.batch_size = batch_size
        kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=DTYPES[dtype], **kwargs)
        except (OSError, ValueError) as e:
            where = f"{name_or_path}/{gguf_file}" if gguf_file else name_or_path
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"cannot load causal LM {where!r}: {first}") from None
        self.model.eval()
        if not self.tokenizer.chat_template:
            raise ConfigError(f"tokenizer of {name_or_path!r} has no chat template")
        self.eos_ids = self._eos_ids()
        if not self.eos_ids:
            raise ConfigError(f"{name_or_path!r} declares no EOS token")
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        ready_for_engine(self.model, self.text_ids(PROBE_TEXT), self.pad_id, prune)
        self.engine = Engine(self.model, self.eos_ids, partial(self.tokenizer.decode, skip_special_tokens=True),
                             partial(token_prefill, pad_id=self.pad_id), max_batch_size=batch_size,
                             max_batch_tokens=max_batch_tokens)

    def _eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, self.model.generation_config.eos_token_id,
                       self.model.config.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return ids

    def chat_ids(self, messages: ChatMessages) -> list[int]:
        """Token ids of `messages` under the tokenizer's chat template, ending with the assistant
        turn's opening."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.text_ids(text)

    def text_ids(self, text: str) -> list[int]:
        """Token ids of plain `text` (no special tokens added)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(self, prompts: list[ChatMessages], settings: list[GenerationSettings]) -> list[str]:
        """The assistant's reply to each chat, decoded per its settings (greedy at temperature 0,
        else seeded sampling), cut at EOS, at the first stop string or at max_new_tokens; decoded
        by the continuous-batching engine."""
        if len(prompts) != len(settings):
            raise ValueError(f"{len(prompts)} prompts but {len(settings)} settings")
        seqs = self.engine.generate([(self.chat_ids(p), s, None) for p, s in zip(prompts, settings, strict=True)])
        return [seq.text for seq in seqs]

    @torch.inference_mode()
    def loglikelihood(self, prompt_messages: ChatMessages,
                      continuations: list[str]) -> tuple[list[float], list[bool]]:
        """For each continuation placed at the start of the assistant turn after
        `prompt_messages`: the sum of its tokens' log-probabilities (float32), and whether greedy
        decoding would produce exactly those tokens."""
        context = self.chat_ids(prompt_messages)
        conts = [self.text_ids(c) for c in continuations]
        prefix = {"input_ids": torch.tensor([context])}
        return score_continuations(self.model, prefix, len(context), len(context), conts, self.pad_id, self.batch_size)

    def fingerprint(self) -> dict[str, Any]:
        """The model's name or path, GGUF file, dtype and hashes of its config, chat template and
        weight files (name and size)."""
        config = self.model.config.to_dict()
        for volatile in ("_name_or_path", "transformers_version"):
            config.pop(volatile, None)
        root = Path(self.name_or_path)
        weights = {}
        if root.is_dir():
            names = [self.gguf_file] if self.gguf_file else [
                p.name for p in root.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf")]
            weights = {n: (root / n).stat().st_size for n in sorted(names) if (root / n).is_file()}
        return {
            "lm": self.name_or_path,
            "gguf_file": self.gguf_file,
            "dtype": self.dtype,
            "config_sha256": _sha(json.dumps(config, sort_keys=True, default=str)),
            "chat_template_sha256": _sha(self.tokenizer.chat_template),
            "weight_files": weights,
        }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
