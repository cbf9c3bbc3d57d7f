"""ScreenSpot (screenspot_rec_test, screenspot_reg_test) run by name on a fixture in its hub schema,
with lmms-eval 0.7.3's prompts, images, result keys and scores.

The hub schema is rootsautomation/ScreenSpot's dataset card (`dataset_info`, test split of 1,272
rows): file_name, instruction, data_type, data_source: string; bbox: a sequence of float64, the
target element as (x1, y1, x2, y2) in fractions of the screenshot (the card: SeeClick's
(x, y, width, height) turned into corners; lmms-eval's REG hook multiplies it by the image size);
image. data_type is "text" or "icon" (the card); data_source names are taken lower-case as SeeClick
releases them (ios, android, macos, windows, and the web sites shop, forum, gitlab, tool), since
lmms-eval matches lower-case names. The screenshots are small real photos: the scores read only
the boxes, and the REG box is drawn at the image's own size.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
from peer_lmms_eval import lmms_eval_module
from task_fixtures import assert_renders, lmms_eval_prompt, lmms_eval_yaml, photo, prompt_text, run_task, save_split
from task_fixtures import task_config as config_of

from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics import METRICS
from fastmmeval.tasks.families.screenspot import screenspot_platform
from fastmmeval.tasks.processors import DOC_PROCESSORS
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

S = datasets.Value("string")
SCREENSPOT = datasets.Features({
    "file_name": S, "bbox": datasets.Sequence(datasets.Value("float64")), "instruction": S, "data_type": S,
    "data_source": S, "image": datasets.Image(),
})  # fmt: skip
SCREENSPOT_REC_TEST = SCREENSPOT_REG_TEST = SCREENSPOT

# (data_source, data_type, instruction, bbox): every platform with both element types; the gitlab
# box touches the top-left corner (where lmms-eval's [0, 0, 0, 0] for an unread answer is a hit).
DOCS = [
    ("ios", "text", "open the Settings app", [0.05, 0.62, 0.24, 0.71]),
    ("android", "icon", "turn on airplane mode", [0.7, 0.1, 0.82, 0.16]),
    ("macos", "text", "click File in the menu bar", [0.04, 0.01, 0.08, 0.03]),
    ("windows", "icon", "close the window", [0.96, 0.0, 1.0, 0.04]),
    ("shop", "text", "add the blue sneakers to the cart", [0.55, 0.48, 0.78, 0.53]),
    ("forum", "icon", "upvote the first post", [0.12, 0.3, 0.15, 0.34]),
    ("gitlab", "text", "view the merge requests", [0.0, 0.0, 0.11, 0.05]),
    ("tool", "icon", "search the documentation", [0.42, 0.07, 0.47, 0.11]),
]
ORIGIN_DOC = 6
IDS = [str(i) for i in range(len(DOCS))]
LMMS_KEYS = ["screenspot_IoU", *(f"screenspot_ACC@{t}" for t in ("0.1", "0.3", "0.5", "0.7", "0.9"))]
LMMS_KEYS.append("screenspot_Center_ACC")
LMMS_YAML_REC, LMMS_YAML_REG = "screenspot_rec_test.yaml", "screenspot_reg_test.yaml"
AGGREGATIONS = ["iou", "acc01", "acc03", "acc05", "acc07", "acc09", "center_acc"]  # lmms-eval's, in LMMS_KEYS order


def screenspot_rec_test_rows() -> list[dict[str, Any]]:
    return [
        {"file_name": f"{source}_{i:04d}.png", "bbox": bbox, "instruction": instruction, "data_type": kind,
         "data_source": source, "image": photo(i, 96)}
        for i, (source, kind, instruction, bbox) in enumerate(DOCS)
    ]  # fmt: skip


def screenspot_reg_test_rows() -> list[dict[str, Any]]:
    return screenspot_rec_test_rows()


def box_text(box: list[float], digits: int = 2) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in box) + "]"


def rec_responses(bbox: list[float]) -> list[str]:
    """Answers to one doc in the shapes models give: the box as asked and in other brackets and
    spacings, per mille, overlapping it partly, elsewhere, as a point, in prose, and none."""
    x1, y1, x2, y2 = bbox
    w, h = x2 - x1, y2 - y1
    box = box_text(bbox)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    return [
        box, f"({x1}, {y1}, {x2}, {y2})", f"[{x1},{y1},{x2},{y2}]", f"The element is at {box}.",
        "[" + ", ".join(str(round(v * 1000)) for v in bbox) + "]",  # Qwen-VL's 0-1000 grid
        box_text([x1 + w / 2, y1, x2 + w / 2, y2], 4), box_text([x1 - w, y1 - h, x2 + w, y2 + h], 4),
        box_text([x1, y1, x1 + w / 3, y1 + h / 3], 4), "[0.3, 0.8, 0.45, 0.9]", f"[0.3, 0.8, 0.45, 0.9] or {box}",
        "[" + ", ".join(str(round(v * 1920)) for v in bbox) + "]",  # pixels: read per mille, as lmms-eval
        f"[-0.1, {y1}, {x2}, {y2}]", f"[{x1} , {y1}, {x2}, {y2}]",
        f"({cx:.3f}, {cy:.3f})", f"({cx * 1000:.0f}, {cy * 1000:.0f})",
        f"Looking at the screenshot, the element is here:\n\n{box}\n", f"ASSISTANT: {box}",
        box.translate(str.maketrans("0123456789", "０１２３４５６７８９")), "I cannot find that element.", "",
    ]  # fmt: skip


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def ours(rows: list[dict[str, Any]], responses: list[str]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Our per-doc items and aggregate (with the `screenspot` result-key prefix) for one answer per row."""
    metric, extract = METRICS.get("screenspot_rec"), EXTRACTORS.get("screenspot_click")
    items = [metric.score(extract(r).value, [], row) for row, r in zip(rows, responses, strict=True)]
    return items, {f"screenspot_{k}": v for k, v in metric.aggregate(items).items()}


def theirs(rows: list[dict[str, Any]], responses: list[str]) -> dict[str, float]:
    """lmms-eval's result keys from its process_results and aggregation functions."""
    peer = lmms_eval_module("tasks.screenspot.utils_rec")
    results = [peer.screenspot_rec_process_result(row, [r]) for row, r in zip(rows, responses, strict=True)]
    return {
        key: getattr(peer, f"screenspot_rec_{name}")([result[key] for result in results])
        for key, name in zip(LMMS_KEYS, AGGREGATIONS, strict=True)
    }


def test_screenspot_rec_runs_by_name_with_lmms_eval_prompt_keys_and_scores(tmp_path: Path) -> None:
    config, data, rows = config_of("screenspot_rec_test"), tmp_path / "data", screenspot_rec_test_rows()
    save_split(data, config, rows, SCREENSPOT)
    right = {i: box_text(bbox) for i, (*_, bbox) in zip(IDS, DOCS, strict=True)}
    best, samples = run_task(tmp_path, data, "screenspot_rec_test", right, IDS)
    worst, _ = run_task(tmp_path, data, "screenspot_rec_test", dict.fromkeys(IDS, "[0.3, 0.8, 0.45, 0.9]"), IDS)

    assert_renders(samples)
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample).startswith("<image>")  # the screenshot, then lmms-eval's text
        assert prompt_text(sample).removeprefix("<image>") == lmms_eval_prompt("screenspot", LMMS_YAML_REC, row)
    reference = lmms_eval_yaml("screenspot", LMMS_YAML_REC)
    assert [m["metric"] for m in reference["metric_list"]] == LMMS_KEYS
    clicks = [f"screenspot_Click_ACC-{g}" for g in ("mobile", "desktop", "web", "text", "icon")]
    clicks += [f"screenspot_Click_ACC-{p}_{e}" for p in ("mobile", "desktop", "web") for e in ("text", "icon")]
    assert set(values(best)) == {*LMMS_KEYS, "screenspot_Click_ACC", *clicks}
    assert set(values(best).values()) == {1.0} and set(values(worst).values()) == {0.0}
    assert best["headline_as"] == "screenspot" and best["extract_rules"] == {"box": len(DOCS)}


def test_screenspot_rec_scores_as_lmms_evals_process_results_and_aggregation() -> None:
    """Every answer of `rec_responses` on every doc, alone and as a run of all docs: our values
    are lmms-eval's, except Center_ACC where an answer without a box meets the target box at the
    top-left corner (listed difference unparsed_is_wrong)."""
    rows = screenspot_rec_test_rows()
    pools = [rec_responses(bbox) for *_, bbox in DOCS]
    shown = 0
    for i, (row, pool) in enumerate(zip(rows, pools, strict=True)):
        for response in pool:
            (item,), mine = ours([row], [response])
            expected = theirs([row], [response])
            no_box = EXTRACTORS.get("screenspot_click")(response).rule.startswith(("unparsed", "point"))
            if i == ORIGIN_DOC and no_box:  # lmms-eval's [0, 0, 0, 0] has its centre on the target's corner
                assert expected["screenspot_Center_ACC"] == 1 and mine["screenspot_Center_ACC"] == 0
                expected["screenspot_Center_ACC"], shown = 0, shown + 1
            assert {k: mine[k] for k in LMMS_KEYS} == pytest.approx(expected, abs=1e-9), (row["bbox"], response)
    assert shown == 5  # the box with a space before a comma, the two points, the refusal and the empty answer
    for j in range(len(pools[0])):
        answers = [pool[j] for pool in pools]
        _, mine = ours(rows, answers)
        expected = theirs(rows, answers)
        origin_misses = EXTRACTORS.get("screenspot_click")(answers[ORIGIN_DOC]).rule.startswith(("unparsed", "point"))
        expected["screenspot_Center_ACC"] -= origin_misses / len(rows)
        assert {k: mine[k] for k in LMMS_KEYS} == pytest.approx(expected, abs=1e-9), answers


def test_the_click_is_the_answered_point_or_the_boxes_centre_per_platform_and_type(capsys) -> None:
    """Click_ACC reads a point answer, which lmms-eval leaves unread; with box answers each
    Click_ACC-<platform>_<type> is the Center_ACC-<platform>_<type> that lmms-eval prints."""
    rows = screenspot_rec_test_rows()
    centres = [((x1 + x2) / 2, (y1 + y2) / 2) for *_, (x1, y1, x2, y2) in DOCS]
    hits = [True, False, True, True, False, True, True, False]
    points = [f"({x:.3f}, {y:.3f})" if hit else "(0.5, 0.99)" for (x, y), hit in zip(centres, hits, strict=True)]
    _, by_point = ours(rows, points)
    assert by_point["screenspot_Click_ACC"] == 5 / 8 and by_point["screenspot_Center_ACC"] == 0
    expected = {"mobile": 1 / 2, "desktop": 1, "web": 2 / 4, "text": 3 / 4, "icon": 2 / 4, "web_text": 1 / 2}
    assert {k: by_point[f"screenspot_Click_ACC-{k}"] for k in expected} == expected

    boxes = [box_text([x - 0.01, y - 0.01, x + 0.01, y + 0.01], 3) for x, y in centres]
    answers = [box if hit else "[0.5, 0.98, 0.6, 0.99]" for box, hit in zip(boxes, hits, strict=True)]
    _, by_box = ours(rows, answers)
    capsys.readouterr()
    theirs(rows, answers)
    printed = dict(re.findall(r"^Center_ACC-(\w+): ([\d.]+)$", capsys.readouterr().out, re.MULTILINE))
    assert len(printed) == 6 and by_box["screenspot_Center_ACC"] == by_box["screenspot_Click_ACC"] == 5 / 8
    assert {k: f"{by_box[f'screenspot_Click_ACC-{k}']:.4f}" for k in printed} == printed


def test_an_answer_is_read_as_lmms_eval_reads_it_and_points_too() -> None:
    extract = EXTRACTORS.get("screenspot_click")
    cases = {
        "[0.1, 0.2, 0.3, 0.4]": ("box", [0.1, 0.2, 0.3, 0.4]),
        "(100, 200, 300, 400) then [0.1, 0.2, 0.3, 0.4]": ("box_per_mille", [0.1, 0.2, 0.3, 0.4]),
        "Click (0.25, 0.5) or [0.1, 0.2, 0.3, 0.4]": ("box", [0.1, 0.2, 0.3, 0.4]),  # a box first: lmms-eval's reading
        "(0.25, 0.5)": ("point", [0.25, 0.5]),
        "[250, 500]": ("point_per_mille", [0.25, 0.5]),
        "[0.1 , 0.2, 0.3, 0.4]": ("unparsed", None),  # lmms-eval's pattern wants the comma right after a number
        "0.1, 0.2, 0.3, 0.4": ("unparsed", None),
        "[0.1, 0.2, 0.3]": ("unparsed", None),
    }  # fmt: skip
    peer = lmms_eval_module("tasks.screenspot.utils_rec").parse_float_sequence_within
    for text, (rule, numbers) in cases.items():
        got = extract(text)
        assert (got.rule, None if got.value is None else pytest.approx(json.loads(got.value))) == (rule, numbers), text
        if rule.startswith("box"):
            assert peer(text) == pytest.approx(numbers)
        else:
            assert peer(text) == [0, 0, 0, 0]  # lmms-eval's reading of anything without a box


def test_a_flipped_box_scores_zero_where_lmms_eval_divides_by_zero() -> None:
    """The target box with its y corners swapped has the negative of its area, so lmms-eval's
    union is 0 (a note of the task file: where lmms-eval scores a flipped box, it is 0 too)."""
    (row,) = screenspot_rec_test_rows()[:1]
    x1, y1, x2, y2 = row["bbox"]
    flipped = box_text([x1, y2, x2, y1])
    with pytest.raises(ZeroDivisionError):
        theirs([row], [flipped])
    (item,), mine = ours([row], [flipped])
    assert item["iou"] == 0 and mine["screenspot_IoU"] == 0 and mine["screenspot_Center_ACC"] == 1


def test_screenspot_platforms_are_grouped_as_lmms_eval_groups_them() -> None:
    groups = {"ios": "mobile", "android": "mobile", "macos": "desktop", "windows": "desktop", "shop": "web",
              "forum": "web", "gitlab": "web", "tool": "web"}  # fmt: skip
    assert {source: screenspot_platform(source) for source in groups} == groups


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bbox": [0.1, 0.2, 0.3]}, r"field 'bbox' must hold 4 numbers \(x1, y1, x2, y2\), got \[0.1, 0.2, 0.3\]"),
        ({"bbox": [0.1, 0.2, 0.3, 0.4], "data_type": "text"}, "doc field 'data_source' is missing or not a string"),
    ],
)
def test_a_doc_without_a_box_or_platform_is_a_doc_error(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(DocError, match=message):
        METRICS.get("screenspot_rec").score("[0.1, 0.2, 0.3, 0.4]", [], fields)


def test_screenspot_rec_scores_only_its_extractors_answers() -> None:
    row = screenspot_rec_test_rows()[0]
    with pytest.raises(DocError, match="screenspot_rec scores the screenspot_click extractor's answers, got 'open'"):
        METRICS.get("screenspot_rec").score("open", [], row)


@pytest.mark.parametrize("task", ["screenspot_rec_test", "screenspot_reg_test"])
def test_the_protocol_is_lmms_evals(task: str) -> None:
    config, reference = config_of(task), lmms_eval_yaml("screenspot", f"{task}.yaml")
    assert (config.dataset.path, config.dataset.name, config.split) == (
        reference["dataset_path"], reference.get("dataset_name"), reference["test_split"]
    )  # fmt: skip
    assert config.lmms_eval is not None and config.lmms_eval.task == reference["task"] == task
    assert reference["generation_kwargs"] == {"until": ["ASSISTANT:"]}  # no length and no decoding settings
    assert config.generation.stop == () and any("ASSISTANT:" in note for note in config.lmms_eval.notes)
    assert (config.generation.max_new_tokens, config.generation.temperature) == (1024, 0)  # its LLaVA wrapper's
    assert config.group == ("web", "screenspot") and config.docs == 1272


# --- screenspot_reg_test: instruction generation ---------------------------------------------------

PEER_REG = "tasks.screenspot.utils"


def test_screenspot_reg_runs_by_name_with_lmms_eval_prompt_image_and_cider(tmp_path: Path, monkeypatch) -> None:
    config, data, rows = config_of("screenspot_reg_test"), tmp_path / "data", screenspot_reg_test_rows()
    save_split(data, config, rows, SCREENSPOT)
    answers = {i: instruction for i, (_, _, instruction, _) in zip(IDS, DOCS, strict=True)}
    results, samples = run_task(tmp_path, data, "screenspot_reg_test", answers, IDS)

    assert_renders(samples)
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample).startswith("<image>")
        assert prompt_text(sample).removeprefix("<image>") == lmms_eval_prompt("screenspot", LMMS_YAML_REG, row)
    reference = lmms_eval_yaml("screenspot", LMMS_YAML_REG)
    assert [m["metric"] for m in reference["metric_list"]] == list(values(results)) == ["screenspot_CIDEr"]
    assert 0 < results["screenspot_CIDEr,none"] <= 10

    peer = lmms_eval_module(PEER_REG)
    monkeypatch.setenv(DATA_DIR_ENV, str(data))
    task = Task(config)
    for ref in task.doc_refs():
        row = task.rows[ref.index]  # as the hub gives it: a decoded image, a float64 box
        (image,) = task.request(task.doc(ref), 0).messages[0].images
        expected = peer.screenspot_bbox_doc_to_visual(row)[0]
        assert image.mode == expected.mode == "RGB" and np.array_equal(np.asarray(image), np.asarray(expected))
        assert not np.array_equal(np.asarray(image), np.asarray(row["image"].convert("RGB")))  # a box was drawn


def reg_cider(answers: list[str]) -> tuple[float, float]:
    """(our CIDEr-D, lmms-eval's screenspot_cider) of the answers to the fixture's docs."""
    rows, metric, raw = screenspot_reg_test_rows(), METRICS.get("cider"), EXTRACTORS.get("raw")
    items = [metric.score(raw(a).value, [row["instruction"]], row) for row, a in zip(rows, answers, strict=True)]
    peer = lmms_eval_module(PEER_REG)
    results = [
        peer.screenspot_process_result(row, [a])["screenspot_CIDEr"] for row, a in zip(rows, answers, strict=True)
    ]
    return metric.aggregate(items), peer.screenspot_cider(results)


def test_screenspot_reg_cider_is_lmms_evals_but_where_the_tokenizers_differ() -> None:
    """lmms-eval's screenspot_cider (pycocoevalcap, Java) gives our value; a tag-like word (listed
    difference ptb_tokenizer) is one token to PTBTokenizer and a word between two tokens to ours."""
    answers = [f" {instruction.replace('the ', 'a ')}\n" for _, _, instruction, _ in DOCS]
    answers[1] = "tap the airplane icon"
    mine, expected = reg_cider(answers)
    assert 0 < mine < 10 and mine == pytest.approx(expected, abs=1e-9)
    answers[2] = "click <File> in the menu bar"
    mine, expected = reg_cider(answers)
    assert mine < expected - 0.01  # ours reads '<', 'file', '>', PTBTokenizer the one token '<file>'


def test_a_region_without_a_four_number_box_is_a_doc_error() -> None:
    with pytest.raises(DocError, match=r"field 'bbox' must hold 4 numbers \(x1, y1, x2, y2\), got \[0.1, 0.2\]"):
        DOC_PROCESSORS.get("screenspot_region")({"image": photo(0, 32), "bbox": [0.1, 0.2]})
