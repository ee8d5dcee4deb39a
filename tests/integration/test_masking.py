"""The assistant mask reaches every loss path: tool-response and glue tokens get exactly zero
gradient through the surrogate, the KL and the entropy terms; truncated episodes are dropped
from the loss when asked, and kept (on their sampled tokens only) otherwise.

Real parts: tiny Qwen2 policy, real tokenizer and chat template, agent loop, SGLS running a
Python tool. The policy's turns come from a ScriptedEngine so that tool rounds happen.
"""

from __future__ import annotations

import json

import pytest
import torch

from slca_lightning.advantages import GRPORouter
from slca_lightning.logprobs.causal_lm import sequence_logprobs
from slca_lightning.models.policy import load_policy
from slca_lightning.rollout import AgentLoop, SamplingConfig, collate_episodes
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.testing.rewards import TokenParityReward
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.training.losses import policy_loss
from slca_lightning.types import Task, ToolCall

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture(scope="module")
def setup():
    model, tok = load_policy("tiny")
    task = Task(
        task_id="t",
        messages=[{"role": "user", "content": "add 2 and 3"}],
        tools=[ADD],
        allowed_tools=["add"],
        gold_calls=[[ToolCall("add", {"a": 2, "b": 3})]],
    )
    answers = iter(range(10_000))

    def script(context, turn):
        k = next(answers)
        if turn == 0:
            return (
                "<tool_call>\n"
                + json.dumps({"name": "add", "arguments": {"a": k % 4, "b": 3}})
                + "\n</tool_call>"
            )
        if k % 3 == 0:  # a summary that runs past the token cap: a truncated episode
            return "The sum is " + "very " * 60
        return f"The sum is {k}." + tok.eos_token

    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    loop = AgentLoop(ScriptedEngine(tok, script), tok, sim, SamplingConfig(max_new_tokens=40))
    episodes = loop.run([task], group_size=6)
    batch = collate_episodes(episodes, tok.pad_token_id)
    return model, tok, batch


def grads(model, batch, loss_mask, kl=0.0, ent=0.0):
    logp, entropy = sequence_logprobs(
        model, batch.input_ids, batch.attention_mask, return_entropy=True
    )
    logp.retain_grad()
    entropy.retain_grad()
    rewards = TokenParityReward()(batch.episodes)
    adv = GRPORouter()(rewards, mask_run_segments(batch.assistant_mask), batch.group_ids)
    ref = (logp.detach() + 0.3 * torch.randn_like(logp)) if kl else None
    loss, _ = policy_loss(
        logp,
        logp.detach() - 0.1,
        adv,
        loss_mask,
        ref_logprobs=ref,
        kl_coef=kl,
        entropy=entropy,
        entropy_coef=ent,
    )
    model.zero_grad()
    loss.backward()
    g_ent = entropy.grad if entropy.grad is not None else torch.zeros_like(entropy)
    return logp.grad, g_ent


def test_setup_has_tool_rounds_and_truncated_rows(setup):
    _, tok, batch = setup
    env = batch.attention_mask & ~batch.assistant_mask
    text = tok.decode(batch.input_ids[0][env[0]].tolist())
    assert "<tool_response>" in text
    assert bool(batch.truncated.any()) and not bool(batch.truncated.all())


@pytest.mark.parametrize("kl,ent", [(0.0, 0.0), (0.05, 0.0), (0.0, 0.01), (0.05, 0.01)])
def test_tool_response_tokens_get_zero_gradient(setup, kl, ent):
    model, _, batch = setup
    g_logp, g_ent = grads(model, batch, batch.assistant_mask, kl, ent)
    outside = ~batch.assistant_mask
    assert torch.count_nonzero(g_logp[outside]) == 0
    assert torch.count_nonzero(g_ent[outside]) == 0
    assert torch.count_nonzero(g_logp[batch.assistant_mask]) > 0


def test_truncated_episodes_are_masked_when_asked(setup):
    model, _, batch = setup
    masked = batch.assistant_mask & ~batch.truncated[:, None]
    g_logp, _ = grads(model, batch, masked)
    assert torch.count_nonzero(g_logp[batch.truncated]) == 0
    assert torch.count_nonzero(g_logp[~batch.truncated][batch.assistant_mask[~batch.truncated]]) > 0
    g_keep, _ = grads(model, batch, batch.assistant_mask)
    trunc_rows = batch.truncated
    assert torch.count_nonzero(g_keep[trunc_rows][batch.assistant_mask[trunc_rows]]) > 0
    assert torch.count_nonzero(g_keep[trunc_rows][~batch.assistant_mask[trunc_rows]]) == 0
