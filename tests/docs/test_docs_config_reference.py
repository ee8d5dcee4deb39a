"""docs/reference/configuration.md is what docs/gen_config_reference.py generates from the
code today, and it shows every range rule of ``slca_lightning.config.ranges.RANGES``."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", ROOT / "docs" / "gen_config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page(generator) -> str:
    return generator.PAGE.read_text(encoding="utf-8")


def test_committed_page_is_what_the_generator_writes(generator, page):
    assert page == generator.render(), (
        "docs/reference/configuration.md is stale: run python docs/gen_config_reference.py"
    )


def test_every_range_rule_is_on_the_page(generator, page):
    from slca_lightning.config.checks import rules_for
    from slca_lightning.config.ranges import RANGES

    classes = {generator.key_of(c): c for c in generator.all_classes(generator.load_modules())}
    blocks = {}
    for block in page.split("\n### ")[1:]:
        paths = re.findall(r"`([\w.]+)`", block.split("\n", 3)[2])
        for path in paths:
            blocks[path] = block
    missing = []
    for key in RANGES:
        block = blocks.get(key) or blocks.get(generator.class_path(classes[key]))
        if block is None:
            missing.append(f"{key}: no section")
            continue
        params = inspect.signature(classes[key]).parameters
        for name, rule in rules_for(classes[key]).items():
            if name not in params:
                continue
            row = next((r for r in block.splitlines() if r.startswith(f"| `{name}` |")), "")
            if rule.describe().removeprefix("must be ") not in row:
                missing.append(f"{key}.{name}: {rule.describe()!r} not in {row!r}")
    assert not missing, "\n".join(missing)
