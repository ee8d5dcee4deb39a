"""PeriodicEval's schedule: every n steps, end of fit, end of validation, once per weights.

The trainer is a SimpleNamespace with the attributes the callback reads (global_step,
sanity_checking, is_global_zero, log_dir, logger): the schedule is pure bookkeeping, and the real
Trainer path is covered by tests/integration/test_eval_callbacks.py.
"""

from types import SimpleNamespace

import pytest

from callbacks import PeriodicEval


class _Counting(PeriodicEval):
    def __init__(self, every_n_steps, log_prefix=""):
        super().__init__(every_n_steps, log_prefix)
        self.steps: list[int] = []

    def measure(self, trainer, pl_module):
        self.steps.append(trainer.global_step)
        self.write_table(trainer, "t.md", f"step {trainer.global_step}\n")
        return {"step": float(trainer.global_step)}


def _trainer(tmp_path, step, **kw):
    base = dict(
        global_step=step,
        sanity_checking=False,
        is_global_zero=True,
        log_dir=str(tmp_path),
        default_root_dir=str(tmp_path),
        logger=None,
    )
    return SimpleNamespace(**{**base, **kw})


def test_schedule_runs_once_per_step(tmp_path):
    cb = _Counting(every_n_steps=2)
    for step in (1, 2, 3, 4):
        cb.on_train_batch_end(_trainer(tmp_path, step), None, None, None, 0)
    cb.on_train_end(_trainer(tmp_path, 4), None)  # same weights as the step-4 evaluation
    cb.on_validation_end(_trainer(tmp_path, 4, sanity_checking=True), None)
    cb.on_validation_end(_trainer(tmp_path, 5), None)
    assert cb.steps == [2, 4, 5]
    assert cb.last == {"step": 5.0}
    assert (tmp_path / "eval" / "t.md").read_text() == "step 5\n"


def test_scalars_are_logged_with_the_prefix_and_kept_bare(tmp_path):
    logged = []
    logger = SimpleNamespace(log_metrics=lambda m, step: logged.append((step, m)))
    cb = _Counting(every_n_steps=None, log_prefix="bench/")
    cb.on_train_end(_trainer(tmp_path, 7, logger=logger), None)
    assert logged == [(7, {"bench/step": 7.0})]
    assert cb.last == {"step": 7.0}


def test_only_rank_zero_writes(tmp_path):
    cb = _Counting(every_n_steps=None)
    cb.on_train_batch_end(_trainer(tmp_path, 3, is_global_zero=False), None, None, None, 0)
    cb.on_train_end(_trainer(tmp_path, 3, is_global_zero=False), None)
    assert cb.steps == [3]  # every rank evaluates (sharded generation) ...
    assert not (tmp_path / "eval").exists()  # ... only rank zero writes


@pytest.mark.parametrize("bad", [0, -3])
def test_bad_interval_is_refused(bad):
    with pytest.raises(ValueError, match="every_n_steps"):
        _Counting(every_n_steps=bad)
