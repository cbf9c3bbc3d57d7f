"""The live pipeline's model stages (extract, generate, check, finalize, score) against a scripted
OpenAI-compatible server: valid replies become records, every refused reply or failed call becomes
a Failure carrying the raw text, a rerun over the same stage cache asks nothing, and through the
fault proxy every page and item ends as a record or a Failure."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from aiohttp import web
from live_llm import KEY_ENV, LiveLLM, default_reply, image_count
from PIL import Image

from fastmmeval.live.check import check_draft
from fastmmeval.live.extract import extract_page
from fastmmeval.live.finalize import finalize_draft
from fastmmeval.live.generate import generate_drafts
from fastmmeval.live.prompts import PROMPT_NAMES, prompt
from fastmmeval.live.records import SUBTASKS, Capture, Draft, Failure, PageInfo, Score, Source
from fastmmeval.live.roles import Role, RoleSpec, build_roles
from fastmmeval.live.score import score_item
from fastmmeval.live.store import Blobs, StageCache
from fastmmeval.live.validate import (
    SCHEMAS,
    ReplyError,
    criteria_text,
    known_subtask,
    require_english,
    require_open,
)
from fastmmeval.testing.faults import start_proxy

ROLES = ("extractor", "generator", "checker", "finalizer", "scorer")
FINAL = {"question": "Which museum reopened this week, and why had it closed?",
         "answer": "The harbour museum reopened after two years of repairs to its flooded basement."}


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-live-test")


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path / "blobs")


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[StageCache]:
    stages = StageCache(tmp_path / "stages.sqlite")
    yield stages
    stages.close()


def capture_of(blobs: Blobs, name: str = "Harbour Times", text: str = "Harbour museum reopens",
               colour: str = "navy") -> Capture:
    """A capture as the capture stage records it: one PNG screenshot and the page text, as blobs."""
    png = io.BytesIO()
    Image.new("RGB", (96, 64), colour).save(png, format="PNG")
    url = f"http://127.0.0.1:9/{name.replace(' ', '-').lower()}"
    return Capture(source=Source(name, url, "news", "en").record(), mode="single", url=url, final_url=url,
                   status=200, captured_at="2024-07-01T08:00:00Z", screens=[blobs.put(png.getvalue(), ".png")],
                   screen_size="1024x1024", text_sha=blobs.put(text.encode("utf-8"), ".txt"))


def roles_for(llm: LiveLLM, url: str | None = None, **args: str) -> dict[str, Role]:
    """Every role played by the `openai` backend talking to the scripted server (or a proxy at `url`)."""
    return build_roles([RoleSpec(role, "openai", llm.role_args(url, **args)) for role in ROLES])


def item_outcomes(capture: Capture, roles: dict[str, Role], cache: StageCache,
                  blobs: Blobs) -> tuple[PageInfo | Failure, list[Draft] | Failure, list[Score | Failure]]:
    """A page through every model stage: its extraction, its drafts, and each draft's end (its
    score, or the Failure of the stage it stopped at)."""
    info = extract_page(capture, roles["extractor"], cache, blobs)
    if isinstance(info, Failure):
        return info, [], []
    drafts = generate_drafts(capture, info, roles["generator"], cache, blobs)
    if isinstance(drafts, Failure):
        return info, drafts, []
    ends: list[Score | Failure] = []
    for draft in drafts:
        checked = check_draft(draft, capture, info, roles["checker"], cache, blobs)
        final = checked if isinstance(checked, Failure) else finalize_draft(checked, capture, roles["finalizer"],
                                                                             cache, blobs)
        ends.append(final if isinstance(final, Failure) else score_item(final, capture, roles["scorer"], cache, blobs))
    return info, drafts, ends


def reply_json(obj: object, before: str = "", after: str = "") -> str:
    return before + json.dumps(obj, ensure_ascii=False) + after


def finalized(criteria: list[dict[str, object]], question: str = FINAL["question"]) -> str:
    return reply_json({"question": question, "answer": FINAL["answer"], "criteria": criteria})


def a_draft(capture: Capture, subtask: str = "Concrete Recognition") -> Draft:
    return Draft(capture.key, 0, subtask, "What reopened?", "The harbour museum.", "- 10 points: names the museum")


# --- the whole chain -------------------------------------------------------------------------------


def test_a_page_becomes_scored_items_at_every_level(cache: StageCache, blobs: Blobs) -> None:
    capture = capture_of(blobs, text="Harbour museum reopens after floods")
    with LiveLLM() as llm:
        info, drafts, ends = item_outcomes(capture, roles_for(llm), cache, blobs)
        counts = llm.counts()
        shown = [image_count(b) for s in PROMPT_NAMES for b in llm.bodies(s)]
    assert isinstance(info, PageInfo) and info.text == "Harbour museum reopens after floods"
    assert "photograph" in info.images and info.news.startswith("1. ")
    assert isinstance(drafts, list) and [d.index for d in drafts] == [0, 1, 2, 3]
    assert [d.subtask for d in drafts] == list(SUBTASKS) and {d.page for d in drafts} == {capture.key}
    assert drafts[0].criteria == ("Award up to 10 points in total:\n- 6 points: Names point 1 of the reference answer"
                                  " correctly.\n- 4 points: Names point 2 of the reference answer correctly.")
    assert all(isinstance(e, Score) and 7 <= e.total <= 10 for e in ends)
    assert counts == {"extract_text": 1, "extract_images": 1, "extract_news": 1, "generate": 1,
                      "check": 4, "finalize": 4, "score": 4}
    assert shown == [1] * 16  # every call is shown the screenshot
    asked_in = {s: llm.bodies(s)[0]["response_format"]["json_schema"]["schema"] for s in PROMPT_NAMES}
    assert asked_in == SCHEMAS  # every reply is asked for in the schema it is checked against


def test_a_rerun_over_the_same_cache_asks_nothing(tmp_path: Path, blobs: Blobs) -> None:
    pages = [capture_of(blobs, f"Site {i}", f"Story number {i}", colour) for i, colour in enumerate(("red", "teal"))]
    with LiveLLM() as llm:
        cache = StageCache(tmp_path / "stages.sqlite")
        first = [item_outcomes(p, roles_for(llm), cache, blobs) for p in pages]
        cache.close()
        asked = len(llm.server.calls)
        cache = StageCache(tmp_path / "stages.sqlite")  # as after a kill: a fresh process, the same file
        roles = roles_for(llm)
        again = [item_outcomes(p, roles, cache, blobs) for p in pages]
        cache.close()
        assert asked == 2 * 16 and len(llm.server.calls) == asked
    assert again == first
    assert roles["checker"].counts["cached"] == 8 and roles["checker"].counts["calls"] == 0


def test_the_same_call_asked_at_once_from_two_threads_is_made_once(cache: StageCache, blobs: Blobs) -> None:
    page = capture_of(blobs, "Site", "Story", "red")
    with LiveLLM(delay_s=0.3) as llm:
        role = roles_for(llm)["extractor"]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: extract_page(page, role, cache, blobs), range(4)))
        assert llm.counts() == {"extract_text": 1, "extract_images": 1, "extract_news": 1}
    assert all(g == got[0] for g in got) and role.counts["cached"] == 9


def test_a_failed_capture_is_a_failure_without_a_call(cache: StageCache, blobs: Blobs) -> None:
    failed = Capture(source=Source("Down", "http://127.0.0.1:9/").record(), mode="single", url="http://127.0.0.1:9/",
                     status=404, error="HTTP 404")
    with LiveLLM() as llm:
        out = extract_page(failed, roles_for(llm)["extractor"], cache, blobs)
        assert not llm.server.calls
    assert out == Failure("extract", failed.key, "no screenshots to read (capture error: HTTP 404)")


# --- replies: repaired, or refused with the raw text ------------------------------------------------


def generate_once(answer: str, cache: StageCache, blobs: Blobs) -> list[Draft] | Failure:
    capture = capture_of(blobs)
    info = PageInfo("Harbour museum reopens", "No meaningful pictures.", "1. Museum: reopened")
    with LiveLLM({"generate": answer}) as llm:
        return generate_drafts(capture, info, roles_for(llm)["generator"], cache, blobs)


def test_json_in_prose_and_fences_is_repaired(cache: StageCache, blobs: Blobs) -> None:
    valid = default_reply("generate", "any page")
    drafts = generate_once(f"Here are my questions:\n```json\n{valid}\n```\nI hope they help!", cache, blobs)
    assert isinstance(drafts, list) and [d.subtask for d in drafts] == list(SUBTASKS)


_QUESTION = '{"question": "Q?", "answer": "A.", "criteria": [{"points": 10, "criterion": "Says A."}]}'
_LEVELS_AFTER_FIRST = "".join(f', "{level}": [{_QUESTION}]' for level in SUBTASKS[1:]) + "}"


@pytest.mark.parametrize(("reply", "reason"), [
    ('{"Concrete Recognition": [{"question": "What', "no JSON object in the reply"),
    ('{"Concrete Recognition": []' + _LEVELS_AFTER_FIRST, "Concrete Recognition: [] should be non-empty"),
    ('{"Concrete Recognition": [{"question": "Q?", "answer": "A."}]' + _LEVELS_AFTER_FIRST,
     "Concrete Recognition/0: 'criteria' is a required property"),
])
def test_unreadable_or_misshapen_replies_are_failures_with_the_raw_text(reply: str, reason: str, cache: StageCache,
                                                                         blobs: Blobs) -> None:
    out = generate_once(reply, cache, blobs)
    assert isinstance(out, Failure) and out.stage == "generate" and out.raw == reply
    assert out.reason.startswith(f"generate@1: {reason}")


def test_a_wrong_subtask_or_a_missing_level_fails_the_page(cache: StageCache, blobs: Blobs) -> None:
    valid = json.loads(default_reply("generate", "any page"))
    valid["Basic Understanding"] = valid.pop("Analytical Questions")  # lmms-eval's tool's old level names
    out = generate_once(json.dumps(valid), cache, blobs)
    assert isinstance(out, Failure) and out.reason.startswith("generate@1: reply: ")
    assert "'Basic Understanding' was unexpected" in out.reason or "'Analytical Questions' is a required" in out.reason
    del valid["Basic Understanding"]
    out = generate_once(json.dumps(valid), cache, blobs)
    assert isinstance(out, Failure) and out.reason == "generate@1: reply: 'Analytical Questions' is a required property"


def test_a_question_whose_points_do_not_add_up_to_ten_fails_alone(cache: StageCache, blobs: Blobs) -> None:
    valid = json.loads(default_reply("generate", "any page"))
    valid["Divergent Thinking"][0]["criteria"][0]["points"] = 7
    out = generate_once(json.dumps(valid), cache, blobs)
    assert isinstance(out, list) and [type(d).__name__ for d in out] == ["Draft", "Draft", "Failure", "Draft"]
    failed = out[2]
    assert isinstance(failed, Failure) and failed.subject == Draft(out[0].page, 2, "", "", "", "").id
    assert failed.reason == "generate@1: Divergent Thinking/0: criteria points add up to 11, not 10"
    assert json.loads(failed.raw or "")["criteria"][0]["points"] == 7  # the question as written


def finalize_once(answer: str, cache: StageCache, blobs: Blobs) -> Draft | Failure:
    capture = capture_of(blobs)
    with LiveLLM({"finalize": answer}) as llm:
        return finalize_draft(a_draft(capture), capture, roles_for(llm)["finalizer"], cache, blobs)


def test_finalized_criteria_render_as_english_text_worth_ten(cache: StageCache, blobs: Blobs) -> None:
    reply = finalized([{"points": 4, "criterion": "Names the harbour museum."},
                       {"points": 3, "criterion": "Says it had been closed for repairs\nafter a flood."},
                       {"points": 3, "criterion": "Says the closure lasted two years."}])
    out = finalize_once(reply, cache, blobs)
    assert out == Draft(a_draft(capture_of(blobs)).page, 0, "Concrete Recognition", FINAL["question"],
                        FINAL["answer"], "Award up to 10 points in total:\n- 4 points: Names the harbour museum.\n"
                        "- 3 points: Says it had been closed for repairs after a flood.\n"
                        "- 3 points: Says the closure lasted two years.")


def test_points_are_whole_numbers(cache: StageCache, blobs: Blobs) -> None:
    reply = finalized([{"points": 7, "criterion": "Names the museum."}, {"points": 2.5, "criterion": "Says why."}])
    out = finalize_once(reply, cache, blobs)
    assert isinstance(out, Failure) and out.reason == "finalize@1: criteria/1/points: 2.5 is not of type 'integer'"


@pytest.mark.parametrize(("reply", "reason"), [
    (finalized([{"points": 5, "criterion": "Names the museum."}, {"points": 4, "criterion": "Gives the reason."}]),
     "criteria points add up to 9, not 10"),
    (finalized([{"points": 10, "criterion": "Names the museum."}],
               question="Which museum reopened?\nA) The harbour museum\nB) The railway museum\nC) The opera house"),
     "the question is multiple choice (options A, B, C)"),
    (finalized([{"points": 6, "criterion": "答案中提到港口博物馆。"},
                {"points": 4, "criterion": "说明闭馆原因是洪水。"}]),
     "criteria are not in English (0% of their letters are ASCII)"),
    (finalized([{"points": "ten", "criterion": "Names the museum."}]), "criteria/0/points: 'ten' is not of type"),
])
def test_finalizer_replies_breaking_a_rule_are_failures_with_the_raw_text(reply: str, reason: str,
                                                                          cache: StageCache, blobs: Blobs) -> None:
    out = finalize_once(reply, cache, blobs)
    assert isinstance(out, Failure) and out.stage == "finalize" and out.raw == reply
    assert out.subject == a_draft(capture_of(blobs)).id and out.reason.startswith(f"finalize@1: {reason}")


def test_the_checker_keeps_the_drafts_level(cache: StageCache, blobs: Blobs) -> None:
    capture = capture_of(blobs)
    info = PageInfo("Harbour museum reopens", "No meaningful pictures.", "1. Museum: reopened")
    moved = reply_json({"subtask": "Divergent Thinking", "question": "Why did the harbour museum close?",
                        "answer": "A flood damaged its basement.", "criteria": [{"points": 10, "criterion": "Flood."}]})
    with LiveLLM({"check": moved}) as llm:
        out = check_draft(a_draft(capture), capture, info, roles_for(llm)["checker"], cache, blobs)
        [body] = llm.bodies("check")
    assert isinstance(out, Draft) and out.subtask == "Concrete Recognition" and out.question.startswith("Why did")
    assert 'The draft\'s level is "Concrete Recognition"' in body["messages"][-1]["content"][-1]["text"]


@pytest.mark.parametrize(("grades", "result"), [
    ({"authenticity": "4", "coherence": 3, "clarity": "1/2"}, 8.0),
    ({"authenticity": 7, "coherence": 3, "clarity": 2}, "score@1: authenticity: 7 is greater than the maximum of 5"),
    ({"authenticity": "7", "coherence": 3, "clarity": 2}, "score@1: 'authenticity' = 7.0 is outside [0, 5]"),
    ({"authenticity": 5, "coherence": 3}, "reply: 'clarity' is a required property"),
])
def test_scores_are_read_within_their_ranges(grades: dict[str, object], result: float | str, cache: StageCache,
                                             blobs: Blobs) -> None:
    capture = capture_of(blobs)
    reply = reply_json(grades | {"reason": "Visible on the page."})
    with LiveLLM({"score": reply}) as llm:
        out = score_item(a_draft(capture), capture, roles_for(llm)["scorer"], cache, blobs)
    if isinstance(result, float):
        assert isinstance(out, Score) and out.total == result and out.reason == "Visible on the page."
    else:
        assert isinstance(out, Failure) and result in out.reason and out.raw == reply


def test_a_failed_call_is_a_failure_without_raw_text_and_is_asked_again(cache: StageCache, blobs: Blobs) -> None:
    capture = capture_of(blobs)
    def overloaded(_: str) -> web.Response:
        return web.json_response({"error": {"message": "overloaded"}}, status=500)

    with LiveLLM({"extract_text": overloaded}) as llm:
        roles = roles_for(llm)
        first = extract_page(capture, roles["extractor"], cache, blobs)
        again = extract_page(capture, roles["extractor"], cache, blobs)
        assert llm.counts() == {"extract_text": 2}  # failures are never cached
    assert isinstance(first, Failure) and first.raw is None and "500" in first.reason and again == first


# --- the rules themselves ----------------------------------------------------------------------------


@pytest.mark.parametrize("question", [
    "Which topic is not covered?\nA) Politics\nB) Technology\nC) Sport\nD) Weather",
    "Which is larger: (A) the first figure or (B) the second?",
    "Pick one: A) the bridge, B) the tunnel.",
    "Which headline is first?\n a. Floods\n b. Fires",
    "Order them:\n[A] the ferry\n[B] the canal",
])
def test_lettered_options_are_refused(question: str) -> None:
    with pytest.raises(ReplyError, match="multiple choice"):
        require_open(question)


@pytest.mark.parametrize("question", [
    "What does the page report about the harbour museum?",
    "Plan A. failed last year; what does the page say replaced it?",
    "Summarise the three stories (A, B and C in the sidebar) in one table.",
    "Which vitamin (A) is mentioned in the health story?",
])
def test_open_questions_pass(question: str) -> None:
    require_open(question)


def test_english_criteria_may_quote_the_page() -> None:
    require_english([{"points": 10, "criterion": "Quotes the headline 「港の博物館が再開」 and says why it closed."}])
    with pytest.raises(ReplyError, match="not in English"):
        require_english([{"points": 10, "criterion": "回答中必须说明博物馆重新开放的原因 (flood)。"}])


def test_criteria_text_and_subtask_names() -> None:
    assert criteria_text([{"points": 1, "criterion": "Names it."}, {"points": 9, "criterion": "Explains it."}]) == (
        "Award up to 10 points in total:\n- 1 point: Names it.\n- 9 points: Explains it.")
    assert known_subtask(" real-world assistance ") == "Real-world Assistance"
    with pytest.raises(ReplyError, match="is not one of"):
        known_subtask("Further Insights")


def test_the_question_prompts_name_every_level() -> None:
    for name in ("generate", "check"):
        text = prompt(name).system + prompt(name).user
        assert all(s in text for s in SUBTASKS), name


# --- faults: every page and item accounted for -------------------------------------------------------


def test_through_faults_every_page_and_item_is_a_record_or_a_failure(cache: StageCache, blobs: Blobs) -> None:
    pages = [capture_of(blobs, f"Site {i}", f"Story {i} of the day", (i * 40, 90, 200 - i * 30)) for i in range(5)]
    with LiveLLM() as llm, start_proxy(llm.url, rate_429=0.12, rate_500=0.12, rate_hang=0.05, rate_truncated=0.05,
                                       retry_after=0.01, hang_s=2.0, seed=3) as proxy:
        roles = roles_for(llm, proxy.url, max_retries="1", timeout="0.5")
        with ThreadPoolExecutor(5) as pool:
            outcomes = list(pool.map(lambda p: item_outcomes(p, roles, cache, blobs), pages))
        faults = proxy.stats.faults
    assert sum(faults.values()) > 0 and faults["429"] and faults["500"]
    failures: list[Failure] = []
    for capture, (info, drafts, ends) in zip(pages, outcomes, strict=True):
        if isinstance(info, Failure) or isinstance(drafts, Failure):
            failure = info if isinstance(info, Failure) else drafts
            assert failure.subject == capture.key and not ends
            failures.append(failure)
            continue
        assert len(ends) == len(drafts) == 4
        assert all(isinstance(e, Score) or e.subject == d.id for d, e in zip(drafts, ends, strict=True))
        failures += [e for e in ends if isinstance(e, Failure)]
    scored = sum(isinstance(e, Score) for _, _, ends in outcomes for e in ends)
    assert failures and scored  # seed 3: some of each
    assert all(f.raw is None and f.reason and f.stage in ("extract", "generate", "check", "finalize", "score")
               for f in failures)


def test_roles_played_by_one_local_model_share_it_and_take_turns() -> None:
    import judge_fixtures  # noqa: F401  (registers the scripted local backends)

    roles = build_roles([RoleSpec("generator", "scripted_student"), RoleSpec("checker", "scripted_student"),
                         RoleSpec("scorer", "scripted_student", {"name": "other"})])
    assert roles["generator"].model is roles["checker"].model is not roles["scorer"].model
    assert roles["generator"]._serial is roles["checker"]._serial is not roles["scorer"]._serial
