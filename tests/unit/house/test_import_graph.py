"""The package's import graph, read from the source (function-local imports included), has no
circle: a module never reaches itself through the modules it imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("slca_lightning", "callbacks")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports (anywhere in the file)."""
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
                mod = ".".join(p for p in (base, node.module or "") if p)
                deps.update(filter(None, (resolve(f"{mod}.{a.name}") for a in node.names)))
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_circle_and_nothing_else():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_local_and_relative_imports():
    graph = import_graph()
    # cli.commands.main imports the LightningModule inside the function
    assert "slca_lightning.training.module" in graph["slca_lightning.cli.commands"]
    assert "slca_lightning.training.update" in graph["slca_lightning.training.module"]


def test_no_module_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (each: modules that reach each other):\n" + "\n".join(
        " ↔ ".join(c) for c in found
    )


def test_the_product_never_imports_the_test_helpers():
    """``slca_lightning.testing`` serves tests and fixtures only; shipped configs and the
    runtime modules never reach it."""
    graph = import_graph()
    runtime = {m for m in graph if not m.startswith("slca_lightning.testing")}
    bad = sorted(
        f"{m} -> {d}" for m in runtime for d in graph[m] if d.startswith("slca_lightning.testing")
    )
    assert not bad, bad
    configs = [
        p for p in (ROOT / "configs").rglob("*.yaml") if "slca_lightning.testing" in p.read_text()
    ]
    assert not configs, configs


def floors() -> dict[str, int]:
    """The floor of each top-level part, read from the package docstring's list."""
    import re

    import slca_lightning

    doc = slca_lightning.__doc__ or ""
    text = doc[doc.index("Floors, lowest first") :]
    found: dict[str, int] = {}
    for number, body in re.findall(r"^(\d+)\. [^:\n]+:((?:.|\n   )*)", text, flags=re.M):
        for name in re.findall(r"``([a-z_]+)``", body):
            found[name] = int(number)
    return found


def unit(module: str) -> str:
    """The top-level part a module belongs to (``slca_lightning.rollout.x`` → ``rollout``)."""
    parts = module.split(".")
    if parts[0] != "slca_lightning":
        return parts[0]
    return parts[1] if len(parts) > 1 else "slca_lightning"


def test_every_part_has_a_floor():
    floor = floors()
    assert floor["types"] == 0 and floor["callbacks"] == 9
    missing = sorted({unit(m) for m in import_graph()} - set(floor))
    assert not missing, f"add these to the floors in slca_lightning/__init__.py: {missing}"


def test_imports_never_go_up_a_floor():
    floor = floors()
    graph = import_graph()
    up = sorted(
        f"{m} (floor {floor[unit(m)]}) -> {d} (floor {floor[unit(d)]})"
        for m, deps in graph.items()
        for d in deps
        if floor.get(unit(d), -1) > floor.get(unit(m), 99)
    )
    assert not up, "imports that go up a floor:\n" + "\n".join(up)


def test_no_circle_between_parts():
    parts: dict[str, set[str]] = {}
    for m, deps in import_graph().items():
        parts.setdefault(unit(m), set()).update(unit(d) for d in deps if unit(d) != unit(m))
    assert not cycles(parts), cycles(parts)


def private_imports() -> list[str]:
    """``from X import _name`` across module boundaries, in the package, callbacks,
    experiments and benchmarks (a private name is its module's business)."""
    bad = []
    for pkg in (*PACKAGES, "experiments", "benchmarks"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{f.relative_to(ROOT)}: from {node.module} import {alias.name}")
    return bad


def test_no_module_imports_another_modules_private_names():
    bad = private_imports()
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_the_package_root_holds_only_init_types_and_subpackages():
    loose = sorted(
        p.name
        for p in (ROOT / "slca_lightning").glob("*.py")
        if p.name not in ("__init__.py", "types.py")
    )
    assert not loose, f"group these into a subpackage: {loose}"
