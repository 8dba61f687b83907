"""The package's folders read as the data flow: each imports only from the layers before it, and no import hides
inside a function to dodge a cycle (the command line's lazy imports, which keep `diversed --help` fast, aside)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "diversed"
# the layers, in the order data flows through them; a module may import from its own layer and those before it
LAYERS = [("utils", "tracking", "statistics"), ("tasks",), ("decoding",), ("training",), ("runs",), ("analysis",),
          ("report",), ("bench", "plan", "cost", "cli")]


def layer(name: str) -> int:
    """The layer of diversed.{name} (a module or a folder of the package)."""
    top = name.split(".")[0]
    return next(i for i, members in enumerate(LAYERS) if top in members)


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        if rel.parts == ("__init__",):
            continue
        yield ".".join(rel.parts), ast.parse(path.read_text())


def imported(node) -> list[str]:
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("diversed"):
        if node.module == "diversed":
            return [alias.name for alias in node.names]
        return [node.module.removeprefix("diversed.")]
    if isinstance(node, ast.Import):
        return [a.name.removeprefix("diversed.") for a in node.names if a.name.startswith("diversed.")]
    return []


def test_every_module_is_in_a_layer():
    for name, _ in modules():
        layer(name)


def test_imports_point_down_the_layers():
    wrong = [f"{name} imports diversed.{other}" for name, tree in modules() for node in ast.walk(tree)
             for other in imported(node) if layer(other) > layer(name)]
    assert not wrong


def test_no_import_inside_a_function_outside_the_command_line():
    hidden = []
    for name, tree in modules():
        if name == "cli":
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                hidden += [f"{name}.{fn.name} imports diversed.{m}" for node in ast.walk(fn) for m in imported(node)]
    assert not hidden


def test_no_function_is_over_60_lines():
    """Small named steps (gpt-fast, nanoGPT): a unit that outgrows a screen is split."""
    long = [f"{name}.{fn.name}: {fn.end_lineno - fn.lineno + 1} lines" for name, tree in modules()
            for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            and fn.end_lineno - fn.lineno + 1 > 60]
    assert not long
