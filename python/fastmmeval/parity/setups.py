"""What lmms-eval 0.7.3's side of a task needs to run here, offline and in seconds, with its scoring
unchanged: patches that `PeerTask.load` adds (`patches.PEER_SETUPS`), registered by the lmms-eval
task folder whose `utils` they patch (so a folder's lite and other variants get them too).

- Captioning (coco_cap, flickr30k, nocaps, textcaps, refcoco, refcoco+, refcocog): pycocoevalcap
  runs PTBTokenizer (a Java process) twice and starts a METEOR jar in each aggregation of each
  metric, some 20 Java starts per scoring. PTBTokenizer runs here once per distinct caption (it
  tokenizes each line on its own: `-preserveLines`), and METEOR is the one process our METEOR uses
  (the jar scores each segment on its own).
- ocrbench: its per-category totals are a module-level dict that each aggregation adds to and none
  resets; here each aggregation starts from zeros, as a fresh lmms-eval process does.
- mmmu: its doc_to_messages sets a module-wide `interleaved_format` flag that none resets, after
  which its doc_to_text of every MMMU task writes `<image>` for the `<image N>` tags; here each
  use starts from the config its template file gives.
- gqa: its process_docs downloads the image config lmms-lab-encoder/GQA testdev_balanced_images;
  here it reads the rows our gqa reads (saved under --data_dir, or the hub cache)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fastmmeval.metrics.caption import meteor_scorer
from fastmmeval.parity.patches import PEER_SETUPS, Fresh
from fastmmeval.parity.peer import PeerTask, PeerUnavailable
from fastmmeval.tasks.families.vqa import GQA_IMAGES, GQA_IMAGES_SPLIT
from fastmmeval.tasks.sources import Rows, load_rows


class LinePTBTokenizer:
    """pycocoevalcap's PTBTokenizer, run only on the captions it has not tokenized yet in this
    process (all of them in one Java call); when a caption is more than one line to Java, the whole
    input goes to PTBTokenizer as it is."""

    _tokens: dict[str, str] = {}  # caption -> PTBTokenizer's tokens of it

    def tokenize(self, captions_for_image: Mapping[Any, Sequence[Mapping[str, str]]]) -> dict[Any, list[str]]:
        """{image id: [tokens of each caption]}, as PTBTokenizer.tokenize."""
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

        texts = [c["caption"] for cs in captions_for_image.values() for c in cs]
        if any(len(t.replace("\n", " ").splitlines()) > 1 for t in texts):
            return PTBTokenizer().tokenize(captions_for_image)
        missing = list(dict.fromkeys(t for t in texts if t not in self._tokens))
        if missing:
            tokens = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(missing)})
            self._tokens.update((t, tokens[i][0]) for i, t in enumerate(missing))
        return {k: [self._tokens[c["caption"]] for c in cs] for k, cs in captions_for_image.items()}


def _caption(peer: PeerTask) -> None:
    peer.patches |= {"utils.PTBTokenizer": LinePTBTokenizer, "utils.Meteor": meteor_scorer}


for _folder in ("coco_cap", "flickr30k", "nocaps", "textcaps", "refcoco", "refcoco+", "refcocog"):
    PEER_SETUPS.add(_folder, _caption)


@PEER_SETUPS.register("ocrbench")
def _ocrbench(peer: PeerTask) -> None:
    categories = tuple(peer.module("utils").OCRBench_score)
    peer.patches["utils.OCRBench_score"] = Fresh(lambda: dict.fromkeys(categories, 0))


def _gqa_images(path: str, name: str, split: str, **_: Any) -> Rows:
    """`datasets.load_dataset` as gqa_process_docs calls it: GQA's image rows, read as our gqa reads them."""
    if (path, name, split) != (GQA_IMAGES.path, GQA_IMAGES.name, GQA_IMAGES_SPLIT):
        raise PeerUnavailable(f"lmms-eval's gqa asks for {path} {name} {split}, not GQA's images")
    return load_rows(GQA_IMAGES, GQA_IMAGES_SPLIT)


@PEER_SETUPS.register("gqa")
def _gqa(peer: PeerTask) -> None:
    peer.patches["utils.load_dataset"] = _gqa_images


@PEER_SETUPS.register("mmmu")
def _mmmu(peer: PeerTask) -> None:
    config = copy.deepcopy(peer.module("utils").config)
    config["metadata"]["interleaved_format"] = False  # as its _default_template_yaml sets it

    peer.patches["utils.config"] = Fresh(lambda: copy.deepcopy(config))
