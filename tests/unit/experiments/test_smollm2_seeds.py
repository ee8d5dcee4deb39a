"""The seed summary's paired test: McNemar's exact p-value and the task pairing."""

import json

import pytest

from experiments.smollm2.seeds import mcnemar_p, paired_flips, summarize


def test_mcnemar_exact_values():
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(6, 0) == pytest.approx(2 / 64)  # 2 · (1/2)^6
    assert mcnemar_p(1, 8) == pytest.approx(2 * (1 + 9) / 512)
    assert mcnemar_p(3, 3) == 1.0  # capped


def _write(folder, step, exact):
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"task_id": f"t{i}", "exact": e}) for i, e in enumerate(exact)]
    (folder / f"step_{step}.jsonl").write_text("\n".join(rows) + "\n")


def test_paired_flips_pairs_by_task_and_uses_first_and_last_step(tmp_path):
    eps = tmp_path / "seed0" / "rl" / "logs" / "version_0" / "in_domain_episodes"
    _write(eps, 0, [True, False, False, True])
    _write(eps, 2, [False, False, False, False])  # a middle evaluation is ignored
    _write(eps, 10, [True, True, True, False])
    r = paired_flips(tmp_path / "seed0")
    assert (r["steps"], r["sft"], r["sft+rl"], r["gained"], r["lost"]) == (10, 0.5, 0.75, 2, 1)
    assert r["p"] == pytest.approx(1.0)
    table = summarize([tmp_path / "seed0", tmp_path / "seed0"])
    assert "| seed0 | 10 | 4 | 0.500 | 0.750 | +0.250 | 2 | 1 |" in table
    assert "| pooled (2 seeds) | | 8 | | | +0.250 | 4 | 2 |" in table


def test_paired_flips_names_a_missing_evaluation(tmp_path):
    with pytest.raises(FileNotFoundError, match="in_domain_episodes"):
        paired_flips(tmp_path)


def test_readme_effect_block_is_the_committed_runs_summary():
    """experiments/smollm2/README.md's RL-effect table is ``seeds.py``'s summary of the committed runs."""
    from pathlib import Path

    from experiments.smollm2.seeds import BEGIN, END

    root = Path(__file__).resolve().parents[3]
    runs = [root / "experiments/smollm2/results" / f"effect_seed{s}" for s in (0, 1)]
    block = (
        (root / "experiments" / "smollm2" / "README.md")
        .read_text()
        .split(BEGIN, 1)[1]
        .split(END, 1)[0]
    )
    assert block.strip() == summarize(runs).strip()
    assert "| pooled (2 seeds) |" in block
