"""The GPU recipe composes: slca_grpo.yaml + overlays/vllm.yaml + overlays/fsdp.yaml (or fsdp2).

Real parts: the project's LightningCLI parser and jsonargparse instantiation of every
component the overlays name (FSDPStrategy with its MixedPrecision and wrap policies,
ModelParallelStrategy, VLLMEngine). Boundary: the Trainer itself is not built, because
``accelerator: gpu`` cannot be instantiated on a CPU machine; its instantiated arguments are
checked instead. VLLMEngine imports vLLM only when it starts, so no vLLM is needed here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from slca_lightning.cli.app import SLCACLI
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.training.module import SLCAGRPOModule

ROOT = Path(__file__).resolve().parents[3]


class _NoTrainerCLI(SLCACLI):
    """Parses and instantiates everything but the Trainer (kept as its init arguments)."""

    def instantiate_trainer(self, **kwargs):
        self.trainer_init = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        return None


def compose(*overlays: str, extra: tuple[str, ...] = ()) -> _NoTrainerCLI:
    args = ["--config", str(ROOT / "configs/slca_grpo.yaml")]
    for name in overlays:
        args += ["--config", str(ROOT / "configs/overlays" / name)]
    return _NoTrainerCLI(
        SLCAGRPOModule, RolloutDataModule, args=[*args, *extra], run=False
    )  # fmt: skip


def test_paper_recipe_with_vllm_and_fsdp_composes():
    from lightning.pytorch.strategies import FSDPStrategy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from slca_lightning.rollout.vllm_engine import VLLMEngine

    cli = compose("vllm.yaml", "fsdp.yaml")
    trainer = cli.trainer_init
    assert trainer["accelerator"] == "gpu"
    strategy = trainer["strategy"]
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.sharding_strategy.name == "FULL_SHARD"
    assert strategy.mixed_precision.param_dtype == torch.bfloat16
    assert strategy.mixed_precision.reduce_dtype == torch.float32
    wrap = strategy.kwargs["auto_wrap_policy"]  # resolved to the class, not left a string
    assert getattr(wrap, "_module_classes", None) == {Qwen2DecoderLayer}
    checkpointing = strategy._activation_checkpointing_kwargs["auto_wrap_policy"]
    assert checkpointing._module_classes == {Qwen2DecoderLayer}
    # fp32 master weights (sharded), bf16 compute: lr 1e-6 updates survive
    assert trainer["precision"] == "bf16-mixed" and cli.model.hparams.dtype == "float32"
    assert strategy._state_dict_type == "sharded"
    engine = cli.datamodule.engine
    assert isinstance(engine, VLLMEngine) and engine.llm is None  # lazy: vLLM not imported
    assert engine.gpu_memory_utilization == 0.35 and engine.sync == "full"
    assert engine.enable_sleep_mode and engine.enable_prefix_caching
    assert cli.model.hparams.tis_cap == 2.0
    # the paper's run is untouched by the overlays
    assert cli.datamodule.prompts_per_step == 128 and cli.datamodule.group_size == 16
    assert cli.model.hparams.learning_rate == 1e-6 and cli.model.hparams.mini_batches == 4


def test_paper_recipe_with_vllm_and_fsdp2_and_lora_adapter_sync_composes():
    from lightning.pytorch.strategies import ModelParallelStrategy

    cli = compose(
        "vllm.yaml",
        "fsdp2.yaml",
        "lora.yaml",
        extra=("--data.engine.init_args.sync=adapter", "--trainer.num_nodes=4"),
    )
    strategy = cli.trainer_init["strategy"]
    assert isinstance(strategy, ModelParallelStrategy)
    assert strategy._save_distributed_checkpoint is True
    assert cli.trainer_init["num_nodes"] == 4
    assert cli.model.hparams.fsdp_param_dtype == "bfloat16" and cli.model.lora.r == 16
    assert cli.model.hparams.dtype == "float32"  # fp32 master weights, bf16 compute
    assert cli.datamodule.engine.sync == "adapter"


def test_bad_engine_setting_in_an_overlay_names_the_field():
    with pytest.raises(
        ValueError,
        match=r"data\.engine\.init_args\.gpu_memory_utilization: must be a number in \(0, 1\]",
    ):
        compose("vllm.yaml", extra=("--data.engine.init_args.gpu_memory_utilization=1.5",))
