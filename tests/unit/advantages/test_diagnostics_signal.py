"""Which rows carry policy-gradient signal, and the warning of a step where none does."""

import torch

from slca_lightning.advantages import no_signal_message, signal_rows


def test_signal_rows_need_a_nonzero_advantage_inside_the_mask():
    adv = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.3, 0.0], [0.7, 0.0, 0.0], [-0.2, -0.2, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 1, 1], [0, 0, 1]], dtype=torch.bool)
    assert signal_rows(adv, mask).tolist() == [False, True, False, False]


def test_no_signal_message_names_the_step_and_the_likely_cause():
    none = no_signal_message(7, 0.0)
    assert none.startswith("step 7: every advantage is 0") and "no tool call" in none
    assert "SFT" in none
    flat = no_signal_message(3, 1.5)
    assert "equal" in flat and "group_size" in flat and "SFT" not in flat
    assert "equal" in no_signal_message(0, None)
