"""experiments.common: what the studies share (the README block rewriter, the child-process
runner, the metrics.csv reader), and the rule that studies share code only through it."""

import ast
import sys
from pathlib import Path

import pytest

from experiments.common import child_command, read_metrics, replace_block

ROOT = Path(__file__).resolve().parents[3]

BEGIN, END = "<!-- t: begin -->", "<!-- t: end -->"


def test_replaces_only_the_marked_block_and_keeps_markers_on_their_lines(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN}\n| old |\n| rows |\n{END}\noutro {BEGIN}\n")
    replace_block(doc, BEGIN, END, "| a |\n| b |\n")  # a trailing newline or none: same file
    once = doc.read_text()
    assert once == f"intro\n{BEGIN}\n| a |\n| b |\n{END}\noutro {BEGIN}\n"
    replace_block(doc, BEGIN, END, "| a |\n| b |")
    assert doc.read_text() == once


@pytest.mark.parametrize(
    "text, missing", [("no markers\n", "t: begin"), (f"{END}\n{BEGIN}\n", "t: end")]
)
def test_missing_or_misordered_markers_name_the_file_and_marker(tmp_path, text, missing):
    doc = tmp_path / "bare.md"
    doc.write_text(text)
    with pytest.raises(ValueError, match=rf"bare\.md: no '<!-- {missing} -->'"):
        replace_block(doc, BEGIN, END, "x")
    assert doc.read_text() == text  # nothing written


def test_readme_lr_check_block_is_the_committed_check():
    """experiments/smollm2/README.md's learning-rate table is lr_check.py's rendering of its committed JSON."""
    import json

    from experiments.smollm2 import lr_check

    result = json.loads((ROOT / "experiments/smollm2/results/lr_check.json").read_text())
    readme = (ROOT / "experiments" / "smollm2" / "README.md").read_text()
    block = readme.split(lr_check.BEGIN, 1)[1].split(lr_check.END, 1)[0]
    assert block.strip() == lr_check.table(result).strip()
    defaults = [r for r in result["rows"] if r["default_for"]]
    assert {s for r in defaults for s in r["default_for"]} == {"sft", "rl"}
    for r in defaults:  # "does not blow up": the defaults never raise the held-out NLL
        assert r["nll_after"] <= r["nll_start"] + 1e-3, r


def test_read_metrics_splits_training_steps_from_evaluations(tmp_path):
    logs = tmp_path / "logs"
    for version, acc in (("version_0", "0.1"), ("version_1", "0.5")):  # the last one is read
        (logs / version).mkdir(parents=True)
        (logs / version / "metrics.csv").write_text(
            f"step,reward/total,eval/in_domain/tool_accuracy\n0,,{acc}\n1,1.25,\n2,1.5,\n2,,0.625\n"
        )
    train, evals = read_metrics(tmp_path)
    assert [r["reward/total"] for r in train] == ["1.25", "1.5"]
    assert [r["eval/in_domain/tool_accuracy"] for r in evals] == ["0.5", "0.625"]


def test_child_command_runs_a_module_from_the_root_with_the_given_threads():
    kw = child_command(["slca_lightning.cli.commands", "fit"], 3)
    assert kw["args"][0] == sys.executable and kw["cwd"] == ROOT
    assert kw["env"]["OMP_NUM_THREADS"] == "3"
    code = kw["args"][2]
    assert "torch.set_num_threads(3)" in code and "PEAK_RSS_KB" in code
    assert "['slca_lightning.cli.commands', 'fit']" in code


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def test_studies_share_code_only_through_experiments_common():
    """A study imports its own folder and ``experiments.common``, never another study."""
    bad = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        parts = path.relative_to(ROOT / "experiments").parts
        own = parts[0] if len(parts) > 1 else None  # None: a module at the top (common.py)
        for name in sorted(_imported_modules(path)):
            bits = name.split(".")
            if bits[0] != "experiments" or len(bits) < 2 or bits[1] in ("common", own):
                continue
            bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, (
        "imports across studies (move the shared code to experiments/common.py):\n" + "\n".join(bad)
    )


def test_common_imports_no_study():
    names = _imported_modules(ROOT / "experiments" / "common.py")
    assert not [n for n in names if n.startswith("experiments")]
