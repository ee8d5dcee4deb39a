"""Smoke test of ``benchmarks/run_all.py --quick`` and unit tests of its timing helpers.

The smoke test runs the real command in a subprocess with tiny shapes: an in-process
``slca fit`` (random ``tiny`` model, real HFEngine, agent loop, reward head, segmenter,
router), whole ``slca fit`` steps next to a real TRL 1.16.0 ``GRPOTrainer.train()``, the
slca update next to a real ``GRPOTrainer`` (its ``_prepare_inputs`` replaced by the identity,
so nothing is generated), HFEngine next to a bare
``model.generate``, and the log-prob memory children. Its figures mean nothing at these
sizes; what it checks is that every row is produced, parses, and that the slca and TRL
updates computed the same gradient on the same batch and weights.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import alternate, paired_ratio  # noqa: E402


def test_alternate_swaps_order_every_round_and_skips_warmup():
    calls = []
    systems = {"a": lambda: calls.append("a") or 2.0, "b": lambda: calls.append("b") or 1.0}
    secs = alternate(systems, rounds=3, warmup=1)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert secs == {"a": [2.0, 2.0, 2.0], "b": [1.0, 1.0, 1.0]}


def test_paired_ratio_is_the_median_of_same_round_ratios():
    # round 2 is slow for both (machine busy): pairing cancels it, a ratio of medians would not
    assert paired_ratio([2.0, 8.0, 2.2], [1.0, 4.0, 1.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_ratio([1.0], [1.0, 2.0])


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_run_all_quick_writes_every_row(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "Command: `python benchmarks/run_all.py --quick --out" in text
    rows = [_cells(line) for line in text.splitlines() if re.match(r"\| \d \|", line)]
    by_item: dict[str, list[list[str]]] = {}
    for r in rows:
        assert len(r) == 7, r
        by_item.setdefault(r[0], []).append(r)
    assert sorted(by_item) == ["1", "2", "3", "4", "5", "6"]

    phases = by_item["1"]
    assert len(phases) == 8
    fractions = [float(r[3].rstrip(" %")) for r in phases]
    assert all(0.0 <= f <= 100.0 for f in fractions)
    rollout, generate, tools, reward, diag, old, ref, update = fractions
    assert generate + tools <= rollout + 0.1  # both are parts of the rollout
    assert 99.0 <= rollout + reward + diag + old + ref + update <= 101.0  # the step is their sum

    separate = [r for r in by_item["2"] if "(separate run)" in r[1]]
    assert len(separate) == len(list((ROOT / "benchmarks" / "results").glob("multiturn_*.json")))
    assert len(by_item["2"]) == 3 + len(separate)
    for r in by_item["2"]:
        assert float(r[5].rstrip("×")) > 0
    whole = re.search(r"(\d+) / (\d+) tokens/step", by_item["2"][0][2])
    assert whole and int(whole.group(1)) > 0 and int(whole.group(2)) > 0
    # same prompts, same caps: the two systems processed about the same tokens per step
    assert 0.8 < int(whole.group(1)) / int(whole.group(2)) < 1.25
    diff = float(re.search(r"grad-norm rel. diff ([0-9.e+-]+)", by_item["2"][1][2]).group(1))
    assert diff < 1e-4, "slca and TRL updates did not compute the same gradient"

    assert 0.0 < float(by_item["3"][0][3].rstrip(" %")) < 100.0
    assert all(float(r[5].rstrip("×")) > 0 for r in by_item["4"])
    gen = by_item["5"]
    assert [("shared" in r[1]) for r in gen] == [False, True]
    assert all(float(r[5].rstrip("×")) > 0 for r in gen)
    assert by_item["6"][0][3] == "not measured"
    assert proc.stdout.strip().endswith(text.strip().splitlines()[-1])


def test_benchmarks_import_nothing_from_experiments():
    """benchmarks/ stands alone: no module of it imports the experiments package."""
    import ast

    bad = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "experiments"]
    assert not bad, bad


def test_embed_table_replaces_only_the_marked_block(tmp_path):
    import run_all

    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{run_all.EMBED_BEGIN}\n| old |\n{run_all.EMBED_END}\noutro\n")
    run_all.embed_table(doc, ["| a |", "| b |"])
    once = doc.read_text()
    assert once == f"intro\n{run_all.EMBED_BEGIN}\n| a |\n| b |\n{run_all.EMBED_END}\noutro\n"
    run_all.embed_table(doc, ["| a |", "| b |"])  # again: the same file
    assert doc.read_text() == once
    for text in ("no markers\n", f"{run_all.EMBED_END}\n{run_all.EMBED_BEGIN}\n"):
        (tmp_path / "bare.md").write_text(text)
        with pytest.raises(SystemExit, match=r"bare\.md: no"):
            run_all.embed_table(tmp_path / "bare.md", ["| a |"])
        assert (tmp_path / "bare.md").read_text() == text  # nothing written
