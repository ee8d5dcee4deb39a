"""The built-in synthetic tool suite: schemas plus real, deterministic Python functions.

Ten tools in five families, short names so a tiny model can learn them:

- ``math``: ``add(a, b)``, ``multiply(a, b)``, ``power(base, exponent)`` (integers);
- ``units``: ``convert(value, from_unit, to_unit, decimals=3)`` over an enum of units;
- ``city``: ``weather(city, day)`` and ``city_info(city)`` from an in-memory table;
- ``text``: ``reverse(text)`` and ``word_count(text)``;
- ``dates``: ``add_days(date, days)`` and ``weekday(date)`` (ISO ``YYYY-MM-DD``).

Every function returns a JSON-serialisable dict and raises ``ValueError`` with a clear
message on bad argument values; :meth:`ToolSuite.call` also checks the arguments against
the JSON schema (``jsonschema``) first.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from slca_lightning.types import ToolCall

__all__ = ["CITIES", "UNITS", "ToolSuite", "builtin_suite"]

# city → (country, population in millions, sister city, today (°C, sky), tomorrow (°C, sky))
_CITY_TABLE: dict[str, tuple[str, float, str, tuple[int, str], tuple[int, str]]] = {
    "Paris": ("France", 2.1, "Rome", (18, "sunny"), (16, "cloudy")),
    "Rome": ("Italy", 2.8, "Paris", (24, "sunny"), (25, "sunny")),
    "Tokyo": ("Japan", 14.0, "Paris", (21, "rainy"), (19, "cloudy")),
    "Cairo": ("Egypt", 10.0, "Tokyo", (33, "sunny"), (34, "windy")),
    "Lima": ("Peru", 10.1, "Madrid", (19, "cloudy"), (20, "foggy")),
    "Oslo": ("Norway", 0.7, "Berlin", (4, "snowy"), (2, "snowy")),
    "Delhi": ("India", 16.8, "Cairo", (35, "hazy"), (36, "sunny")),
    "Sydney": ("Australia", 5.3, "London", (22, "windy"), (23, "sunny")),
    "Berlin": ("Germany", 3.7, "Oslo", (12, "rainy"), (13, "cloudy")),
    "Madrid": ("Spain", 3.3, "Lima", (27, "sunny"), (26, "sunny")),
    "London": ("United Kingdom", 8.9, "Sydney", (14, "rainy"), (15, "cloudy")),
    "Nairobi": ("Kenya", 4.4, "Delhi", (23, "cloudy"), (24, "rainy")),
}
CITIES: list[str] = list(_CITY_TABLE)

# unit → (dimension, factor to the base unit); temperatures are handled apart.
_UNIT_TABLE: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "C": ("temperature", 1.0),
    "F": ("temperature", 1.0),
}
UNITS: list[str] = list(_UNIT_TABLE)
_DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def _int(value: Any, name: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _choice(value: Any, name: str, options: list[str]) -> str:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}")
    return value


def _date(value: Any) -> _dt.date:
    try:
        if not isinstance(value, str) or len(value) != 10:
            raise ValueError
        return _dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"date must be a valid YYYY-MM-DD date, got {value!r}") from None


def add(a: int, b: int) -> dict[str, Any]:
    return {"result": _int(a, "a") + _int(b, "b")}


def multiply(a: int, b: int) -> dict[str, Any]:
    return {"result": _int(a, "a") * _int(b, "b")}


def power(base: int, exponent: int) -> dict[str, Any]:
    return {"result": _int(base, "base") ** _int(exponent, "exponent", 0, 10)}


def convert(value: float, from_unit: str, to_unit: str, decimals: int = 3) -> dict[str, Any]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"value must be a number, got {value!r}")
    src, dst = _choice(from_unit, "from_unit", UNITS), _choice(to_unit, "to_unit", UNITS)
    decimals = _int(decimals, "decimals", 0, 6)
    (dim_a, fa), (dim_b, fb) = _UNIT_TABLE[src], _UNIT_TABLE[dst]
    if dim_a != dim_b:
        raise ValueError(f"cannot convert {src} ({dim_a}) to {dst} ({dim_b})")
    if dim_a == "temperature":
        celsius = value if src == "C" else (value - 32.0) * 5.0 / 9.0
        out = celsius if dst == "C" else celsius * 9.0 / 5.0 + 32.0
    else:
        out = value * fa / fb
    return {"value": round(float(out), decimals), "unit": dst}


def weather(city: str, day: str) -> dict[str, Any]:
    row = _CITY_TABLE[_choice(city, "city", CITIES)]
    temp, sky = row[3] if _choice(day, "day", ["today", "tomorrow"]) == "today" else row[4]
    return {"city": city, "day": day, "temp_c": temp, "condition": sky}


def city_info(city: str) -> dict[str, Any]:
    country, pop, sister, _, _ = _CITY_TABLE[_choice(city, "city", CITIES)]
    return {"city": city, "country": country, "population_m": pop, "sister_city": sister}


def reverse(text: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {text!r}")
    return {"text": text[::-1]}


def word_count(text: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {text!r}")
    return {"count": len(text.split())}


def add_days(date: str, days: int) -> dict[str, Any]:
    start = _date(date)
    try:
        out = start + _dt.timedelta(days=_int(days, "days", -3650, 3650))
    except OverflowError:
        raise ValueError(f"{date} + {days} days is outside the supported calendar") from None
    return {"date": out.isoformat()}


def weekday(date: str) -> dict[str, Any]:
    return {"date": date, "weekday": _date(date).strftime("%A")}


def _schema(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    params["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


def _p(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


_CITY = _p("string", "City name.", enum=CITIES)
_DATE = _p("string", "A date as YYYY-MM-DD.", pattern=_DATE_PATTERN)
_TEXT = _p("string", "The input text.")


def _schemas() -> list[dict[str, Any]]:
    a, b = _p("integer", "First integer."), _p("integer", "Second integer.")
    return [
        _schema("add", "Add two integers.", {"a": a, "b": b}, ["a", "b"]),
        _schema("multiply", "Multiply two integers.", {"a": a, "b": b}, ["a", "b"]),
        _schema(
            "power",
            "Raise an integer base to an integer exponent (0 to 10).",
            {
                "base": _p("integer", "The base."),
                "exponent": _p("integer", "The exponent.", minimum=0, maximum=10),
            },
            ["base", "exponent"],
        ),
        _schema(
            "convert",
            "Convert a quantity between units of length, mass or temperature.",
            {
                "value": _p("number", "The quantity to convert."),
                "from_unit": _p("string", "Unit of the value.", enum=UNITS),
                "to_unit": _p("string", "Unit to convert to.", enum=UNITS),
                "decimals": _p("integer", "Rounding digits (default 3).", minimum=0, maximum=6),
            },
            ["value", "from_unit", "to_unit"],
        ),
        _schema(
            "weather",
            "Get the weather forecast of a city for today or tomorrow.",
            {"city": _CITY, "day": _p("string", "Which day.", enum=["today", "tomorrow"])},
            ["city", "day"],
        ),
        _schema(
            "city_info",
            "Get facts about a city: country, population and sister city.",
            {"city": _CITY},
            ["city"],
        ),
        _schema("reverse", "Reverse a text character by character.", {"text": _TEXT}, ["text"]),
        _schema("word_count", "Count the words of a text.", {"text": _TEXT}, ["text"]),
        _schema(
            "add_days",
            "Add a number of days (may be negative) to a date.",
            {"date": _DATE, "days": _p("integer", "Days to add.", minimum=-3650, maximum=3650)},
            ["date", "days"],
        ),
        _schema("weekday", "Get the day of the week of a date.", {"date": _DATE}, ["date"]),
    ]


_FAMILIES = {
    "math": ["add", "multiply", "power"],
    "units": ["convert"],
    "city": ["weather", "city_info"],
    "text": ["reverse", "word_count"],
    "dates": ["add_days", "weekday"],
}

_DESCRIBE: dict[str, Callable[[dict, dict], str]] = {
    "add": lambda a, r: f"{a['a']} + {a['b']} = {r['result']}",
    "multiply": lambda a, r: f"{a['a']} × {a['b']} = {r['result']}",
    "power": lambda a, r: f"{a['base']} to the power {a['exponent']} is {r['result']}",
    "convert": lambda a, r: f"{a['value']} {a['from_unit']} is {r['value']} {r['unit']}",
    "weather": lambda a, r: (
        f"the weather in {r['city']} {r['day']} is {r['temp_c']}°C and {r['condition']}"
    ),
    "city_info": lambda a, r: (
        f"{r['city']} is in {r['country']}, has {r['population_m']} million people "
        f"and its sister city is {r['sister_city']}"
    ),
    "reverse": lambda a, r: f"'{a['text']}' reversed is '{r['text']}'",
    "word_count": lambda a, r: f"'{a['text']}' has {r['count']} words",
    "add_days": lambda a, r: f"{a['days']} days from {a['date']} is {r['date']}",
    "weekday": lambda a, r: f"{r['date']} is a {r['weekday']}",
}


@dataclass
class ToolSuite:
    """A set of tools: OpenAI function schemas plus the local functions that run them.

    Attributes:
        schemas: ``{"type": "function", "function": {"name", "description", "parameters"}}``.
        functions: tool name → deterministic Python function returning a JSON-able dict.
        families: family name → tool names (for task generation and tool subsets).
        describers: tool name → ``f(arguments, result) -> str``, one clause of a summary.
    """

    schemas: list[dict[str, Any]]
    functions: dict[str, Callable[..., Any]]
    families: dict[str, list[str]] = field(default_factory=dict)
    describers: dict[str, Callable[[dict, dict], str]] = field(default_factory=dict)
    _validators: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def names(self) -> list[str]:
        """Tool names in schema order."""
        return [s["function"]["name"] for s in self.schemas]

    def schema(self, name: str) -> dict[str, Any]:
        """The OpenAI schema of one tool (``ValueError`` for an unknown name)."""
        for s in self.schemas:
            if s["function"]["name"] == name:
                return s
        raise ValueError(f"unknown tool {name!r}; known tools: {', '.join(self.names)}")

    def tools_of(self, families: list[str]) -> list[dict[str, Any]]:
        """Schemas of the tools of the given families, in schema order."""
        wanted = {n for f in families for n in self.families[f]}
        return [s for s in self.schemas if s["function"]["name"] in wanted]

    def validate(self, name: str, arguments: dict[str, Any]) -> None:
        """Raise ``ValueError`` unless ``arguments`` satisfy the tool's JSON schema."""
        validator = self._validators.get(name)
        if validator is None:  # checking the schema itself is slow: do it once per tool
            params = self.schema(name)["function"].get("parameters", {})
            cls = jsonschema.validators.validator_for(params)
            cls.check_schema(params)
            validator = self._validators[name] = cls(params)
        err = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path) or "arguments"
            raise ValueError(f"invalid arguments for {name} at {where}: {err.message}")

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validate ``arguments`` against the schema, then run the real function."""
        self.validate(name, arguments)
        return self.functions[name](**arguments)

    def run(self, call: ToolCall) -> dict[str, Any]:
        """:meth:`call` for a :class:`ToolCall`."""
        return self.call(call.name, call.arguments)

    def describe(self, call: ToolCall, result: dict[str, Any]) -> str:
        """One summary clause stating a call's result."""
        fn = self.describers.get(call.name)
        if fn is None:
            return f"{call.name} returned {json.dumps(result, ensure_ascii=False)}"
        return fn(call.arguments, result)


def builtin_suite() -> ToolSuite:
    """The built-in suite described in the module docstring (a fresh copy each call)."""
    functions: dict[str, Callable[..., Any]] = {
        "add": add,
        "multiply": multiply,
        "power": power,
        "convert": convert,
        "weather": weather,
        "city_info": city_info,
        "reverse": reverse,
        "word_count": word_count,
        "add_days": add_days,
        "weekday": weekday,
    }
    return ToolSuite(
        schemas=_schemas(),
        functions=functions,
        families={k: list(v) for k, v in _FAMILIES.items()},
        describers=dict(_DESCRIBE),
    )
