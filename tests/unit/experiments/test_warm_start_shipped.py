"""experiments/warm_start/README.md's table of the shipped warm starts' curves is
``shipped.py``'s rendering of their manifests, never typed in."""

from pathlib import Path

from experiments.warm_start.shipped import BEGIN, END, table

ROOT = Path(__file__).resolve().parents[3]


def test_the_readme_table_is_the_manifests_curves():
    text = (ROOT / "experiments" / "warm_start" / "README.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip() == table().strip()
    assert "| `suite-sft` |" in block and "| `suite-pooled-sft` |" in block
