"""The installed package layout."""

import importlib.util
from pathlib import Path

import fastmmeval
import fastmmeval.triton_kernels


def test_our_triton_kernels_live_inside_the_package_not_at_top_level() -> None:
    assert Path(fastmmeval.triton_kernels.__file__).parent.name == "triton_kernels"
    bare = importlib.util.find_spec("triton_kernels")
    # A bare `triton_kernels` may exist (triton ships one) but must never be ours. (Run pytest
    # as `pytest`, not `python -m pytest`, which puts the checkout itself on sys.path.)
    assert bare is None or Path(bare.origin or "").resolve() != Path(fastmmeval.triton_kernels.__file__).resolve()


def test_the_native_core_is_built() -> None:
    from fastmmeval import _core

    assert _core.ngram_hashes.__doc__ and "XXH3-64" in _core.ngram_hashes.__doc__


def test_python_dash_m_fastmmeval_runs_the_cli() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "fastmmeval", "models"], capture_output=True, text=True, check=True)
    assert "socratic" in out.stdout and "hf" in out.stdout


PACKAGE = Path(fastmmeval.__file__).parent
REPO = PACKAGE.parent.parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every module of the package -> the package modules it imports anywhere (function-level imports too)."""
    import ast

    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up per extra dot
                    parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parents, *filter(None, [base])])
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                out.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_in_a_circle() -> None:
    assert _cycles(_imports()) == []


def test_no_flow_imports_back_up_into_one_that_imports_it() -> None:
    """Collapsed to the package's top-level modules and sub-packages (tasks, models, contam, ...),
    the imports still form a DAG."""
    top: dict[str, set[str]] = {}
    for module, imported in _imports().items():
        top.setdefault(".".join(module.split(".")[:2]), set()).update(".".join(m.split(".")[:2]) for m in imported)
    assert _cycles({k: v - {k} for k, v in top.items()}) == []


def test_no_source_file_exceeds_400_lines() -> None:
    sources = [*PACKAGE.rglob("*.py"), *(REPO / "bench").glob("*.py"), *(REPO / "triton_kernels").glob("*.py")]
    sources += [p for p in (REPO / "cpp").rglob("*.[ch]pp") if "third_party" not in p.parts]
    lines = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in sources}
    long = {path: n for path, n in lines.items() if n > 400}
    assert long == {}
