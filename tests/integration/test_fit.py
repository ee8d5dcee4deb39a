"""End-to-end `slca fit` on CPU with the tiny offline model, through the CLI in-process.

Real parts: LightningCLI, Trainer (manual optimisation, checkpoints), HFEngine sampling from
the policy itself, the agent loop, the schema-guided simulator running the synthetic suite's
Python tools. Boundary: the reward head is TokenParityReward (see conftest) because a random
model earns identical HierR rewards within a group.
"""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import lightning as L
import pytest
import torch

from slca_lightning.cli.commands import main
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.testing.rewards import TokenParityReward
from slca_lightning.training.losses import policy_loss

TINY_ARGS = [
    "--model.model=tiny",
    "--model.learning_rate=1e-2",
    "--model.micro_batch_size=4",
    "--data.prompts_per_step=2",
    "--data.group_size=3",
    "--data.max_turns=2",
    "--data.max_new_tokens=12",
    "--data.max_response_tokens=64",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=16",
    "--data.tasks.init_args.n_heldout=4",
    "--data.tasks.init_args.families=[math]",
    "--data.tasks.init_args.irrelevant_fraction=0.0",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
]


def build(tmp_path: Path, *extra: str):
    args = [*TINY_ARGS, f"--trainer.default_root_dir={tmp_path}", *extra]
    cli = main(args, run=False)
    cli.model.reward_head = TokenParityReward()
    return cli


def snapshot(module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def test_two_step_fit_changes_every_trainable_parameter_and_not_the_reference(tmp_path):
    cli = build(tmp_path, "--trainer.max_steps=2", "--trainer.logger=false", "--model.kl_coef=0.01")
    cli.model.configure_model()
    before = snapshot(cli.model)
    cli.trainer.fit(cli.model, cli.datamodule)
    after = snapshot(cli.model)
    trainable = {n for n, p in cli.model.named_parameters() if p.requires_grad}
    unchanged = [n for n in trainable if torch.equal(before[n], after[n])]
    assert not unchanged, f"parameters that did not change: {unchanged[:5]}"
    ref = [n for n in before if n.startswith("reference.")]
    assert ref and all(torch.equal(before[n], after[n]) for n in ref)
    assert cli.trainer.global_step == 2


def fingerprint(module) -> float:
    with torch.no_grad():
        return sum(float(p.double().sum()) for p in module.policy.parameters())


def test_every_batch_is_generated_by_the_latest_weights(tmp_path):
    """Each rollout batch is sampled with the weights left by the previous optimiser step."""
    cli = build(tmp_path, "--trainer.max_steps=3", "--trainer.logger=false")
    cli.model.configure_model()
    cli.datamodule.connect(cli.model.policy, cli.model.tokenizer)
    real_generate = cli.datamodule.engine.generate
    sampled_with = []  # (optimiser steps so far, weights) at every generate call

    def spy(prompts, sampling):
        sampled_with.append((cli.trainer.global_step, fingerprint(cli.model)))
        return real_generate(prompts, sampling)

    cli.datamodule.engine.generate = spy
    after = {0: fingerprint(cli.model)}  # weights after k optimiser steps
    versions = []

    class Witness(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            after[trainer.global_step] = fingerprint(module)
            versions.append([e.policy_version for e in module.last_rollout.batch.episodes])

    cli.trainer.callbacks.append(Witness())
    cli.trainer.fit(cli.model, cli.datamodule)
    assert sorted(after) == [0, 1, 2, 3] and len(set(after.values())) == 4  # weights moved
    assert {step for step, _ in sampled_with} == {0, 1, 2}
    for step, weights in sampled_with:
        assert weights == after[step], f"a batch of step {step} was sampled with stale weights"
    assert versions == [[k] * 6 for k in range(3)]


def read_metrics(folder: Path) -> dict[int, dict[str, str]]:
    rows = {}
    for path in sorted(folder.rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                step = int(row["step"])
                rows.setdefault(step, {}).update({k: v for k, v in row.items() if v != ""})
    return rows


KEYS = ["train/loss", "train/grad_norm", "reward/total", "rollout/response_tokens", "adv/tool/mean"]


def test_resume_from_checkpoint_reproduces_the_remaining_steps(tmp_path):
    logger = "--trainer.logger=lightning.pytorch.loggers.CSVLogger"
    ckpt = [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.every_n_train_steps=2",
        "--trainer.callbacks.save_top_k=-1",
    ]
    full = build(
        tmp_path / "full",
        "--trainer.max_steps=4",
        logger,
        f"--trainer.logger.init_args.save_dir={tmp_path / 'full'}",
    )
    full.trainer.fit(full.model, full.datamodule)
    part = build(
        tmp_path / "part",
        "--trainer.max_steps=2",
        logger,
        f"--trainer.logger.init_args.save_dir={tmp_path / 'part'}",
        *ckpt,
    )
    part.trainer.fit(part.model, part.datamodule)
    ckpts = sorted((tmp_path / "part").rglob("*.ckpt"))
    assert ckpts, "no checkpoint written"
    resumed = build(
        tmp_path / "resumed",
        "--trainer.max_steps=4",
        logger,
        f"--trainer.logger.init_args.save_dir={tmp_path / 'resumed'}",
    )
    resumed.trainer.fit(resumed.model, resumed.datamodule, ckpt_path=str(ckpts[-1]))
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "resumed")
    later = [s for s in sorted(a) if s >= 2]
    assert later, a.keys()
    for step in later:
        for key in KEYS:
            if key in a[step]:
                assert float(b[step][key]) == pytest.approx(
                    float(a[step][key]), rel=1e-5, abs=1e-6
                ), (step, key)
    for n, p in full.model.policy.named_parameters():
        torch.testing.assert_close(
            p, dict(resumed.model.policy.named_parameters())[n], rtol=1e-5, atol=1e-6
        )


# Logged at every step (kl: kl_coef > 0; entropy: always computed, coefficient 0).
STEP_KEYS = [
    "time/rollout",
    "time/generate",
    "time/tools",
    "time/old_logprobs",
    "time/ref_logprobs",
    "time/update",
    "reward/tool",
    "reward/summary",
    "reward/total",
    "adv/summary/mean",
    "train/kl_mean",
    "train/clip_frac",
    "train/entropy_mean",
    "train/grad_norm",
    "rollout/response_tokens",
    "rollout/tool_calls_per_episode",
    "rollout/empty_generations_per_episode",
]
# Logged exactly on the steps where some row has tool-segment tokens (a tool round).
TOOL_KEYS = ["adv/tool/mean", "adv/contamination", "adv/summary_leakage"]


def scripted(cli, tool_round_at=(), reply_words=lambda step: 3) -> ScriptedEngine:
    """A scripted policy for `cli`: at the steps in ``tool_round_at`` every row calls ``add``
    (arguments vary per row, so rewards vary inside a group) and then replies; at the other
    steps it replies at once, with ``reply_words(step)`` pairs of words."""
    tok, count = cli.model.tokenizer, itertools.count()

    def script(context, turn):
        k, step = next(count), engine.policy_version
        if turn == 0 and step in tool_round_at:
            args = json.dumps({"name": "add", "arguments": {"a": k, "b": 7 * k + 1}})
            return (
                f"<tool_call>\n{args}\n</tool_call>{tok.eos_token}"  # the turn ends, as a model's
            )
        return " ".join(["answer", str(k)] * reply_words(step)) + tok.eos_token

    engine = ScriptedEngine(tok, script)
    return engine


def test_every_step_logs_the_metric_keys(tmp_path):
    cli = build(
        tmp_path,
        "--trainer.max_steps=2",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--data.max_new_tokens=48",
        "--data.max_response_tokens=256",
    )
    cli.model.configure_model()
    cli.datamodule.engine = scripted(cli, tool_round_at={0})  # step 1: no tool tokens at all
    cli.trainer.fit(cli.model, cli.datamodule)
    rows = read_metrics(tmp_path)
    assert len(rows) == 2, sorted(rows)
    first, second = (rows[k] for k in sorted(rows))
    for row in (first, second):
        missing = [k for k in STEP_KEYS if k not in row]
        assert not missing, missing
    assert float(first["rollout/tool_calls_per_episode"]) == 1.0
    assert float(second["rollout/tool_calls_per_episode"]) == 0.0
    assert all(k in first for k in TOOL_KEYS), [k for k in TOOL_KEYS if k not in first]
    assert not [k for k in TOOL_KEYS if k in second]  # no tool tokens: nothing to measure
    assert float(first["adv/summary_leakage"]) == pytest.approx(0.0, abs=1e-6)  # SLCA
    assert -1.0 <= float(first["adv/contamination"]) <= 1.0


def test_dr_grpo_divides_by_the_response_cap_whatever_the_padding(tmp_path, monkeypatch):
    import slca_lightning.training.update as module_file

    seen = []  # (max_len, padded length) of every policy_loss call

    def spy(logprobs, *args, **kwargs):
        seen.append((kwargs["max_len"], logprobs.shape[1]))
        return policy_loss(logprobs, *args, **kwargs)

    monkeypatch.setattr(module_file, "policy_loss", spy)
    cli = build(
        tmp_path,
        "--trainer.max_steps=2",
        "--trainer.logger=false",
        "--model.aggregation=dr_grpo",
        "--data.max_new_tokens=48",
        "--data.max_response_tokens=96",
    )
    cli.model.configure_model()
    # short replies at step 0, long ones at step 1: the two batches pad to different lengths
    cli.datamodule.engine = scripted(cli, reply_words=lambda step: 3 if step == 0 else 12)
    cli.trainer.fit(cli.model, cli.datamodule)
    assert {m for m, _ in seen} == {96}
    assert len({t for _, t in seen}) == 2, seen


@pytest.mark.parametrize(
    "router",
    [
        "slca_lightning.advantages.GRPORouter",
        "slca_lightning.advantages.SLCARouter",
        "slca_lightning.advantages.ToolPORouter",
        "slca_lightning.advantages.RLTRRouter",
        "slca_lightning.advantages.MTGRPORouter",
    ],
)
def test_router_switches_from_the_command_line(tmp_path, router):
    cli = main(
        [
            *TINY_ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            f"--model.router={router}",
            "--trainer.max_steps=1",
            "--trainer.logger=false",
        ],
        run=False,
    )
    assert type(cli.model.router).__name__ == router.rsplit(".", 1)[1]
    cli.trainer.fit(cli.model, cli.datamodule)  # the default reward head serves every router
    assert cli.trainer.global_step == 1


def quickstart(tmp_path, *extra: str):
    """configs/quickstart.yaml as shipped, made small (tiny model, 2 × 2 rollouts, 1 step)."""
    root = Path(__file__).resolve().parents[2]
    args = [
        f"--config={root / 'configs/quickstart.yaml'}",
        "--model.model=tiny",
        f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=false",
        "--trainer.max_steps=1",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--data.prompts_per_step=2",
        "--data.group_size=2",
        "--data.max_new_tokens=16",
        *extra,
    ]
    return main(args, run=False)


def test_quickstart_switches_to_rltr_with_one_config_line(tmp_path):
    cli = quickstart(
        tmp_path, "--trainer.callbacks=[]", "--model.router=slca_lightning.advantages.RLTRRouter"
    )
    assert type(cli.model.router).__name__ == "RLTRRouter"
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 1
    assert "rltr" in cli.model.last_rollout.rewards.channels


def test_router_reading_an_unknown_channel_fails_at_fit_start(tmp_path, monkeypatch):
    from slca_lightning.advantages import ChannelRouter, Term
    from slca_lightning.rollout.hf_engine import HFEngine

    generated = []
    monkeypatch.setattr(HFEngine, "generate", lambda self, *a, **k: generated.append(a))
    cli = quickstart(tmp_path)  # with its callbacks (the at-start held-out eval among them)
    cli.model.router = ChannelRouter({"tool": [Term("mystery")], "summary": []})
    with pytest.raises(ValueError) as err:
        cli.trainer.fit(cli.model, cli.datamodule)
    message = str(err.value)
    assert "model.router ChannelRouter reads reward channel(s) ['mystery']" in message
    assert "HierarchicalReward does not produce" in message
    assert "extra_channels:" in message and "# with name: mystery" in message
    assert cli.trainer.global_step == 0 and cli.datamodule.batches_served == 0
    assert not generated  # failed before any rollout


def test_lora_fit_trains_only_the_adapter_and_uses_the_base_as_reference(tmp_path):
    cli = build(
        tmp_path,
        "--trainer.max_steps=1",
        "--trainer.logger=false",
        "--model.kl_coef=0.05",
        "--model.lora.r=4",
        "--model.lora.alpha=8",
    )
    cli.model.configure_model()
    assert cli.model.reference is None  # the adapter-disabled base is the reference
    before = snapshot(cli.model)
    cli.trainer.fit(cli.model, cli.datamodule)
    after = snapshot(cli.model)
    trainable = {n for n, p in cli.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert all(not torch.equal(before[n], after[n]) for n in trainable if "lora_B" in n)
    frozen = [n for n in before if n not in trainable]
    assert all(torch.equal(before[n], after[n]) for n in frozen)


def test_first_update_sees_ratio_one_and_kl_zero_bit_for_bit_with_shuffled_minibatches(
    tmp_path, monkeypatch
):
    """policy = reference = sampler at the first optimiser step: with 2 shuffled mini-batches
    of 3-row micro-batches, the old and reference log-probs of every row of the first
    mini-batch equal the update's own, bit for bit (same partition, same kernels). The
    spy records ``policy_loss``'s inputs and calls the real function."""
    import slca_lightning.training.update as module_mod

    seen = []

    def spy(logp, old, adv, mask, **kw):
        seen.append((logp.detach().clone(), old.clone(), kw["ref_logprobs"].clone(), mask.clone()))
        training = [m.training for m in cli.model.policy.modules()]
        seen[-1] += (all(training),)
        return policy_loss(logp, old, adv, mask, **kw)

    monkeypatch.setattr(module_mod, "policy_loss", spy)
    cli = build(
        tmp_path,
        "--trainer.max_steps=2",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--model.kl_coef=0.01",
        "--model.mini_batches=2",
        "--model.micro_batch_size=2",
        "--model.old_logprobs=recompute",
    )
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2  # one rollout batch, two optimiser steps
    rows = 2 * 3  # prompts_per_step × group_size: 3 rows a mini-batch, micro-batches of 2
    first = seen[:2]  # the first mini-batch: 2 micro-batches (2 + 1 rows)
    assert sum(int(s[0].shape[0]) for s in first) == rows // 2
    for logp, old, ref, mask, training in first:
        assert torch.equal(logp[mask], old[mask])  # ratio exactly 1
        assert torch.equal(logp[mask], ref[mask])  # k3 KL exactly 0
        assert training  # the policy trains in train mode ...
    dropouts = [m for m in cli.model.policy.modules() if isinstance(m, torch.nn.Dropout)]
    assert all(m.p == 0.0 for m in dropouts)  # ... with no dropout
    assert cli.model.policy.config.attention_dropout == 0.0
    later = seen[2:]
    assert later and any(not torch.equal(s[0][s[3]], s[1][s[3]]) for s in later)


def test_every_fit_records_its_provenance(tmp_path):
    """``slca fit`` writes <log_dir>/provenance.json: versions, threads, seeds, config and
    model hashes, load average; completed at the end with the wall time and peak RSS."""
    cli = build(
        tmp_path,
        "--trainer.max_steps=1",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
        "--seed_everything=3",
    )
    cli.trainer.fit(cli.model, cli.datamodule)
    record = json.loads((Path(cli.trainer.log_dir) / "provenance.json").read_text())
    assert record["versions"]["torch"] == torch.__version__
    assert record["seeds"]["seed_everything"] == 3
    assert record["threads"]["torch"] == torch.get_num_threads()
    assert len(record["config_sha256"]) == 64 and record["model_source"] == "tiny"
    assert len(record["load_average"]) == 3 and record["fit_seconds"] > 0
    assert record["peak_rss_gb"] > 0


class _FirstGroupFlat(TokenParityReward):
    """TokenParityReward, but every row of the first group of each batch scores 0.5 on every
    channel: that group carries no signal, the others do."""

    def __call__(self, episodes):
        out = super().__call__(episodes)
        first = torch.tensor([ep.group_id == episodes[0].group_id for ep in episodes])
        for value in out.channels.values():
            value[first] = 0.5
        return out


def _fit_with_skip(tmp_path: Path, skip: bool, *extra: str):
    cli = build(
        tmp_path / str(skip),
        "--trainer.max_steps=2",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--model.kl_coef=0",
        "--model.micro_batch_size=2",
        f"--model.skip_no_signal_rows={str(skip).lower()}",
        "--seed_everything=5",
        *extra,
    )
    cli.model.reward_head = _FirstGroupFlat()
    L.seed_everything(5)
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli


def test_skipping_rows_without_signal_gives_the_same_update_when_kl_is_off(tmp_path, monkeypatch):
    """``model.skip_no_signal_rows``: the rows of a group with equal rewards never reach
    the loss, and with kl_coef = 0 the weights after two steps equal those of the full
    update (up to float summation order)."""
    import slca_lightning.training.update as module_mod

    rows = []
    real = module_mod.policy_loss
    monkeypatch.setattr(
        module_mod,
        "policy_loss",
        lambda logp, *a, **kw: (rows.append(len(logp)), real(logp, *a, **kw))[1],
    )
    full = _fit_with_skip(tmp_path, False)
    n_full = sum(rows)
    rows.clear()
    skipped = _fit_with_skip(tmp_path, True)
    assert n_full == 2 * 6 and sum(rows) == 2 * 3  # 2 steps × (2 groups of 3 | the one with signal)
    for (name, a), b in zip(
        full.model.policy.named_parameters(), skipped.model.policy.parameters()
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)


def test_a_step_without_any_signal_says_so_with_the_cause(tmp_path):
    """Every group flat: the step warns with its number and the likely cause; with skipping
    on, no forward/backward runs and the optimiser still steps (on zero gradients)."""

    class Flat(TokenParityReward):
        def __call__(self, episodes):
            out = super().__call__(episodes)
            return type(out)(
                channels={k: torch.full_like(v, 0.25) for k, v in out.channels.items()}
            )

    cli = build(
        tmp_path,
        "--trainer.max_steps=1",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--model.kl_coef=0",
        "--model.skip_no_signal_rows=true",
    )
    cli.model.reward_head = Flat()
    with pytest.warns(
        UserWarning, match=r"step 0: every advantage is 0.*no policy-gradient signal"
    ):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 1
    assert cli.trainer.callback_metrics["adv/signal_fraction"] == 0.0


def test_slca_export_writes_the_trained_policy_as_a_folder(tmp_path):
    """``slca export``: the checkpoint's policy, rebuilt from the run's saved config, as an
    HF folder whose logits equal the trained module's (transformers and load_policy)."""
    from transformers import AutoModelForCausalLM

    from slca_lightning.cli.export import main as export

    cli = build(tmp_path, "--trainer.max_steps=1", "--trainer.logger=false")
    cli.trainer.fit(cli.model, cli.datamodule)
    (ckpt,) = list(tmp_path.rglob("*.ckpt"))
    out = export(["--checkpoint", str(ckpt), "--out", str(tmp_path / "exported")])
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, cli.model.policy(ids).logits)
    record = json.loads((Path(out) / "slca_export.json").read_text())
    assert record["global_step"] == 1 and record["model"] == "tiny"
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt"):
        export(["--checkpoint", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path / "x")])
