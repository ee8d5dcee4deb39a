"""Simulator fidelity: the same calls through the simulator and through a real backend.

The calls are the gold calls of the built-in synthetic tasks (``--n`` of them, from
``--seed``). The simulated side is what the policy sees at rollout time: the calls go
through :class:`~slca_lightning.tools.simulator.SchemaGuidedSimulator` (argument validation,
the backend with retries, output-schema checks; no cache, so every call is measured) over
the backend under test. That backend is by default METHOD §7's LLM simulator
(:class:`~slca_lightning.tools.tool_backends.LLMBackend`) on the tiny model in-process
(``EngineChatBackend``), or any ``ToolBackend`` given by class path (``--simulator`` with
``--simulator-args`` as JSON; nested ``{"class_path", "init_args"}`` dicts are built too;
a ``SchemaGuidedSimulator`` class path is used as configured). The real side is the ground
truth, called directly: the built-in Python tools (``--real python``) or an MCP server
(``--mcp-command "python -m slca_lightning.tools.suite_mcp_server"`` or ``--mcp-url``).

Printed as a Markdown table: how many simulated observations are JSON objects and valid
against the tool's output schema (the MCP server's ``outputSchema``, else the built-in
tools' known output schemas; the simulator enforces it too, so an invalid response ends as
a simulator error), exact agreement (equal JSON values), key-level agreement (same
top-level keys) and value agreement (share of the real response's keys whose value the
simulator got right), plus errors on either side. The summary also holds the simulator's
``sim_output_invalid``, ``sim_retries`` and ``sim_backend_calls`` counters.

    python -m slca_lightning.eval.fidelity --n 20
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import shlex
import sys
from typing import Any

from slca_lightning.calls.schema import index_schemas, validate_arguments
from slca_lightning.tools.base import ToolBackend, ToolSimulator
from slca_lightning.tools.simulator import SchemaGuidedSimulator, output_schema
from slca_lightning.types import Task, ToolCall

__all__ = [
    "as_simulator",
    "build",
    "compare",
    "gold_calls",
    "main",
    "markdown_table",
    "run_fidelity",
]


def build(spec: Any) -> Any:
    """Instantiate ``{"class_path": "pkg.mod.Class", "init_args": {...}}`` (recursively);
    other values are returned as they are."""
    if isinstance(spec, list):
        return [build(v) for v in spec]
    if not isinstance(spec, dict):
        return spec
    if "class_path" not in spec:
        return {k: build(v) for k, v in spec.items()}
    module, _, name = str(spec["class_path"]).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"cannot import class_path {spec['class_path']!r}: {exc}") from exc
    return cls(**{k: build(v) for k, v in (spec.get("init_args") or {}).items()})


def gold_calls(n: int, seed: int = 0) -> list[tuple[ToolCall, Task]]:
    """The first ``n`` gold calls of the built-in synthetic tasks of ``seed``."""
    from slca_lightning.data.synthetic import SyntheticTaskGenerator

    out: list[tuple[ToolCall, Task]] = []
    for task in SyntheticTaskGenerator(seed=seed, irrelevant_fraction=0.0).generate(max(n, 1)):
        for step in task.gold_calls:
            out += [(call, task) for call in step]
        if len(out) >= n:
            break
    return out[:n]


def _parse(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def compare(simulated: str | None, real: str | None, out_schema: dict | None) -> dict[str, float]:
    """Agreement of one simulated response with the real one (None = that side failed):
    ``json_object``, ``schema_valid``, ``exact``, ``same_keys`` (1/0) and ``value_agreement``
    (share of the real response's keys with an equal simulated value)."""
    sim, ref = _parse(simulated), _parse(real)
    is_obj = isinstance(sim, dict)
    valid = is_obj and (
        out_schema is None or not validate_arguments({"parameters": out_schema}, sim)
    )
    row = {"json_object": float(is_obj), "schema_valid": float(valid), "exact": 0.0}
    row.update(same_keys=0.0, value_agreement=0.0)
    if simulated is not None and real is not None:
        row["exact"] = float(_same(sim, ref) if sim is not None else simulated == real)
    if is_obj and isinstance(ref, dict):
        row["same_keys"] = float(sim.keys() == ref.keys())
        if ref:
            row["value_agreement"] = sum(
                k in sim and _same(sim[k], v) for k, v in ref.items()
            ) / len(ref)
        else:
            row["value_agreement"] = float(not sim)
    return row


def _execute(backend: ToolBackend, call: ToolCall, schema: Any, task: Task) -> str | None:
    try:
        value = backend.execute(call, schema, task)
    except Exception:
        return None
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def as_simulator(
    simulator: ToolBackend | ToolSimulator,
    max_retries: int = 2,
    retry_backoff_s: float = 0.0,
    timeout_s: float | None = 60.0,
) -> ToolSimulator:
    """``simulator`` as is when it is a :class:`ToolSimulator`, else a
    :class:`SchemaGuidedSimulator` over it (cache off, so every call is measured)."""
    if isinstance(simulator, ToolSimulator):
        return simulator
    return SchemaGuidedSimulator(
        simulator,
        cache=False,
        max_retries=max_retries,
        retry_backoff_s=retry_backoff_s,
        timeout_s=timeout_s,
        max_workers=1,
    )


def _with_schemas(task: Task, schemas: dict[str, dict[str, Any]]) -> Task:
    """``task`` whose tools carry the schemas of ``schemas`` (with their output schemas)."""
    own = index_schemas(task.tools)
    tools = [schemas.get(name, schema) for name, schema in own.items()]
    return dataclasses.replace(task, tools=tools or list(schemas.values()))


def run_fidelity(
    simulator: ToolBackend | ToolSimulator,
    real: ToolBackend,
    calls: list[tuple[ToolCall, Task]],
    schemas: dict[str, dict[str, Any]],
    max_retries: int = 2,
    retry_backoff_s: float = 0.0,
) -> dict[str, float]:
    """Mean of :func:`compare` over ``calls`` plus ``n``, ``sim_errors``, ``real_errors``
    and the simulator's ``sim_output_invalid``, ``sim_retries``, ``sim_backend_calls``.

    The simulated side goes through :func:`as_simulator` (a backend is wrapped in
    :class:`SchemaGuidedSimulator` with ``max_retries``), on a copy of each task whose tools
    are the ``schemas`` entries (tool name → schema; its output schema, when declared, is
    enforced by the simulator and checked by :func:`compare`). An error observation counts
    in ``sim_errors`` and compares as a failed response. The real side is the ground truth,
    called directly; calls whose real response failed are counted in ``real_errors`` and
    left out of the means (and not simulated).
    """
    sim = as_simulator(simulator, max_retries=max_retries, retry_backoff_s=retry_backoff_s)
    before = dict(getattr(sim, "stats", {}))
    rows, sim_errors, real_errors = [], 0, 0
    for call, task in calls:
        schema = schemas.get(call.name)
        reference = _execute(real, call, schema, task)
        if reference is None:
            real_errors += 1
            continue
        result = sim(call, _with_schemas(task, schemas))
        sim_errors += result.is_error
        simulated = None if result.is_error else result.content
        rows.append(compare(simulated, reference, output_schema(schema)))
    keys = ("json_object", "schema_valid", "exact", "same_keys", "value_agreement")
    summary = {k: (sum(r[k] for r in rows) / len(rows) if rows else 0.0) for k in keys}
    summary.update(n=len(rows), sim_errors=sim_errors, real_errors=real_errors)
    after = dict(getattr(sim, "stats", {}))
    for key in ("output_invalid", "retries", "backend_calls"):
        summary[f"sim_{key}"] = after.get(key, 0) - before.get(key, 0)
    return summary


def markdown_table(name: str, real_name: str, summary: dict[str, float]) -> str:
    """One-row Markdown table of a :func:`run_fidelity` summary."""
    head = (
        "| simulator | real backend | calls | JSON object | schema-valid | exact | same keys "
        "| value agreement | sim errors | real errors |"
    )
    cells = [name, real_name, str(int(summary["n"]))]
    cells += [f"{100 * summary[k]:.1f}%" for k in ("json_object", "schema_valid", "exact")]
    cells += [f"{100 * summary[k]:.1f}%" for k in ("same_keys", "value_agreement")]
    cells += [str(int(summary["sim_errors"])), str(int(summary["real_errors"]))]
    return "\n".join([head, "|---|---|" + "---:|" * 8, "| " + " | ".join(cells) + " |"])


def _schemas_for(real: Any) -> dict[str, dict[str, Any]]:
    from slca_lightning.data.suite import builtin_suite
    from slca_lightning.tools.suite_mcp_server import OUTPUT_SCHEMAS

    if hasattr(real, "tool_schemas"):
        return index_schemas(real.tool_schemas())
    out = {}
    for schema in builtin_suite().schemas:
        name = schema["function"]["name"]
        out[name] = {"type": "function", "function": {**schema["function"]}}
        out[name]["function"]["output_schema"] = OUTPUT_SCHEMAS[name]
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description="Simulator fidelity against a real tool backend.")
    p.add_argument("--n", type=int, default=20, help="number of gold calls")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--simulator",
        default=None,
        help="class path of a ToolBackend (run through SGLS), or of a SchemaGuidedSimulator",
    )
    p.add_argument("--simulator-args", default="{}", help="its init args as JSON")
    p.add_argument("--model", default="tiny", help="model of the default LLM simulator")
    p.add_argument("--max-tokens", type=int, default=96, help="reply cap of the default one")
    p.add_argument("--max-retries", type=int, default=2, help="simulator retries per call")
    p.add_argument("--retry-backoff-s", type=float, default=0.0, help="simulator back-off")
    p.add_argument("--real", choices=("python", "mcp"), default="python")
    p.add_argument("--mcp-command", default="python -m slca_lightning.tools.suite_mcp_server")
    p.add_argument("--mcp-url", default=None, help="streamable-HTTP MCP endpoint instead")
    p.add_argument("--json", default=None, help="also write the summary to this file")
    ns = p.parse_args(argv)

    try:
        init_args = json.loads(ns.simulator_args)
    except ValueError as exc:
        p.error(f"--simulator-args is not JSON: {exc}")
    if ns.simulator:
        simulator = build({"class_path": ns.simulator, "init_args": init_args})
        name = ns.simulator.rpartition(".")[2]
    else:
        from slca_lightning.rollout.engine_chat_backend import EngineChatBackend
        from slca_lightning.tools.tool_backends import LLMBackend

        chat = EngineChatBackend(ns.model, max_tokens=ns.max_tokens)
        simulator = LLMBackend(chat, temperature=0.0, max_tokens=ns.max_tokens)
        name = f"LLMBackend({ns.model})"
    if ns.real == "mcp":
        from slca_lightning.tools.mcp_backend import MCPBackend

        if ns.mcp_url:
            real: Any = MCPBackend(url=ns.mcp_url)
        else:
            command, *args = shlex.split(ns.mcp_command)
            real = MCPBackend(command=sys.executable if command == "python" else command, args=args)
        real_name = "MCP " + real.describe()
    else:
        from slca_lightning.tools.tool_backends import PythonBackend

        real, real_name = PythonBackend(), "PythonBackend (built-in tools)"
    try:
        calls, schemas = gold_calls(ns.n, ns.seed), _schemas_for(real)
        summary = run_fidelity(simulator, real, calls, schemas, ns.max_retries, ns.retry_backoff_s)
    finally:
        if hasattr(real, "close"):
            real.close()
    print(markdown_table(name, real_name, summary))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
