"""Open-ended VQA benchmarks (GQA, VQAv2, OK-VQA, VizWiz-VQA, TextVQA) as lmms-eval 0.7.3 runs them.

- `gqa`: GQA's instruction rows carry an `imageId`; the images are a second config of the same hub
  dataset, looked up by id, as lmms-eval's `gqa_process_docs` does.
- `vqav2_answers`: the annotator answers as lmms-eval's `vqav2_process_results` normalizes them.
- `capitalized_question`: the question as lmms-eval's TextVQA and VizWiz prompts print it.
- `exact_match_ignore_punct`: lmms-eval's `exact_match` metric with `ignore_case` and
  `ignore_punctuation` (GQA's metric).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastmmeval.errors import ConfigError, DocError
from fastmmeval.metrics import METRICS, Metric
from fastmmeval.metrics.vqa import normalize_vqa_answer
from fastmmeval.tasks.config import DatasetSpec
from fastmmeval.tasks.processors import DOC_PROCESSORS, PROCESSOR_DATA
from fastmmeval.tasks.sources import Rows, data_dir, load_rows, saved_split_dir

GQA_IMAGES = DatasetSpec(path="lmms-lab-encoder/GQA", name="testdev_balanced_images")
GQA_IMAGES_SPLIT = "testdev"
PROCESSOR_DATA["gqa"] = [(GQA_IMAGES, GQA_IMAGES_SPLIT)]


@lru_cache(maxsize=1)
def _gqa_images(root: Path | None) -> tuple[Rows, dict[str, int]]:
    """GQA's image rows (from `root`, the --data_dir, or the hub) and the row of each image id."""
    try:
        rows = load_rows(GQA_IMAGES, GQA_IMAGES_SPLIT)
    except ConfigError as e:
        where = saved_split_dir(root or Path("DATA_DIR"), GQA_IMAGES, GQA_IMAGES_SPLIT)
        raise ConfigError(
            f"{e}; GQA's images are a second dataset ({GQA_IMAGES.path} config {GQA_IMAGES.name} split "
            f"{GQA_IMAGES_SPLIT}), expected at {where}: `fastmmeval tasks --download gqa` saves both"
        ) from None
    return rows, {str(image_id): i for i, image_id in enumerate(rows.column("id"))}


@DOC_PROCESSORS.register("gqa")
def gqa(row: dict[str, Any]) -> dict[str, Any]:
    """The `image` of a GQA question, found by its `imageId` in GQA's testdev_balanced_images."""
    rows, index = _gqa_images(data_dir())
    image_id = str(row["imageId"])
    if image_id not in index:
        raise DocError(f"imageId {image_id!r} is not in {GQA_IMAGES.path} {GQA_IMAGES.name} split {GQA_IMAGES_SPLIT}")
    return {"image": rows[index[image_id]]["image"]}


@DOC_PROCESSORS.register("vqav2_answers")
def vqav2_answers(row: dict[str, Any]) -> dict[str, Any]:
    """`normalized_answers`: each annotator answer (`answers[i].answer`) with tabs and newlines as
    spaces, stripped, punctuation processed, number words, articles and contractions normalized,
    as lmms-eval's vqav2_process_results does before comparing."""
    answers = row["answers"]
    if not answers:
        raise DocError("field 'answers' holds no annotator answers")
    return {"normalized_answers": [normalize_vqa_answer(a["answer"]) for a in answers]}


@DOC_PROCESSORS.register("capitalized_question")
def capitalized_question(row: dict[str, Any]) -> dict[str, Any]:
    """`question_capitalized`: the question through Python's str.capitalize (first character upper
    case, every other lower case), as lmms-eval's TextVQA and VizWiz prompts print it."""
    return {"question_capitalized": str(row["question"]).capitalize()}


_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def exact_match_ignore_punct(
    prediction: str | None, targets: Sequence[str], fields: Mapping[str, Any] | None = None
) -> float:
    """1.0 when the prediction equals a target once both are lower-cased and stripped of every
    ASCII punctuation character (lmms-eval's exact_match with ignore_case and ignore_punctuation;
    whitespace is compared as is).

    Deliberate difference: lmms-eval lower-cases in a fixed-width numpy array, so a string with a
    character whose lower case is two characters long ('İ') loses its last character there."""
    if prediction is None:
        return 0.0
    predicted = prediction.lower().translate(_NO_PUNCTUATION)
    return float(any(predicted == t.lower().translate(_NO_PUNCTUATION) for t in targets))


METRICS.add("exact_match_ignore_punct", Metric("exact_match_ignore_punct", exact_match_ignore_punct))
