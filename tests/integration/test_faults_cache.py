"""20 CPU steps through the CLI under 10% injected faults, then cached reruns.

Cache semantics with faults on: a fault is not a tool response, so it is never cached; a
rerun on the disk cache makes zero backend calls for every call that got a real response
in the first run, and calls the backend (drawing faults again) only for calls that saw
nothing but faults.

Real parts: LightningCLI (the simulator comes from a YAML config as a user writes it),
Trainer, the agent loop, SchemaGuidedSimulator with its SQLite cache, FaultInjector around
the synthetic suite's real Python tools, the SimulatorStats callback and the CSVLogger.
Boundaries: the policy's turns come from a ScriptedEngine (a random tiny model almost never
emits a tool call, so faults would have nothing to hit), and the reward head is
TokenParityReward (as in tests/integration/test_fit.py).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from slca_lightning.cli.commands import main
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.testing.rewards import TokenParityReward

ARGS = [
    "--model.model=tiny",
    "--model.micro_batch_size=4",
    "--model.kl_coef=0.0",
    "--data.prompts_per_step=2",
    "--data.group_size=2",
    "--data.max_turns=2",
    "--data.max_new_tokens=40",
    "--data.max_response_tokens=96",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=8",
    "--data.tasks.init_args.n_heldout=2",
    "--data.tasks.init_args.families=[math]",
    "--data.tasks.init_args.irrelevant_fraction=0.0",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.log_every_n_steps=1",
    "--trainer.max_steps=20",
    "--trainer.callbacks+=callbacks.SimulatorStats",
]


def simulator_config(tmp_path: Path, name: str, fault_rate: float, cache_path: Path | None):
    third = fault_rate / 3
    cfg = {
        "data": {
            "simulator": {
                "class_path": "slca_lightning.tools.simulator.SchemaGuidedSimulator",
                "init_args": {
                    "backend": {
                        "class_path": "slca_lightning.tools.faults.FaultInjector",
                        "init_args": {
                            "backend": {
                                "class_path": "slca_lightning.tools.tool_backends.PythonBackend"
                            },
                            "timeout_rate": third,
                            "server_error_rate": third,
                            "malformed_rate": third,
                            "seed": 1,
                        },
                    },
                    "cache_path": None if cache_path is None else str(cache_path),
                    "retry_backoff_s": 0.0,
                    "max_retries": 1,
                },
            }
        }
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def script(context: str, turn: int) -> str:
    """Turn 0: an ``add`` call whose numbers come from the latest user question (so calls
    differ between tasks but repeat between identical runs); then a short summary."""
    if turn == 0:
        users = context.split("<|im_start|>user")[-1]
        numbers = [*[int(x) for x in re.findall(r"-?\d+", users)][:2], 1, 2]
        call = {"name": "add", "arguments": {"a": numbers[0] % 97, "b": numbers[1] % 89}}
        return "<tool_call>\n" + json.dumps(call) + "\n</tool_call><|im_end|>"  # the turn ends
    return "Done." + "<|im_end|>"


def run(tmp_path: Path, name: str, fault_rate: float, cache_path: Path | None = None):
    root = tmp_path / name
    config = simulator_config(tmp_path, name, fault_rate, cache_path)
    cli = main(
        [
            "--config",
            str(config),
            *ARGS,
            f"--trainer.default_root_dir={root}",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.init_args.save_dir={root}",
        ],
        run=False,
    )
    cli.model.reward_head = TokenParityReward()
    cli.model.configure_model()
    cli.datamodule.engine = ScriptedEngine(cli.model.tokenizer, script)
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli, root


def sim_totals(root: Path) -> dict[str, float]:
    totals: dict[str, float] = {}
    for path in root.rglob("metrics.csv"):
        with open(path) as f:
            for row in csv.DictReader(f):
                for key, value in row.items():
                    if key.startswith("sim/") and value not in ("", None):
                        totals[key] = totals.get(key, 0.0) + float(value)
    return totals


@pytest.fixture(scope="module")
def faulted(tmp_path_factory):
    """The 20-step run under 10% faults, with a disk cache (shared by two tests)."""
    tmp_path = tmp_path_factory.mktemp("faults")
    cache = tmp_path / "sim_cache.sqlite"
    cli, root = run(tmp_path, "faults", fault_rate=0.10, cache_path=cache)
    return cli, root, tmp_path, cache


def test_twenty_steps_under_ten_percent_faults_lose_no_step_and_log_the_faults(faulted):
    cli, root, _, _ = faulted
    assert cli.trainer.global_step == 20
    sim = cli.datamodule.simulator
    injector = sim.backend
    injected = (
        injector.stats["injected_timeouts"]
        + injector.stats["injected_server_errors"]
        + injector.stats["injected_malformed"]
    )
    assert injected > 0 and injector.stats["attempts"] == sim.stats["backend_calls"]
    assert 0.03 < injected / injector.stats["attempts"] < 0.25  # about the 10% asked for
    logged = sim_totals(root)
    assert logged["sim/calls"] == sim.stats["calls"] > 0
    assert logged["sim/injected_faults"] == sim.stats["injected_faults"] > 0
    assert logged["sim/injected_malformed"] == injector.stats["injected_malformed"]
    assert sim.stats["backend_errors"] == 0 and sim.stats["timeouts"] == 0  # none were real
    assert "sim/latency_p99" in logged


def test_a_second_identical_run_on_the_disk_cache_makes_no_backend_call(tmp_path):
    cache = tmp_path / "sim_cache.sqlite"
    first, _ = run(tmp_path, "first", fault_rate=0.0, cache_path=cache)
    assert first.trainer.global_step == 20 and first.datamodule.simulator.backend.stats["attempts"]
    second, root = run(tmp_path, "second", fault_rate=0.0, cache_path=cache)
    sim = second.datamodule.simulator
    assert second.trainer.global_step == 20
    assert sim.stats["calls"] == first.datamodule.simulator.stats["calls"] > 0
    assert sim.backend.stats["attempts"] == 0 and sim.stats["backend_calls"] == 0
    assert sim.stats["cache_hits"] == sim.stats["calls"]
    assert sim_totals(root)["sim/cache_disk_hits"] > 0


def test_a_rerun_under_faults_calls_the_backend_only_for_calls_never_answered(faulted):
    first, _, tmp_path, cache = faulted
    outcomes = first.datamodule.simulator.backend.call_outcomes()
    answered = {key for key, counts in outcomes.items() if counts.get("passed")}
    faulted_keys = {key for key, counts in outcomes.items() if set(counts) - {"passed"}}
    assert answered and answered & faulted_keys  # some calls saw a fault, then a response
    second, root = run(tmp_path, "rerun", fault_rate=0.10, cache_path=cache)
    sim = second.datamodule.simulator
    assert second.trainer.global_step == 20
    assert sim.stats["calls"] == first.datamodule.simulator.stats["calls"]
    rerun = sim.backend.call_outcomes()
    assert set(rerun) == set(outcomes) - answered  # nothing answered for real is asked again
    assert sim.stats["backend_calls"] == sim.backend.stats["attempts"]
    missed = sim.stats["calls"] - sim.stats["cache_hits"]  # max_retries=1: 1–2 attempts each
    assert missed <= sim.stats["backend_calls"] <= 2 * missed
    assert sim_totals(root)["sim/cache_disk_hits"] > 0
