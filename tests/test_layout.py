"""The package's folders read as the data flow: each imports only from the layers before it, and no import hides
inside a function to dodge a cycle (the command line's lazy imports, which keep `diversed --help` fast, aside)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "diversed"
# the layers, in the order data flows through them; a module may import from its own layer and those before it
# (the experiment's declarations are read by every settings dataclass; its config, plan and cost read them all)
LAYERS = [("utils", "compat", "protocol", "tracking", "statistics", "calibration", "experiment.declared"), ("tasks",),
          ("decoding",), ("training",), ("runs",), ("experiment",), ("analysis",), ("report",), ("bench", "cli")]


def layer(name: str) -> int:
    """The layer of diversed.{name} (a module, or a folder of the package where the module is not named)."""
    named = [i for i, members in enumerate(LAYERS) if name in members]
    return named[0] if named else next(i for i, members in enumerate(LAYERS) if name.split(".")[0] in members)


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


def test_no_signature_takes_more_than_8_parameters():
    """A settings object (Criterion, Networks, Launch, Grid, Workload, a config) where a signature would pass more
    than 8 parameters; self and cls do not count."""
    wide = []
    for name, tree in modules():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = fn.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(names) > 8:
                    wide.append(f"{name}.{fn.name}: {len(names)} parameters")
    assert not wide


CONSTRUCTORS = {"tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint",
                "randperm", "linspace", "eye"}


def test_every_tensor_of_decoding_and_training_is_made_on_its_device():
    """A tensor made on the CPU beside CUDA models fails at its first use (a rollout's tokens indexing CUDA
    log-probabilities): each torch constructor in decoding/ and training/ names its device, or is moved (.to) or
    brought to the host (.tolist) at once."""
    unplaced = []
    for name, tree in modules():
        if name.split(".")[0] not in ("decoding", "training"):
            continue
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in CONSTRUCTORS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch" and not any(k.arg == "device" for k in node.keywords)):
                after = parents.get(node)
                if not (isinstance(after, ast.Attribute) and after.attr in ("to", "tolist")):
                    unplaced.append(f"{name}:{node.lineno} torch.{node.func.attr}")
    assert not unplaced


def test_the_tests_mirror_the_package_and_import_no_other_test():
    """tests/<folder>/ for diversed/<folder>/ (and workflow/ for the Snakemake workflow); shared helpers live in
    tests/helpers.py alone, so no test module imports another."""
    tests = PACKAGE.parent / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders <= {p.name for p in PACKAGE.iterdir() if p.is_dir()} | {"workflow"}, folders
    for path in tests.rglob("test_*.py"):
        names = [n for node in ast.walk(ast.parse(path.read_text())) for n in (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])]
        assert not [n for n in names if n.split(".")[-1].startswith("test_")], path


def test_no_two_modules_define_one_name():
    """One meaning per name: a module-level constant of the package (an upper-case name) is defined in one module
    only, so that an import never brings in a namesake with another meaning (decoding's models alone and head
    training's reward baselines were both BASELINES)."""
    where: dict[str, list[str]] = {}
    for name, tree in modules():
        for node in tree.body:
            targets = [t for t in (node.targets if isinstance(node, ast.Assign) else
                                   [node.target] if isinstance(node, ast.AnnAssign) else [])]
            for t in targets:
                if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("_"):
                    where.setdefault(t.id, []).append(name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}
