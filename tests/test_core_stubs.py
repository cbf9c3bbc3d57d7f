"""python/fastmmeval/_core.pyi against the native module: the same public names (functions, classes, their
methods and properties), the argument names, defaults and types of pybind11's signatures, and docstrings that
begin the native ones."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from fastmmeval import _core

PACKAGE = Path(__file__).parents[1] / "python" / "fastmmeval"
TREE = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
# pybind11 writes array_t<T> as Annotated[ArrayLike, T] (it converts array-likes) and integers and floats as
# SupportsInt | SupportsIndex and SupportsFloat | SupportsIndex: the stubs say NDArray[T], int and float.
SCALARS = {"SupportsInt": "int", "SupportsFloat": "float"}
# Bare generics in pybind11's signatures stand for any of their parametrizations in the stubs.
BARE = {"ndarray": "NDArray", "tuple": "tuple", "Sequence": "Sequence", "Callable": "Callable"}

Stub = ast.FunctionDef | ast.ClassDef


def stub_members(body: list[ast.stmt]) -> dict[str, Stub]:
    return {
        node.name: node
        for node in body
        if isinstance(node, Stub) and (not node.name.startswith("_") or node.name == "__init__")
    }


def native_members(obj: Any) -> dict[str, Any]:
    names = vars(obj) if inspect.isclass(obj) else {n: getattr(obj, n) for n in dir(obj)}
    return {n: v for n, v in names.items() if not n.startswith("_") or (n == "__init__" and inspect.isclass(obj))}


STUBS = stub_members(TREE.body)
CLASSES = {name: stub_members(node.body) for name, node in STUBS.items() if isinstance(node, ast.ClassDef)}


def is_property(node: Stub) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def native_signature(doc: str, name: str) -> ast.FunctionDef:
    """pybind11's signature line (the docstring's first) as a parsed def."""
    line = doc.split("\n", 1)[0]
    parsed = ast.parse(f"def {line if line.startswith(name + '(') else name + line}: ...").body[0]
    assert isinstance(parsed, ast.FunctionDef)
    return parsed


class _Plain(ast.NodeTransformer):
    """numpy.typing.NDArray -> NDArray, np.uint8 -> uint8, Annotated[ArrayLike, T] -> NDArray[T]."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        return ast.Name(node.attr)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.value, ast.Name) and node.value.id == "Annotated" and isinstance(node.slice, ast.Tuple):
            return ast.Subscript(ast.Name("NDArray"), node.slice.elts[1])
        return node


def union(annotation: ast.expr | None) -> list[str]:
    """The members of an annotation's union, plain (see _Plain and SCALARS)."""
    if annotation is None:
        return []
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        members = union(annotation.left) + union(annotation.right)
    else:
        members = [ast.unparse(_Plain().visit(annotation))]
    return [SCALARS.get(m, m) for m in members if m != "SupportsIndex"]


def agree(native: list[str], stub: list[str]) -> bool:
    """Whether the stub's union is the native one, a bare generic there covering its parametrizations."""
    left = list(stub)
    for member in native:
        covered = [s for s in left if s == member or (member in BARE and s.startswith(BARE[member] + "["))]
        if not covered:
            return False
        left = [s for s in left if s not in covered]
    return not left


def callables() -> list[tuple[str, Any, ast.FunctionDef]]:
    """(qualified name, native object, stub def) of every function, method and property in both."""
    found = []
    for name, node in STUBS.items():
        if isinstance(node, ast.FunctionDef) and hasattr(_core, name):
            found.append((name, getattr(_core, name), node))
    for cls, members in CLASSES.items():
        native = native_members(getattr(_core, cls, object))
        for name, node in members.items():
            if isinstance(node, ast.FunctionDef) and name in native:
                found.append((f"{cls}.{name}", native[name], node))
    return found


def test_every_native_name_has_a_stub_and_every_stub_a_native_name() -> None:
    assert sorted(STUBS) == sorted(native_members(_core))
    for name, members in CLASSES.items():
        native = native_members(getattr(_core, name))
        assert sorted(members) == sorted(native), name
        for member, node in members.items():
            assert is_property(node) == isinstance(native[member], property), f"{name}.{member}"
    for name, node in STUBS.items():
        assert isinstance(node, ast.ClassDef) == inspect.isclass(getattr(_core, name)), name


CALLABLES = callables()


@pytest.mark.parametrize(("name", "native", "stub"), CALLABLES, ids=[name for name, _, _ in CALLABLES])
def test_stub_signature_matches_the_native_one(name: str, native: Any, stub: ast.FunctionDef) -> None:
    if isinstance(native, property):
        got = native_signature(native.fget.__doc__, stub.name)
        assert [a.arg for a in stub.args.args] == ["self"]
    else:
        got = native_signature(native.__doc__, stub.name)
        assert [a.arg for a in stub.args.args] == [a.arg for a in got.args.args], f"{name}: argument names"
        defaults = [ast.literal_eval(d) for d in got.args.defaults]
        assert [ast.literal_eval(d) for d in stub.args.defaults] == defaults, f"{name}: defaults"
        methods = 1 if "." in name else 0  # self: unannotated in the stubs
        for native_arg, stub_arg in zip(got.args.args[methods:], stub.args.args[methods:], strict=True):
            want, have = union(native_arg.annotation), union(stub_arg.annotation)
            assert agree(want, have), f"{name}({stub_arg.arg}): native {want}, stub {have}"
    want, have = union(got.returns), union(stub.returns)
    assert agree(want, have), f"{name}: returns native {want}, stub {have}"


def native_doc(obj: Any, name: str) -> str:
    """The docstring without pybind11's signature line, its white space collapsed."""
    doc = obj.__doc__ or ""
    first, _, rest = doc.partition("\n\n")
    return " ".join((rest if first.startswith(f"{name}(") else doc).split())


def test_stub_docstrings_begin_the_native_ones() -> None:
    def check(node: ast.Module | Stub, obj: Any, name: str) -> None:
        doc = ast.get_docstring(node)
        if doc:
            assert native_doc(obj, name).startswith(" ".join(doc.split())), name

    check(TREE, _core, "_core")
    for name, node in STUBS.items():
        check(node, getattr(_core, name), name)
    for cls, members in CLASSES.items():
        native = native_members(getattr(_core, cls))
        for name, node in members.items():
            check(node, native[name], name)
