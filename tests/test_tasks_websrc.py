"""WebSRC (websrc_val) run by name on a fixture in its hub schema, with lmms-eval 0.7.3's prompt,
screenshot, result key and F1 (its websrc/utils.py imported and run on the same docs and answers).

Hub schema: rootsautomation/websrc's card (`dataset_info`): domain, page_id, question, answer and
image, all strings, the image a base64-encoded PNG screenshot; the dev split has 52,826 rows. It
has no `id` column, so lmms-eval's process_results writes no submission entry for it."""

from __future__ import annotations

import base64
import dataclasses
import io
from pathlib import Path
from typing import Any

import datasets
import pytest
from peer_lmms_eval import lmms_eval_module
from PIL import Image
from task_fixtures import (
    assert_renders,
    lmms_eval_prompt,
    lmms_eval_yaml,
    photo,
    prompt_text,
    run_task,
    save_split,
    task_config,
)

from fastmmeval.engine.sampling import cut_at_stop
from fastmmeval.errors import DocError
from fastmmeval.extract import EXTRACTORS
from fastmmeval.metrics.squad import normalize_squad_answer, squad_exact_match
from fastmmeval.protocol import GenerationSettings
from fastmmeval.tasks.families.websrc import WEBSRC_DOMAINS, websrc, websrc_aggregate, websrc_f1, websrc_score
from fastmmeval.tasks.render import load_image

S = datasets.Value("string")
WEBSRC_VAL = datasets.Features({"domain": S, "page_id": S, "question": S, "answer": S, "image": S})

# (domain, question, answer, a right response, a wrong response sharing no token with the answer)
DOCS = [
    ("auto", "What is the price of the car?", "$25,999", "$25,999", "twenty thousand"),
    ("book", "Who is the author of the book?", "J. K. Rowling", "j. k. rowling", "Stephen King"),
    ("game", "Is the game available for PC?", "yes", "Yes", "no"),
    ("hotel", "How many stars does the hotel have?", "4", "4", "five"),
    ("university", "Which city is the university located in?", "Shanghai", "SHANGHAI", "Beijing"),
]
PEER = "tasks.websrc.utils"


def png_base64(image: Image.Image) -> str:
    """`image` as the hub stores a screenshot: PNG bytes in base64 text."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def websrc_val_rows() -> list[dict[str, Any]]:
    return [
        {"domain": d, "page_id": f"{i + 1:02d}00{i + 1:03d}", "question": q, "answer": a, "image": png_base64(photo(i))}
        for i, (d, q, a, _, _) in enumerate(DOCS)
    ]


def values(results: dict[str, Any]) -> dict[str, float]:
    """The metric values of a task's results, by lmms-eval-style key (without ',none')."""
    return {k.removesuffix(",none"): v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def lmms_eval_f1(answer: str, response: str) -> float:
    """lmms-eval's F1 of one response (its evaluate_websrc on one sample)."""
    return lmms_eval_module(PEER).evaluate_websrc([{"answer": answer, "parsed_pred": response}])[0][0]


def test_websrc_val_runs_by_name_with_lmms_eval_prompt_keys_and_scores(tmp_path: Path) -> None:
    data, rows = tmp_path / "data", websrc_val_rows()
    save_split(data, task_config("websrc_val"), rows, WEBSRC_VAL)
    ids = [str(i) for i in range(len(DOCS))]
    best, samples = run_task(tmp_path, data, "websrc_val", {i: d[-2] for i, d in zip(ids, DOCS, strict=True)}, ids)
    worst, _ = run_task(tmp_path, data, "websrc_val", {i: d[-1] for i, d in zip(ids, DOCS, strict=True)}, ids)
    best, worst = values(best), values(worst)

    assert_renders(samples)
    for sample, row in zip(samples, rows, strict=True):
        assert prompt_text(sample) == "<image>" + lmms_eval_prompt("websrc", "websrc_val.yaml", row)
        assert len(sample["images"]) == 1
    reference = lmms_eval_yaml("websrc", "websrc_val.yaml")
    assert {m["metric"] for m in reference["metric_list"]} == {"websrc_squad_f1"}
    domains = [f"websrc_squad_f1_{d}" for d, *_ in DOCS]
    assert set(best) == set(worst) == {"websrc_squad_f1", *domains, "websrc_exact_match"}
    assert set(best.values()) == {1.0} and set(worst.values()) == {0.0}, (best, worst)


def test_the_screenshot_is_lmms_eval_screenshot() -> None:
    visual = lmms_eval_module(PEER).websrc_doc_to_visual
    for i, row in enumerate(websrc_val_rows()):
        ours = load_image(websrc(row)["screenshot"], None, "test")
        assert [p.image.tobytes() for p in ours] == [im.tobytes() for im in visual(dict(row))] == [photo(i).tobytes()]
    with pytest.raises(DocError, match="websrc: field 'image' is not base64 text"):
        websrc({**websrc_val_rows()[0], "image": "abc"})


def test_an_rgba_screenshot_reaches_the_model_as_rgb_where_lmms_eval_keeps_its_alpha() -> None:
    """The task file's note: lmms-eval hands its model class the screenshot in the PNG's own mode."""
    screenshot = photo(0).convert("RGBA")
    screenshot.putalpha(128)
    row = {**websrc_val_rows()[0], "image": png_base64(screenshot)}
    (ours,) = load_image(websrc(row)["screenshot"], None, "test")
    (theirs,) = lmms_eval_module(PEER).websrc_doc_to_visual(dict(row))
    assert (ours.image.mode, theirs.mode) == ("RGB", "RGBA")
    assert ours.image.tobytes() == theirs.convert("RGB").tobytes()


# (domain, answer, response): case and surrounding whitespace, punctuation as tokens, repeated
# tokens (sets), articles (kept), empty sides, unicode words, numbers with separators, yes/no.
TRICKY = [
    ("auto", "$25,999", "$25,999"), ("auto", "$25,999", "25999"), ("auto", "$25,999", "$ 25 , 999 dollars"),
    ("book", "J. K. Rowling", "Rowling"), ("book", "J. K. Rowling", "j.k. rowling"), ("book", "the hobbit", "Hobbit"),
    ("game", "yes", "Yes."), ("game", "yes", "yes yes yes"), ("game", "no", "No, it is not."), ("game", "yes", ""),
    ("hotel", "4", " 4\n"), ("hotel", "4 stars", "four stars"), ("hotel", "", "anything"), ("hotel", "...", "..."),
    ("movie", "Amélie", "amélie"), ("movie", "東京物語", "東京物語"), ("movie", "Star Wars: Episode IV", "star wars"),
    ("jobs", "Software Engineer (Remote)", "software engineer"), ("phone", "6.1-inch", "6.1 inch"),
    ("restaurant", "Mon-Fri 9am-5pm", "Monday to Friday"), ("sports", "Lakers", "the Los Angeles Lakers"),
    ("university", "Shanghai", "Shanghai, China"), ("camera", "24.2 MP", "24.2MP"),
]  # fmt: skip


def test_f1_equals_lmms_eval_evaluate_websrc_per_answer_per_domain_and_overall() -> None:
    peer = lmms_eval_module(PEER)
    raw = EXTRACTORS.get("raw")
    items, theirs = [], []
    for domain, answer, response in TRICKY:
        items.append(websrc_score(raw(response).value, [answer], {"domain": domain}))
        assert items[-1]["f1"] == pytest.approx(lmms_eval_f1(answer, response), abs=1e-12), (answer, response)
        doc = {"page_id": "0100001", "domain": domain, "answer": answer}
        theirs.append(peer.websrc_process_results(doc, [response])["websrc_squad_f1"])
    assert 0 < sum(item["f1"] for item in items) < len(items)  # the cases go both ways
    ours = websrc_aggregate(items)
    for domain in WEBSRC_DOMAINS:  # the per-domain values lmms-eval prints (rounded there)
        samples = [t for t in theirs if t["domain"] == domain]
        assert ours[f"squad_f1_{domain}"] == pytest.approx(peer.evaluate_websrc(samples)[1]["f1"], abs=1e-12)
    # f1_rounded: lmms-eval's websrc_squad_f1 is the same mean rounded to 3 decimals.
    assert "f1_rounded" in task_config("websrc_val").lmms_eval.differences
    assert peer.websrc_aggregate_results(theirs) == round(ours["squad_f1"], 3) != ours["squad_f1"]


def test_websrc_f1_counts_distinct_tokens_and_punctuation() -> None:
    assert websrc_f1("Yes.", "yes") == pytest.approx(2 / 3)
    assert websrc_f1("yes yes yes", "yes") == 1.0  # sets: a repeated token counts once
    assert websrc_f1("the hobbit", "Hobbit") == pytest.approx(2 / 3)  # articles are tokens
    assert websrc_f1("", "") == websrc_f1("...", "") == 0.0


def test_exact_match_is_websrc_squad_exact_match() -> None:
    """WebSRC's compute_exact: SQuAD's normalize_answer on both sides, then equality."""
    assert normalize_squad_answer("  The  Eiffel-Tower, Paris! ") == "eiffeltower paris"
    assert normalize_squad_answer("An apple a day") == "apple day"
    assert normalize_squad_answer("Théâtre") == "théâtre"  # only ASCII punctuation goes
    cases = [
        ("J. K. Rowling", "j k rowling", 1), ("Yes.", "yes", 1), ("the hobbit", "Hobbit", 1), ("$25,999", "25999", 1),
        ("4 stars", "four stars", 0), ("", "", 1), ("theatre", "the atre", 0),
    ]  # fmt: skip
    for prediction, answer, expected in cases:
        assert squad_exact_match(prediction, answer) == expected, (prediction, answer)
    scored = [websrc_score(p, [a], {"domain": "book"}) for p, a, _ in cases]
    assert websrc_aggregate(scored)["exact_match"] == pytest.approx(sum(c[2] for c in cases) / len(cases))


def test_a_domain_outside_websrc_counts_overall_only_as_in_lmms_eval() -> None:
    peer = lmms_eval_module(PEER)
    docs = [{"page_id": "1", "domain": "news", "answer": "yes"}, {"page_id": "2", "domain": "auto", "answer": "no"}]
    theirs = [peer.websrc_process_results(doc, ["yes"])["websrc_squad_f1"] for doc in docs]
    ours = websrc_aggregate([websrc_score("yes", [d["answer"]], d) for d in docs])
    assert ours == {"squad_f1": 0.5, "squad_f1_auto": 0.0, "exact_match": 0.5}
    assert peer.websrc_aggregate_results(theirs) == ours["squad_f1"]


def test_stop_string_cuts_a_response_lmms_eval_may_score_whole() -> None:
    config = task_config("websrc_val")
    assert "stop_string" in config.lmms_eval.differences
    response = "Shanghai\n\nThe university is in Shanghai, China."
    cut = cut_at_stop(response, config.generation.stop)
    assert cut == "Shanghai" and websrc_f1(cut, "Shanghai") == 1.0
    assert lmms_eval_f1("Shanghai", response) == pytest.approx(2 * (1 / 8) / (1 + 1 / 8))  # 1 of 8 distinct tokens


def test_image_aspect_ratio_pad_is_a_model_setting_that_does_not_reach_our_models() -> None:
    """The task file's note: lmms-eval's generation_kwargs carry a setting of its LLaVA model classes."""
    assert lmms_eval_yaml("websrc", "websrc_val.yaml")["generation_kwargs"]["image_aspect_ratio"] == "pad"
    assert "image_aspect_ratio" not in {f.name for f in dataclasses.fields(GenerationSettings)}


def test_websrc_val_reads_lmms_eval_data_and_generation_settings() -> None:
    config, reference = task_config("websrc_val"), lmms_eval_yaml("websrc", "websrc_val.yaml")
    assert (config.dataset.path, config.dataset.name, config.split) == (reference["dataset_path"], None, "dev")
    assert reference["test_split"] == "dev" and config.docs == 52826
    assert config.generation.max_new_tokens == reference["generation_kwargs"]["max_new_tokens"] == 16
    assert "temperature" not in reference["generation_kwargs"] and config.generation.temperature == 0  # its default
    assert config.generation.stop == ("\n\n",)  # lmms-eval's default `until` (its fewshot delimiter)
    assert config.lmms_eval.task == "websrc_val" and config.group == ("web",)
