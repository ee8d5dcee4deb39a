"""The docs build's hooks (docs/hooks/): what they rewrite, on small inputs (no build)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"docs_hook_{name}", ROOT / "docs/hooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_links_to_files_off_the_site_become_their_paths():
    pytest.importorskip("mkdocs")
    hook = load("repo_files")
    page = "experiments/learning/README.md"
    hook._repo_pages.add(page)
    on_site = {"experiments/learning/REPORT.md", "experiments/warm_start/README.md"}
    files = SimpleNamespace(get_file_from_path=lambda p: object() if p in on_site else None)
    markdown = (
        "[REPORT.md](REPORT.md), [start](../warm_start/README.md#the-budget), "
        "[results/pooled](results/pooled), [gone](../../configs/overlays/gone.yaml), "
        "[web](https://example.org/x), [here](#a-heading)\n"
        "```\n[not a link](results/pooled)\n```\n"
    )
    out = hook.on_page_markdown(
        markdown, SimpleNamespace(file=SimpleNamespace(src_uri=page)), None, files
    )
    assert "[REPORT.md](REPORT.md)" in out
    assert "[start](../warm_start/README.md#the-budget)" in out
    assert "`experiments/learning/results/pooled`," in out
    assert "gone (`configs/overlays/gone.yaml`)" in out
    assert "[web](https://example.org/x)" in out and "[here](#a-heading)" in out
    assert "[not a link](results/pooled)" in out  # code blocks are left alone


def test_api_pages_list_every_module_of_a_package():
    pytest.importorskip("mkdocs")
    hook = load("api_pages")
    names = hook.modules("slca_lightning.eval")
    assert names[0] == "slca_lightning.eval"
    assert "slca_lightning.eval.registry" in names and "slca_lightning.eval.bfcl.checker" in names
    assert not any(n.endswith("__main__") for n in names)
    page = hook.page("slca_lightning.advantages")
    assert "::: slca_lightning.advantages.presets\n" in page
    assert page.count("members: false") == 1  # the package itself: its docstring only


def test_grouped_args_entries_are_split_per_name():
    pytest.importorskip("griffe")
    hook = load("griffe_rst")
    text = (
        "Summary.\n\nArgs:\n    eps_low, eps_high: the clip range\n        of PPO.\n"
        "    max_new_tokens, batch_size,\n    temperature: see X.\n    seed: the seed.\n"
    )
    out = hook.split_grouped_entries(text)
    assert "    eps_low: the clip range\n        of PPO.\n    eps_high: the clip range\n" in out
    assert "    batch_size: see X.\n    temperature: see X.\n    seed: the seed." in out
