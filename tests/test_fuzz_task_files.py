"""Fuzz of the task-file loader: generated task YAML (a valid file mutated: wrong types, missing and
unknown keys, bad `extends`, bad templates, garbage and non-UTF-8 bytes) in an --include_path folder.
`fastmmeval tasks` and `tasks --info` exit 0 or 1, and on 1 print one `fastmmeval: error:` line that
names the file at fault; the Python API raises only FastmmevalError."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from fastmmeval.cli import main
from fastmmeval.errors import FastmmevalError
from fastmmeval.tasks import catalog, resolve

VALID: dict[str, Any] = {
    "task": "fz",
    "dataset": {"data_files": {"test": "rows.jsonl"}, "image_root": "."},
    "split": "test",
    "doc_id": "id",
    "doc_to_messages": [{"role": "user", "content": [{"text": "Q: {question}"}]}],
    "target": "answer",
    "output_type": "generate",
    "extractor": "first_word",
    "metrics": ["exact_match"],
    "generation": {"max_new_tokens": 8, "stop": ["\n"]},
    "group": "fuzz",
}
ROWS = [{"id": "a", "question": "one?", "answer": "1", "options": ["x", "y"]}]
# Where a mutation lands: a key of the top mapping or of a nested one (a tuple is a path into VALID).
PATHS = [
    *[(k,) for k in VALID], ("dataset", "data_files"), ("dataset", "image_root"), ("dataset", "path"),
    ("dataset", "builder"), ("dataset", "allow_absolute_paths"), ("doc_to_messages", 0, "role"),
    ("doc_to_messages", 0, "content"), ("doc_to_messages", 0, "content", 0, "text"),
    ("doc_to_messages", 0, "content", 0), ("generation", "temperature"), ("generation", "stop"), ("metrics", 0),
    ("choices",), ("mc_mode",), ("where",), ("docs",), ("lmms_eval",), ("process_doc",), ("version",),
    ("subset_of",), ("doc_ids",), ("tasks",),
]  # fmt: skip
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
template = st.text(alphabet="{}:!rsa0 question options.[]", max_size=16)
extends = st.sampled_from(["_base.yaml", "missing.yaml", "../outside.yaml", "fz", "fz2", "demo_yesno", "", "x.yml"])


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set (None: delete) the value at `path`, creating mappings on the way; a path through a value
    of another type stops there."""
    for key in path[:-1]:
        if isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        elif isinstance(data, dict):
            data = data.setdefault(key, {})
        else:
            return
    last = path[-1]
    if isinstance(data, dict):
        if value is None:
            data.pop(last, None)
        else:
            data[last] = value
    elif isinstance(data, list) and isinstance(last, int) and last < len(data) and value is not None:
        data[last] = value


mutation = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(PATHS)),
    st.tuples(st.just("set"), st.sampled_from(PATHS), junk),
    st.tuples(st.just("set"), st.just(("doc_to_messages", 0, "content", 0, "text")), template),
    st.tuples(st.just("set"), st.just(("extends",)), extends),
    st.tuples(st.just("set"), st.just(("output_type",)), st.just("multiple_choice")),
    st.tuples(st.just("set"), st.sampled_from(PATHS), st.just({"unknown_key": 1})),
)


@st.composite
def task_files(draw: st.DrawFn) -> dict[str, bytes]:
    """File name -> bytes of an --include_path folder: the task file `fz.yaml` (maybe a template it
    extends, a second task, a subset or group file), each a valid file mutated, or bytes that are no YAML."""
    files: dict[str, bytes] = {}
    names = ["fz.yaml", *draw(st.lists(st.sampled_from(["_base.yaml", "fz2.yaml", "sub.yaml", "grp.yaml"]),
                                       unique=True, max_size=2))]  # fmt: skip
    for name in names:
        data: Any = copy.deepcopy(VALID)
        if name == "_base.yaml":
            data.pop("task")
        elif name == "fz2.yaml":
            data |= {"task": "fz2", "extends": draw(extends)}
        elif name == "sub.yaml":
            data = {"task": "fz_sub", "subset_of": "fz", "doc_ids": "ids.txt"}
        elif name == "grp.yaml":
            data = {"group": "fzg", "tasks": ["fz", "fz2"]}
        for op in draw(st.lists(mutation, max_size=3)):
            _set(data, op[1], None if op[0] == "drop" else op[2])
        if draw(st.integers(0, 9)) == 0:
            data = draw(junk)
        text = yaml.safe_dump(data, allow_unicode=True)
        raw = draw(st.sampled_from(["yaml", "yaml", "yaml", "yaml", "cut", "bytes", "latin1"]))
        if raw == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        files[name] = (
            draw(st.binary(max_size=40)) if raw == "bytes" else text.encode("latin-1", "replace") + b"\xe9\xff"
            if raw == "latin1" else text.encode()
        )  # fmt: skip
    files["ids.txt"] = draw(st.sampled_from([b"a\n", b"", b"b\n", b"a\na\n", b"\xff\xfe"]))
    return files


@pytest.fixture(scope="module")
def small_builtin(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The catalog's built-in folder cut to one task (demo_yesno, a name `extends` may use): the loader's
    behaviour on the folders a user adds is the subject, and 57 files per example would cost minutes."""
    folder = tmp_path_factory.mktemp("builtin")
    shutil.copy(catalog.BUILTIN_DIR / "demo_yesno.yaml", folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(catalog, "BUILTIN_DIR", folder)
        yield folder


def _check(argv: list[str], folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc in (0, 1), (rc, err)
    if rc == 1:
        assert err.startswith("fastmmeval: error: ") and "\n" not in err, err
        assert str(folder) in err, f"the error does not name the file: {err}"


@given(files=task_files())
def test_any_task_folder_lists_or_fails_in_one_line_naming_the_file(
    files: dict[str, bytes], small_builtin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
        _check(["tasks", "--include_path", str(folder)], folder, capsys)
        _check(["tasks", "--include_path", str(folder), "--info", "fz", "--json"], folder, capsys)
        with contextlib.suppress(FastmmevalError):  # the API raises our errors only
            resolve(["fz"], [folder])


def test_a_non_utf8_task_file_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.yaml").write_bytes(b"task: caf\xe9\n")
    assert main(["tasks", "--include_path", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"fastmmeval: error: {tmp_path / 'bad.yaml'}: cannot read YAML")


def test_a_subset_file_that_extends_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Found by the fuzz: the inherited keys were refused naming the parent's file, not this one.
    (tmp_path / "sub.yaml").write_text("task: s\nsubset_of: demo_yesno\ndoc_ids: ids.txt\nextends: demo_yesno\n")
    assert main(["tasks", "--include_path", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"fastmmeval: error: {tmp_path / 'sub.yaml'}:4: a subset task file (subset_of) cannot use extends\n"
    )
