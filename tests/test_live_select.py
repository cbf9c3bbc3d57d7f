"""LiveBench step 4: `select_items` keeps the items at or above the threshold, balanced across the four
subtasks, seeded among equal scores, without near-duplicates (within the month, in English, Chinese and
Japanese, and against earlier months) or questions a contamination index has seen; every item not kept is
accounted for with its reason."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from live_items import capture, item, question

from fastmmeval.cli import main
from fastmmeval.contam.readers.text_tokens import WordTokenizer
from fastmmeval.errors import ConfigError
from fastmmeval.live.records import SUBTASKS, Draft, Item
from fastmmeval.live.select import Selection, question_shingles, select_items
from fastmmeval.live.store import Blobs

CR, AQ, DT, RA = SUBTASKS


def _accounted(items: list[Item], selection: Selection) -> None:
    """Every item is kept or dropped, never both, never neither."""
    ids = {i.id for i in items}
    assert set(selection.kept) | set(selection.dropped) == ids
    assert not set(selection.kept) & set(selection.dropped)


def _subtask(items: list[Item], item_id: str) -> str:
    return next(Draft.from_record(i.draft).subtask for i in items if i.id == item_id)


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path / "blobs")


def test_threshold_and_balance_across_subtasks(blobs: Blobs) -> None:
    page = capture(blobs)
    supply = {CR: 6, AQ: 1, DT: 3, RA: 5}
    items, k = [], 0
    for subtask, n in supply.items():
        for j in range(n):
            items.append(item(page, k, subtask, question(k), scores=(5, 3, 2 - 0.25 * j)))
            k += 1
    low = [item(page, 100 + j, CR, question(100 + j), scores=(2, 1, 1)) for j in range(3)]
    selection = select_items(items + low, threshold=6, size=10, seed=0)
    _accounted(items + low, selection)

    assert all(selection.dropped[i.id].reason == "below_threshold" for i in low)
    assert selection.dropped[low[0].id].detail == "score 4 < threshold 6"
    kept = Counter(_subtask(items, i) for i in selection.kept)
    # AQ has one item; the other nine are spread over three subtasks as evenly as supply allows.
    assert kept[AQ] == 1 and sorted(kept[s] for s in (CR, DT, RA)) == [3, 3, 3]
    # Within a subtask the best-scored are kept, and the rest are over the size.
    over = [i for i in items if i.id in selection.dropped]
    assert {selection.dropped[i.id].reason for i in over} == {"over_size"}
    assert all(Draft.from_record(i.draft).index in (3, 4, 5, 13, 14) for i in over)
    # Listed by subtask (SUBTASKS order), best first.
    assert [_subtask(items, i) for i in selection.kept] == [CR] * 3 + [AQ] + [DT] * 3 + [RA] * 3
    assert selection.counts() == {
        "kept": 10, "below_threshold": 3, "unknown_subtask": 0, "contaminated": 0, "earlier_month": 0,
        "near_duplicate": 0, "over_size": 5,
    }  # fmt: skip


def test_seeded_choice_among_equal_scores_ignores_input_order(blobs: Blobs) -> None:
    page = capture(blobs)
    items = [item(page, k, SUBTASKS[k % 4], question(k)) for k in range(40)]  # all score 10
    first = select_items(items, threshold=5, size=8, seed=1)
    shuffled = random.Random(3).sample(items, len(items))
    assert select_items(shuffled, threshold=5, size=8, seed=1) == first
    other = select_items(items, threshold=5, size=8, seed=2)
    assert set(other.kept) != set(first.kept)
    for selection in (first, other):
        _accounted(items, selection)
        assert Counter(_subtask(items, i) for i in selection.kept) == dict.fromkeys(SUBTASKS, 2)


def test_near_duplicates_within_the_month_keep_the_better_item(blobs: Blobs) -> None:
    page = capture(blobs)
    pairs = [
        ("What is the largest bar in the chart about household energy prices across Europe this winter?",
         "What is the smallest bar in the chart about household energy prices across Europe this winter?"),
        ("画面中央的新闻标题报道了哪一家科技公司本周发布的新款智能手机以及它的售价是多少",
         "画面中央的新闻标题报道了哪一家科技公司本月发布的新款智能手机以及它的售价是多少"),
        ("ページの左上にある記事の見出しは、どの都市で開催された国際会議について伝えていますか",
         "ページの左上にある記事の見出しは、どの都市で開かれた国際会議について伝えていますか"),
    ]  # fmt: skip
    items, better, worse = [], [], []
    for k, (a, b) in enumerate(pairs):
        good, poor = item(page, 2 * k, CR, a, scores=(5, 3, 2)), item(page, 2 * k + 1, AQ, b, scores=(4, 3, 2))
        items += [good, poor]
        better.append(good)
        worse.append(poor)
    distinct = item(page, 9, DT, "この写真に写っている建物は何年に完成したと記事に書かれていますか")
    items.append(distinct)
    selection = select_items(items, threshold=0, size=100, seed=0)
    _accounted(items, selection)
    assert set(selection.kept) == {i.id for i in better} | {distinct.id}
    for good, poor in zip(better, worse, strict=True):
        dropped = selection.dropped[poor.id]
        assert (dropped.reason, dropped.of) == ("near_duplicate", good.id)
        assert dropped.detail.startswith("near-duplicate (Jaccard 0.") and dropped.detail.endswith(f"of item {good.id}")
    # Contam's `words` split sees an unspaced Chinese sentence as one word; its shingles are character pairs.
    chinese = pairs[1][0]
    assert len(WordTokenizer().encode([chinese])[0]) == 1
    assert len(question_shingles(chinese)) == len({chinese[k : k + 2] for k in range(len(chinese) - 1)})


def test_near_duplicates_of_earlier_months_are_dropped(blobs: Blobs) -> None:
    page = capture(blobs)
    earlier = [question(1), "Which team won the cup final reported on the sports page last weekend in Madrid?"]
    again = item(page, 0, CR, "Which team won the cup final reported on the sports page last weekend in Madrid ?")
    fresh = item(page, 1, CR, question(2))
    selection = select_items([again, fresh], threshold=0, size=10, seed=0, earlier=earlier)
    _accounted([again, fresh], selection)
    assert selection.kept == [fresh.id]
    dropped = selection.dropped[again.id]
    assert (dropped.reason, dropped.of) == ("earlier_month", "earlier:1")
    assert dropped.detail.endswith(earlier[1])


def test_questions_the_contamination_index_has_seen_are_dropped(blobs: Blobs, tmp_path: Path) -> None:
    page = capture(blobs)
    seen = "According to the banner at the top of the page which airline announced new routes to Lisbon today"
    leaked, clean = item(page, 0, CR, seen), item(page, 1, AQ, question(5))
    corpus = tmp_path / "corpus.jsonl"
    docs = [{"id": "crawl-1", "text": f"Forum post: {seen}? Nobody knows."}, {"id": "crawl-2", "text": question(6)}]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    index = tmp_path / "index"
    assert main(["contam", "index", "--index", str(index), str(corpus), "--image_tokenizer", "none",
                 "--no_progress"]) == 0  # fmt: skip

    selection = select_items([leaked, clean], threshold=0, size=10, seed=0, contam_index=index)
    _accounted([leaked, clean], selection)
    assert selection.kept == [clean.id]
    dropped = selection.dropped[leaked.id]
    assert dropped.reason == "contaminated" and dropped.detail == f"the contamination index has seen: {seen}"


def test_unknown_subtasks_are_dropped_and_bad_settings_refused(blobs: Blobs) -> None:
    page = capture(blobs)
    odd = item(page, 0, "Further Insights", question(1))
    selection = select_items([odd], threshold=0, size=5, seed=0)
    assert selection.kept == [] and selection.dropped[odd.id].reason == "unknown_subtask"
    assert Selection.from_record(json.loads(json.dumps(selection.record()))) == selection
    with pytest.raises(ConfigError, match="size must be at least 1"):
        select_items([odd], threshold=0, size=0, seed=0)
    with pytest.raises(ConfigError, match="threshold is a score out of 10"):
        select_items([odd], threshold=11, size=5, seed=0)
    with pytest.raises(ConfigError, match=f"item {odd.id} is given twice"):
        select_items([odd, odd], threshold=0, size=5, seed=0)
