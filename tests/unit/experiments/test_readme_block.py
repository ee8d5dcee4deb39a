"""experiments.readme_block.replace_block: the one rewriter of generated README blocks."""

from pathlib import Path

import pytest

from experiments.readme_block import replace_block

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
    """The README's learning-rate table is lr_check.py's rendering of its committed JSON."""
    import json

    from experiments.smollm2 import lr_check

    root = Path(__file__).resolve().parents[3]
    result = json.loads((root / "experiments/smollm2/results/lr_check.json").read_text())
    readme = (root / "README.md").read_text()
    block = readme.split(lr_check.BEGIN, 1)[1].split(lr_check.END, 1)[0]
    assert block.strip() == lr_check.table(result).strip()
    defaults = [r for r in result["rows"] if r["default_for"]]
    assert {s for r in defaults for s in r["default_for"]} == {"sft", "rl"}
    for r in defaults:  # "does not blow up": the defaults never raise the held-out NLL
        assert r["nll_after"] <= r["nll_start"] + 1e-3, r
