"""The README's SmolLM2 smoke block is the committed run's REPORT.md table (written by
``python experiments/smollm2/run.py --embed README.md``), never typed in."""

from pathlib import Path

from experiments.smollm2.run import BEGIN, END, readme_block

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "experiments" / "smollm2" / "results" / "smoke"


def test_readme_block_is_the_committed_report():
    text = (ROOT / "README.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip() == readme_block(RESULTS).strip()
    assert "| SFT + SLCA-GRPO" in block
