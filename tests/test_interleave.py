"""Interleaved prompts: a text part with `interleave: {pattern, images}` is cut at each placeholder
the pattern matches, the image its group numbers standing in its place. mmmu_val uses it to build
the prompt lmms-eval 0.7.3's chat models get (tasks/mmmu/utils.py, mmmu_doc_to_messages), compared
here with that function on the MMMU fixture rows and on rows with several, repeated and missing images.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from task_fixtures import photo, save_split, task_config
from test_tasks_mcq import MMMU, lmms, mmmu_chat_messages, mmmu_row, mmmu_rows

from fastmmeval.errors import ConfigError, DocError, FailureKind
from fastmmeval.models.api.anthropic_api import anthropic_content
from fastmmeval.models.chat_messages import to_vllm_chat
from fastmmeval.models.local.vlm import VisionLanguageModel
from fastmmeval.parity import EXPLAINERS, Mismatch, PeerTask
from fastmmeval.parity.harness import peer_prompt_parts, prompt_parts
from fastmmeval.protocol import ImagePart, TextPart
from fastmmeval.tasks.config import parse_task
from fastmmeval.tasks.families.mmmu import MMMU_MC_PROMPT, MMMU_OPEN_PROMPT
from fastmmeval.tasks.messages import InterleavedText, MessageTemplate
from fastmmeval.tasks.render import render_messages
from fastmmeval.tasks.sources import DATA_DIR_ENV
from fastmmeval.tasks.task import Task

Parts = list[tuple[str, str]]  # ("text", text) or ("image", "image_N": the row's image of those pixels)

MORE_ROWS = [
    mmmu_row("validation_Chemistry_6", "Compare <image 1>, <image 2> and <image 3>: which is largest?",
             "['the first', 'the second', 'the third']", "C", "multiple-choice", 3),
    mmmu_row("validation_Design_7", "<image 1> Which option continues the pattern?",
             "['<image 2>', '<image 3>', '<image 4>', 'none of them']", "A", "multiple-choice", 4),
    mmmu_row("validation_Music_8", "Listen:\n <image 1>\n", "[]", "C major", "open", 1),  # ends at its tag
    mmmu_row("validation_Math_9", "What is 2 + 2?", "[]", "4", "open", 0),  # no image: the text stripped
]  # fmt: skip
OUT_OF_ORDER = "validation_Physics_4"  # "<image 2> and <image 1> show the same object. What is it?"
# The question and its options name the same images.
REPEATED = mmmu_row("validation_Art_10", "Which of <image 1> and <image 2> is older?", "['<image 1>', '<image 2>']",
                    "A", "multiple-choice", 2)  # fmt: skip


def labelled(image: Image.Image, row: dict[str, Any]) -> str:
    """The name of the row's image with these pixels."""
    pixels = image.convert("RGB").tobytes()
    names = [f"image_{n}" for n in range(1, 8) if row[f"image_{n}"] is not None]
    return next(n for n in names if row[n].convert("RGB").tobytes() == pixels)


def ours(task: Task, rows: list[dict[str, Any]]) -> dict[str, Parts]:
    """Our user turn for each row, by doc id."""
    by_id = {r["id"]: r for r in rows}
    out = {}
    for ref in task.doc_refs():
        doc = task.doc(ref)
        [message] = task.request(doc, seed=0).messages
        row = by_id[doc.id]
        out[doc.id] = [("image", labelled(p.image, row)) if isinstance(p, ImagePart) else ("text", p.text)
                       for p in message.content]  # fmt: skip
    return out


def theirs(row: dict[str, Any]) -> Parts:
    """lmms-eval's user turn for the row (mmmu_doc_to_messages)."""
    [message] = mmmu_chat_messages(row)
    return [("image", labelled(c["url"], row)) if c["type"] == "image" else ("text", c["text"])
            for c in message["content"]]  # fmt: skip


@pytest.fixture
def mmmu_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """mmmu_val on fixture rows saved in MMMU's hub schema, where the run reads its data."""

    def make(rows: list[dict[str, Any]]) -> Task:
        monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
        save_split(tmp_path, task_config("mmmu_val"), rows, MMMU)
        return Task(task_config("mmmu_val"))

    return make


def test_mmmu_prompts_are_lmms_eval_s_chat_messages(mmmu_task: Any) -> None:
    rows = [r for r in mmmu_rows() + MORE_ROWS if r["id"] != OUT_OF_ORDER]
    prompts = ours(mmmu_task(rows), rows)
    for row in rows:
        assert prompts[row["id"]] == theirs(row), row["id"]
    assert prompts["validation_Design_7"] == [
        ("image", "image_1"), ("text", "Which option continues the pattern?\nA."), ("image", "image_2"),
        ("text", "B."), ("image", "image_3"), ("text", "C."), ("image", "image_4"),
        ("text", f"D. none of them\n\n{MMMU_MC_PROMPT}"),
    ]  # fmt: skip
    assert prompts["validation_Music_8"] == [("text", "Listen:"), ("image", "image_1"), ("text", MMMU_OPEN_PROMPT)]
    assert prompts["validation_Math_9"] == [("text", f"What is 2 + 2?\n\n{MMMU_OPEN_PROMPT}")]


def test_each_tag_shows_the_image_it_names_where_lmms_eval_shows_them_in_turn(mmmu_task: Any) -> None:
    """The listed difference mmmu_image_order: lmms-eval puts the named images, each once in number
    order, at its first tags, and drops the text between the last of those tags and the last tag."""
    assert "mmmu_image_order" in task_config("mmmu_val").lmms_eval.differences
    out_of_order = next(r for r in mmmu_rows() if r["id"] == OUT_OF_ORDER)
    prompts = ours(mmmu_task([out_of_order, REPEATED]), [out_of_order, REPEATED])
    same_object = f"show the same object. What is it?\n\n{MMMU_OPEN_PROMPT}"
    assert prompts[OUT_OF_ORDER] == [("image", "image_2"), ("text", "and"), ("image", "image_1"), ("text", same_object)]
    assert theirs(out_of_order) == [("image", "image_1"), ("text", "and"), ("image", "image_2"), ("text", same_object)]
    question = [("text", "Which of"), ("image", "image_1"), ("text", "and"), ("image", "image_2")]
    assert prompts[REPEATED["id"]] == [*question, ("text", "is older?\nA."), ("image", "image_1"), ("text", "B."),
                                       ("image", "image_2"), ("text", MMMU_MC_PROMPT)]  # fmt: skip
    assert theirs(REPEATED) == [*question, ("text", MMMU_MC_PROMPT)]  # the question's end and its options dropped


def test_the_parity_check_names_the_image_order_difference(mmmu_task: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its explainer accounts for the prompts of those rows as lmms-eval builds them, not for others."""
    monkeypatch.setitem(lmms("mmmu.utils").config["metadata"], "interleaved_format", False)  # set back after
    rows = [next(r for r in mmmu_rows() if r["id"] == OUT_OF_ORDER), REPEATED]
    task, peer = mmmu_task(rows), PeerTask.load("mmmu_val")
    explains = EXPLAINERS.get("mmmu_image_order")
    for ref, row in zip(task.doc_refs(), rows, strict=True):
        ours, theirs = prompt_parts(task.request(task.doc(ref), seed=0)), peer_prompt_parts(peer, row)
        assert ours != theirs and explains(Mismatch("prompt", "prompt", (ref.id,), (), ours, theirs), task)
        reworded = [(kind, value + "!" if kind == "text" else value) for kind, value in theirs]
        assert not explains(Mismatch("prompt", "prompt", (ref.id,), (), ours, reworded), task)


@pytest.mark.parametrize(("tag", "lmms_eval_fails_with"), [("<image 3>", AttributeError), ("<image 8>", KeyError)])
def test_a_tag_naming_no_image_of_the_row_fails_its_doc(mmmu_task: Any, tag: str, lmms_eval_fails_with: type) -> None:
    """lmms-eval's run stops there (image_3 is None; there is no image_8); here the doc fails, named."""
    row = mmmu_row("validation_Art_11", f"<image 1> or {tag}?", "['left', 'right']", "A", "multiple-choice", 2)
    with pytest.raises(lmms_eval_fails_with):
        mmmu_chat_messages(row)
    task = mmmu_task([row])
    doc = task.doc(task.doc_refs()[0])
    with pytest.raises(DocError, match=f"task mmmu_val, doc validation_Art_11: the prompt shows '{tag}', but field "
                                       f"'images' holds no image {tag[7]}") as failed:  # fmt: skip
        task.request(doc, seed=0)
    assert failed.value.kind == FailureKind.MISSING_IMAGE_FIELD


def test_any_task_interleaves_a_list_field_by_its_own_placeholder() -> None:
    """The pattern and the list are data: here `[fig N]` over a `figures` list; an image named twice
    is the same decoded image twice; text around the placeholders is stripped, empty pieces dropped."""
    figure_text = InterleavedText("[fig 2]  vs  [fig 1] \n then [fig 2]", r"\[fig (\d)\]", "figures")
    template = (MessageTemplate("user", (("text", "Intro."), ("text", figure_text))),)
    figures = [photo(1, 16), photo(2, 16)]
    [message] = render_messages(template, {"figures": figures}, None, "doc 0")
    kinds = [p.text if isinstance(p, TextPart) else p.image.tobytes() for p in message.content]
    assert kinds == ["Intro.", figures[1].tobytes(), "vs", figures[0].tobytes(), "then", figures[1].tobytes()]
    assert message.content[1].image is message.content[5].image  # decoded once
    with pytest.raises(DocError, match="doc 0: field 'figures' holds no list of images"):
        render_messages(template, {"figures": photo(1, 16)}, None, "doc 0")
    with pytest.raises(DocError, match=r"doc 0: the prompt shows '\[fig 2\]', but field 'figures' holds no image 2"):
        render_messages(template, {"figures": figures[:1]}, None, "doc 0")


def test_the_backends_keep_images_where_the_text_puts_them(mmmu_task: Any) -> None:
    """OpenAI-style chat (vLLM, OpenAI), Anthropic blocks and a local model's chat template all
    take the parts in order, several images anywhere."""
    rows = MORE_ROWS[1:2]  # an image before the question, three in the options
    task = mmmu_task(rows)
    request = task.request(task.doc(task.doc_refs()[0]), seed=0)
    order = ["image" if isinstance(p, ImagePart) else "text" for p in request.messages[0].content]
    assert order == ["image", "text", "image", "text", "image", "text", "image", "text"]
    [chat] = to_vllm_chat(request)
    assert [p["type"].replace("image_url", "image") for p in chat["content"]] == order
    assert [b["type"] for b in anthropic_content(chat["content"])] == order  # type: ignore[union-attr]

    class Template:
        def apply_chat_template(self, conversation: list[dict[str, Any]], **_: Any) -> str:
            return "".join(p.get("text", "<img>") for p in conversation[0]["content"])

    model = types.SimpleNamespace(processor=Template(), tokenizer=None, chat_template=None)
    text, images = VisionLanguageModel.chat_text(model, request)  # type: ignore[arg-type]
    assert text.startswith("<img>Which option") and text.count("<img>") == 4
    assert [i.tobytes() for i in images] == [p.image.tobytes() for p in request.messages[0].content
                                             if isinstance(p, ImagePart)]  # fmt: skip


GOOD = """\
task: t
dataset: {data_files: {test: d.jsonl}}
split: test
doc_to_messages:
  - role: user
    content:
      - text: "{question}"
        interleave: {pattern: "<image (\\\\d+)>", images: images}
target: answer
output_type: generate
metrics: [exact_match]
"""


def test_a_task_file_names_its_placeholder_and_image_list(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(GOOD)
    [turn] = parse_task(path).doc_to_messages
    assert turn.parts == (("text", InterleavedText("{question}", r"<image (\d+)>", "images")),)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('{pattern: "<image (\\\\d+>", images: images}', r"t.yaml:8: field 'pattern': bad regular expression"),
        ('{pattern: "<image \\\\d+>", images: images}', r"t.yaml:8: field 'pattern': needs one group, .* has 0"),
        ('{pattern: "<(image) (\\\\d+)>", images: images}', r"t.yaml:8: field 'pattern': needs one group, .* has 2"),
        ('{pattern: "(\\\\d*)", images: images}', r"t.yaml:8: field 'pattern': matches empty text"),
        ('{patern: "<image (\\\\d+)>", images: images}', r"t.yaml:8: field 'patern': unknown .*'pattern'\?"),
        ('{pattern: "<image (\\\\d+)>"}', r"t.yaml:8: missing required field 'images'"),
        ('{pattern: "<image (\\\\d+)>", images: [image_1]}', r"t.yaml:8: field 'images': expected str"),
        ('"<image (\\\\d+)>"', r"t.yaml:8: field 'interleave': expected dict"),
    ],
)
def test_a_bad_interleave_setting_fails_with_its_file_and_line(tmp_path: Path, setting: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(GOOD.replace('{pattern: "<image (\\\\d+)>", images: images}', setting))
    with pytest.raises(ConfigError, match=message):
        parse_task(path)


def test_interleave_belongs_to_a_text_part(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(GOOD.replace('- text: "{question}"', "- image: image"))
    with pytest.raises(ConfigError, match=r"t.yaml:\d+: field 'content': each part is \{text: <template>\} "
                                          r"\(\+ interleave\) or \{image: <field>\}"):  # fmt: skip
        parse_task(path)
