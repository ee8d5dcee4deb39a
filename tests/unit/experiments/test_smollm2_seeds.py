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


def _control_run(root, name, before, after, control, validity):
    """A ``run.py --control`` folder: the RL run's first and last evaluation episodes, the
    control's saved episodes and the stages' result.json with their metrics."""
    run = root / name
    eps = run / "rl" / "logs" / "version_0" / "in_domain_episodes"
    _write(eps, 0, before)
    _write(eps, 8, after)
    (run / "control_eval").mkdir(parents=True)
    rows = [json.dumps({"task_id": f"t{i}", "exact": e}) for i, e in enumerate(control)]
    (run / "control_eval" / "in_domain_episodes.jsonl").write_text("\n".join(rows) + "\n")

    def metrics(exact, v):
        return {
            "tool_accuracy": sum(exact) / len(exact),
            "tool_call_validity": v,
            "success@0.9": 0.0,
        }

    rl = {"evals": {"sft": metrics(before, validity[0]), "sft+rl": metrics(after, validity[1])}}
    (run / "rl" / "result.json").write_text(json.dumps(rl))
    (run / "control").mkdir()
    (run / "control" / "result.json").write_text(json.dumps({"seconds_budget": 1200}))
    (run / "control_eval" / "result.json").write_text(
        json.dumps({"metrics": metrics(control, validity[2])})
    )
    return run


def test_control_table_pairs_rl_against_the_control_by_task(tmp_path):
    from experiments.smollm2.seeds import control_table, versus_control

    a = _control_run(
        tmp_path, "pooled_seed0", [True, False, False, False], [True, True, True, False],
        [True, False, False, True], (0.5, 1.0, 0.75),
    )  # fmt: skip
    r = versus_control(a)
    # RL solves t1, t2 that the control does not; the control solves t3 that RL does not
    assert (r["rl_over_control"], r["control_over_rl"], r["steps"]) == (2, 1, 8)
    assert r["rl"]["tool_accuracy"] == 0.75 and r["control"]["tool_accuracy"] == 0.5
    b = _control_run(
        tmp_path, "pooled_seed1", [False] * 4, [False] * 4, [True, True, False, False],
        (0.25, 0.25, 0.5),
    )  # fmt: skip
    table = control_table([a, b])
    assert "| pooled_seed0 | 8 | 1200 | 0.250 / 0.750 / 0.500 | +0.500 | +0.250 |" in table
    assert "0.500 / 1.000 / 0.750" in table  # validity SFT / RL / control
    assert "| pooled_seed1 | 8 | 1200 | 0.000 / 0.000 / 0.500 | +0.000 | +0.500 |" in table
    assert "| mean (2 seeds) | | | | +0.250 | +0.375 | | | 2–3 | 1.000 |" in table


def test_control_table_names_a_missing_control(tmp_path):
    from experiments.smollm2.seeds import versus_control

    run = _control_run(tmp_path, "s", [True], [True], [True], (1.0, 1.0, 1.0))
    (run / "control_eval" / "in_domain_episodes.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"control_eval/in_domain_episodes\.jsonl"):
        versus_control(run)


def test_readme_pooled_block_is_the_committed_runs_control_table():
    """experiments/smollm2/README.md's pooled table is ``control_table`` of the committed runs."""
    from pathlib import Path

    from experiments.smollm2.seeds import CONTROL_BEGIN, CONTROL_END, control_table

    root = Path(__file__).resolve().parents[3]
    runs = [root / "experiments/smollm2/results" / f"pooled_seed{s}" for s in (0, 1)]
    text = (root / "experiments" / "smollm2" / "README.md").read_text()
    block = text.split(CONTROL_BEGIN, 1)[1].split(CONTROL_END, 1)[0]
    assert block.strip() == control_table(runs).strip()
    assert "| mean (2 seeds) |" in block


def _versus_run(root, name, before, after):
    """An RL run folder: first and last held-out episodes, each a list of ``(exact, calls
    made)`` on three tasks (t0 single, t1 parallel with two gold calls, t2 two steps), and
    the RL stage's result.json."""
    gold = {
        "t0": [[["f", {}]]],
        "t1": [[["f", {}], ["g", {}]]],
        "t2": [[["f", {}]], [["g", {}]]],
    }
    eps = root / name / "rl" / "logs" / "version_0" / "in_domain_episodes"
    eps.mkdir(parents=True)
    for step, episodes in ((0, before), (8, after)):
        rows = [
            {"task_id": t, "gold": gold[t], "exact": e, "observations": [["obs"]] * made + [[]]}
            for t, (e, made) in zip(gold, episodes)
        ]
        (eps / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def metrics(episodes):
        return {"tool_accuracy": sum(e for e, _ in episodes) / 3, "tool_call_validity": 1.0}

    evals = {"sft": metrics(before), "sft+rl": metrics(after)}
    (root / name / "rl" / "result.json").write_text(json.dumps({"evals": evals}))
    return root / name


def test_versus_table_pairs_each_variant_with_its_reference_and_counts_short_answers(tmp_path):
    from experiments.smollm2.seeds import versus_table

    start = [(True, 2), (True, 2), (True, 2)]
    paper = _versus_run(tmp_path, "paper", start, [(True, 1), (False, 1), (False, 1)])
    stop = _versus_run(tmp_path, "stop", start, [(False, 2), (True, 2), (True, 2)])
    table = versus_table([paper, stop])
    # t1 and t2 need two calls: the paper run answered both after one (short), the other none
    assert "| paper | 8 | 1.000 → 0.333 | 1.000 → 1.000 | – → – | 0 → 2 of 2 | – | – |" in table
    # stop solves t1 and t2 where paper does not; paper solves t0 where stop does not
    assert (
        "| stop | 8 | 1.000 → 0.667 | 1.000 → 1.000 | – → – | 0 → 0 of 2 | 2–1 | 1.000 |" in table
    )
    assert "pooled" not in table
    # a second pair is compared within itself (stop2 against paper2, not against paper)
    paper2 = _versus_run(tmp_path, "paper2", start, [(False, 2), (True, 2), (True, 2)])
    stop2 = _versus_run(tmp_path, "stop2", start, [(True, 2), (True, 2), (True, 2)])
    table = versus_table([paper, stop, paper2, stop2])
    assert (
        "| stop2 | 8 | 1.000 → 1.000 | 1.000 → 1.000 | – → – | 0 → 0 of 2 | 1–0 | 1.000 |" in table
    )
    assert "| pooled (2 pairs) | | | | | | 3–1 | 0.625 |" in table
    with pytest.raises(ValueError, match="in pairs"):
        versus_table([paper, stop, paper2])


def test_readme_stop_decision_block_is_the_committed_runs_versus_table():
    """experiments/smollm2/README.md's stop-decision table is ``versus_table`` of the committed runs."""
    from pathlib import Path

    from experiments.smollm2.seeds import VERSUS_BEGIN, VERSUS_END, versus_table

    root = Path(__file__).resolve().parents[3]
    results = root / "experiments/smollm2/results"
    runs = [results / f"{name}_seed{s}" for s in (0, 1) for name in ("pooled", "pooled_stop")]
    text = (root / "experiments" / "smollm2" / "README.md").read_text()
    block = text.split(VERSUS_BEGIN, 1)[1].split(VERSUS_END, 1)[0]
    assert block.strip() == versus_table(runs).strip()
    assert "| pooled (2 pairs) |" in block
