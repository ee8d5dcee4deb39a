"""experiments.readme_block.replace_block: the one rewriter of generated README blocks."""

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
