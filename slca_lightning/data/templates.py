"""Question templates of the synthetic task generator, with their gold calls.

A template draws its parameters from a ``random.Random`` and returns ``(question, steps,
answer)``: the user question, the gold calls (one list per step) and, for ``irrelevant``
templates only, a reference reply. Multi-step templates run the real tool function on
the first step to get the second step's argument.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass

from slca_lightning.data.suite import CITIES, ToolSuite
from slca_lightning.types import ToolCall

__all__ = ["KINDS", "TEMPLATES", "Template"]

KINDS = ("single", "parallel", "multistep", "irrelevant")
Built = tuple[str, list[list[ToolCall]], str | None]

_WORDS = "red apple quick fox blue sky green tree small cat happy dog river stone light cloud"
_WORDS = _WORDS.split()
_UNIT_NAMES = {
    "m": "meters",
    "km": "kilometers",
    "mi": "miles",
    "ft": "feet",
    "kg": "kilograms",
    "lb": "pounds",
    "C": "degrees Celsius",
    "F": "degrees Fahrenheit",
}
_PAIRS = [("km", "mi"), ("mi", "km"), ("m", "ft"), ("ft", "m"), ("km", "m")]
_PAIRS += [("kg", "lb"), ("lb", "kg"), ("C", "F"), ("F", "C")]
_CHAINS = [("km", "m", "ft"), ("mi", "km", "m"), ("ft", "m", "km")]
_LANGS = ["French", "German", "Spanish", "Italian", "Japanese", "Swahili"]
_NAMES = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jun"]
_COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries", "Wayne Corp"]


@dataclass(frozen=True)
class Template:
    """One question template: its family (None: any), kind, name and builder."""

    family: str | None
    kind: str
    name: str
    build: Callable[[random.Random, ToolSuite], Built]


def _c(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def _text(rng: random.Random) -> str:
    return " ".join(rng.sample(_WORDS, rng.randint(1, 4)))


def _date(rng: random.Random) -> str:
    return (dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(0, 11322))).isoformat()


def _day(rng: random.Random) -> str:
    return rng.choice(["today", "tomorrow"])


def _two(rng: random.Random, draw: Callable[[random.Random], object]) -> tuple:
    first = draw(rng)
    second = draw(rng)
    while second == first:
        second = draw(rng)
    return first, second


TEMPLATES: list[Template] = []


def _template(family: str | None, kind: str, name: str):
    def register(fn: Callable[[random.Random, ToolSuite], Built]):
        TEMPLATES.append(Template(family, kind, name, fn))
        return fn

    return register


# --- math --------------------------------------------------------------------------------
@_template("math", "single", "add")
def _(rng, suite):
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    return f"What is {a} plus {b}?", [[_c("add", a=a, b=b)]], None


@_template("math", "single", "multiply")
def _(rng, suite):
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    return f"Multiply {a} by {b}.", [[_c("multiply", a=a, b=b)]], None


@_template("math", "single", "power")
def _(rng, suite):
    x, y = rng.randint(2, 12), rng.randint(2, 5)
    return f"What is {x} to the power of {y}?", [[_c("power", base=x, exponent=y)]], None


@_template("math", "parallel", "add_and_multiply")
def _(rng, suite):
    a, b, c, d = (rng.randint(1, 50) for _ in range(4))
    q = f"What is {a} plus {b}, and what is {c} times {d}?"
    return q, [[_c("add", a=a, b=b), _c("multiply", a=c, b=d)]], None


@_template("math", "parallel", "power_and_add")
def _(rng, suite):
    x, y, a, b = rng.randint(2, 9), rng.randint(2, 4), rng.randint(1, 99), rng.randint(1, 99)
    q = f"Compute {x} raised to the power {y}, and also {a} + {b}."
    return q, [[_c("power", base=x, exponent=y), _c("add", a=a, b=b)]], None


@_template("math", "multistep", "add_then_multiply")
def _(rng, suite):
    a, b, c = rng.randint(1, 50), rng.randint(1, 50), rng.randint(2, 9)
    first = _c("add", a=a, b=b)
    total = suite.run(first)["result"]
    q = f"Add {a} and {b}, then multiply the sum by {c}."
    return q, [[first], [_c("multiply", a=total, b=c)]], None


@_template("math", "multistep", "power_then_add")
def _(rng, suite):
    x, y, c = rng.randint(2, 9), rng.randint(2, 4), rng.randint(1, 99)
    first = _c("power", base=x, exponent=y)
    value = suite.run(first)["result"]
    q = f"Raise {x} to the power {y}, then add {c} to the result."
    return q, [[first], [_c("add", a=value, b=c)]], None


# --- units -------------------------------------------------------------------------------
def _conv(rng):
    src, dst = rng.choice(_PAIRS)
    return rng.randint(1, 100), src, dst


@_template("units", "single", "convert_words")
def _(rng, suite):
    v, src, dst = _conv(rng)
    q = f"Convert {v} {_UNIT_NAMES[src]} to {_UNIT_NAMES[dst]}."
    return q, [[_c("convert", value=v, from_unit=src, to_unit=dst)]], None


@_template("units", "single", "convert_symbols")
def _(rng, suite):
    v, src, dst = _conv(rng)
    q = f"How much is {v} {src} in {dst}?"
    return q, [[_c("convert", value=v, from_unit=src, to_unit=dst)]], None


@_template("units", "parallel", "convert_two")
def _(rng, suite):
    (v1, a, b), (v2, c, d) = _two(rng, _conv)
    q = f"Convert {v1} {_UNIT_NAMES[a]} to {_UNIT_NAMES[b]} and {v2} {c} to {d}."
    calls = [_c("convert", value=v1, from_unit=a, to_unit=b)]
    return q, [[*calls, _c("convert", value=v2, from_unit=c, to_unit=d)]], None


@_template("units", "multistep", "convert_chain")
def _(rng, suite):
    (a, b, c), v = rng.choice(_CHAINS), rng.randint(1, 100)
    first = _c("convert", value=v, from_unit=a, to_unit=b)
    mid = suite.run(first)["value"]
    q = f"Convert {v} {_UNIT_NAMES[a]} to {_UNIT_NAMES[b]}, then convert that result to {c}."
    return q, [[first], [_c("convert", value=mid, from_unit=b, to_unit=c)]], None


# --- city --------------------------------------------------------------------------------
@_template("city", "single", "weather")
def _(rng, suite):
    city, day = rng.choice(CITIES), _day(rng)
    return f"What's the weather in {city} {day}?", [[_c("weather", city=city, day=day)]], None


@_template("city", "single", "city_info")
def _(rng, suite):
    city = rng.choice(CITIES)
    q = rng.choice(["Tell me about the city of {}.", "Which country is {} in?"]).format(city)
    return q, [[_c("city_info", city=city)]], None


@_template("city", "parallel", "weather_two")
def _(rng, suite):
    (c1, c2), day = _two(rng, lambda r: r.choice(CITIES)), _day(rng)
    q = f"What's the weather {day} in {c1} and in {c2}?"
    return q, [[_c("weather", city=c1, day=day), _c("weather", city=c2, day=day)]], None


@_template("city", "parallel", "info_and_weather")
def _(rng, suite):
    c1, c2, day = rng.choice(CITIES), rng.choice(CITIES), _day(rng)
    q = f"Give me facts about {c1} and the weather in {c2} {day}."
    return q, [[_c("city_info", city=c1), _c("weather", city=c2, day=day)]], None


@_template("city", "multistep", "sister_city_weather")
def _(rng, suite):
    city, day = rng.choice(CITIES), _day(rng)
    first = _c("city_info", city=city)
    sister = suite.run(first)["sister_city"]
    q = f"What is the weather {day} in the sister city of {city}?"
    return q, [[first], [_c("weather", city=sister, day=day)]], None


# --- text --------------------------------------------------------------------------------
@_template("text", "single", "reverse")
def _(rng, suite):
    t = _text(rng)
    return f"Reverse the text '{t}'.", [[_c("reverse", text=t)]], None


@_template("text", "single", "word_count")
def _(rng, suite):
    t = _text(rng)
    return f"How many words are in '{t}'?", [[_c("word_count", text=t)]], None


@_template("text", "parallel", "reverse_and_count")
def _(rng, suite):
    t1, t2 = _text(rng), _text(rng)
    q = f"Reverse '{t1}' and count the words in '{t2}'."
    return q, [[_c("reverse", text=t1), _c("word_count", text=t2)]], None


@_template("text", "multistep", "reverse_then_count")
def _(rng, suite):
    t = _text(rng)
    first = _c("reverse", text=t)
    rev = suite.run(first)["text"]
    q = f"Reverse '{t}', then count the words of the reversed text."
    return q, [[first], [_c("word_count", text=rev)]], None


# --- dates -------------------------------------------------------------------------------
@_template("dates", "single", "add_days")
def _(rng, suite):
    d, n = _date(rng), rng.randint(1, 400)
    if rng.random() < 0.5:
        return f"What date is {n} days after {d}?", [[_c("add_days", date=d, days=n)]], None
    return f"What date was {n} days before {d}?", [[_c("add_days", date=d, days=-n)]], None


@_template("dates", "single", "weekday")
def _(rng, suite):
    d = _date(rng)
    return f"What day of the week is {d}?", [[_c("weekday", date=d)]], None


@_template("dates", "parallel", "weekday_two")
def _(rng, suite):
    d1, d2 = _two(rng, _date)
    q = f"Which days of the week are {d1} and {d2}?"
    return q, [[_c("weekday", date=d1), _c("weekday", date=d2)]], None


@_template("dates", "parallel", "add_days_and_weekday")
def _(rng, suite):
    d1, d2, n = _date(rng), _date(rng), rng.randint(1, 400)
    q = f"What date is {n} days after {d1}, and what weekday is {d2}?"
    return q, [[_c("add_days", date=d1, days=n), _c("weekday", date=d2)]], None


@_template("dates", "multistep", "weekday_after")
def _(rng, suite):
    d, n = _date(rng), rng.randint(1, 400)
    first = _c("add_days", date=d, days=n)
    later = suite.run(first)["date"]
    q = f"What day of the week will it be {n} days after {d}?"
    return q, [[first], [_c("weekday", date=later)]], None


# --- irrelevant (no tool does it, or no tool is needed) -------------------------------------
def _no_tool(name: str, question: str, reply: str) -> None:
    @_template(None, "irrelevant", name)
    def _(rng, suite):
        slots = {
            "n": rng.randint(2, 8),
            "city": rng.choice(CITIES),
            "other": rng.choice(CITIES),
            "word": rng.choice(_WORDS),
            "lang": rng.choice(_LANGS),
            "name": rng.choice(_NAMES),
            "company": rng.choice(_COMPANIES),
        }
        return question.format(**slots), [], reply.format(**slots)


_no_tool(
    "book_table",
    "Book a table for {n} people at a restaurant in {city} tonight.",
    "None of the available tools can book restaurants, so I can't reserve a table for {n} "
    "in {city}. You could call the restaurant or use a booking site.",
)
_no_tool(
    "translate",
    "Translate the word '{word}' into {lang}.",
    "None of the available tools translates text, so I can't look up '{word}' in {lang} "
    "with them; a dictionary or translation service can help.",
)
_no_tool(
    "send_email",
    "Send an email to {name} saying I'll be late.",
    "I can't send emails with the available tools. You could message {name} directly.",
)
_no_tool(
    "stock_price",
    "What is the current stock price of {company}?",
    "None of the available tools provides stock prices, so I can't tell you the current "
    "price of {company}.",
)
_no_tool(
    "flight",
    "Find me a flight from {city} to {other} next week.",
    "None of the available tools searches flights, so I can't find a flight from {city} "
    "to {other}.",
)
_no_tool(
    "greeting",
    "Hi! My name is {name}. How are you?",
    "Hello {name}! I'm doing well, thanks for asking. How can I help you today?",
)


@_template(None, "irrelevant", "which_larger")
def _(rng, suite):
    a, b = _two(rng, lambda r: r.randint(1, 999))
    return f"Which is larger, {a} or {b}?", [], f"{max(a, b)} is larger than {min(a, b)}."


@_template(None, "irrelevant", "parity")
def _(rng, suite):
    n = rng.randint(1, 9999)
    reply = f"{n} is an {'even' if n % 2 == 0 else 'odd'} number."
    return f"Is {n} an even or an odd number?", [], reply
