"""Imports run downhill: each module of ``hero`` imports only modules on its own floor or below.

The floors, lowest first (a module's floor is its longest listed prefix):

    0  errors once results records jsonl bed knobs   plain records, files, the bed interface, the knob table,
       statistics logs                             the statistics a record stores (torch-free, shared with analysis), logging
    1  model objectives data evaluation calibration_file distributed preemption wandb_offline summary checkpoints
    2  testbed smollm2                                 the beds
    3  backbones methods training update tracking      registries of beds and methods; the loop
    4  spec scoring pipeline rescore                   one run end to end: its spec, its scoring, the run
    5  calibration dispatch bench audit                what runs many runs

Imports inside functions count too: hiding an upward import in a function is still an upward import.
No module of ``hero`` or ``analysis`` reaches itself through its imports, not even through a
function-local or ``TYPE_CHECKING`` one (within a floor the order is not listed; a circle is refused).
``analysis`` reads records and never reaches into ``tests/``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOORS = {
    0: ("errors", "once", "results", "records", "jsonl", "bed", "knobs", "statistics", "logs"),
    1: (
        "model",
        "objectives",
        "data",
        "evaluation",
        "calibration_file",
        "distributed",
        "preemption",
        "wandb_offline",
        "summary",
        "checkpoints",
    ),
    2: ("testbed", "smollm2"),
    3: ("backbones", "methods", "training", "update", "tracking"),
    4: ("spec", "scoring", "pipeline", "rescore"),
    5: ("calibration", "dispatch", "bench", "audit"),
}
FLOOR = {name: floor for floor, names in FLOORS.items() for name in names}


def floor_of(module: str) -> int | None:
    """The floor of ``hero.<top>...`` (None for ``hero`` itself, whose lazy names are the public API)."""
    parts = module.split(".")
    return FLOOR[parts[1]] if len(parts) > 1 else None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``hero`` import in a file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "hero":
            names = [f"{node.module}.{a.name}" if node.module == "hero" else node.module for a in node.names]
            out += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "hero"]
    return out


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def project_modules() -> dict[str, Path]:
    """Module name -> file of every module of ``hero`` and ``analysis``."""
    return {module_name(path): path for top in ("hero", "analysis") for path in (REPO / top).rglob("*.py")}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, at any depth (``from p import m`` names the module p.m)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = (targets & set(modules)) - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_every_hero_module_has_a_floor():
    tops = {p.relative_to(REPO / "hero").parts[0].removesuffix(".py") for p in (REPO / "hero").rglob("*.py")}
    assert sorted(tops - set(FLOOR) - {"__init__", "__main__"}) == []


def test_hero_imports_run_downhill():
    upward = []
    for path in sorted((REPO / "hero").rglob("*.py")):
        source = floor_of(module_name(path))
        if source is None:
            continue
        for line, target in imports(path):
            if "." in target and target.split(".")[1] in FLOOR and floor_of(target) > source:
                upward.append(
                    f"{path.relative_to(REPO)}:{line} (floor {source}) imports {target} (floor {floor_of(target)})"
                )
    assert upward == []


def test_analysis_reaches_nothing_in_tests():
    for path in (REPO / "analysis").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert '"tests"' not in text and "tests/" not in text and "import tests" not in text, path


def hero_closure(module: str) -> set[str]:
    """Every ``hero`` module that importing ``module`` can reach (imports inside functions included)."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for candidate in (REPO / Path(*name.split(".")), REPO / Path(*name.split(".")) / "__init__"):
            path = candidate.with_suffix(".py")
            if path.is_file():
                todo += [target for _, target in imports(path)]
    return seen


def test_rescoring_and_the_run_spec_need_no_pipeline():
    """Scoring is its own module (``hero.scoring``): rescoring a run never imports the training pipeline."""
    for module in ("hero.rescore", "hero.scoring", "hero.spec"):
        assert "hero.pipeline" not in hero_closure(module), module
    assert "hero.pipeline" in hero_closure("hero.calibration.trials")  # the closure does follow imports


def test_analysis_and_the_shared_statistics_import_without_torch():
    """``analysis`` must run where torch is not installed; it shares its formulas through ``hero.statistics``."""
    modules = ["analysis", "analysis.gates", "analysis.reference", "analysis.two_suites", "hero.statistics"]
    code = (
        f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_no_import_circles():
    assert import_circles(import_graph(project_modules())) == []


def test_import_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
