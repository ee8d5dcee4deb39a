"""configs/components/simulator_openai.yaml and simulator_mcp.yaml build through jsonargparse.

Real parts: jsonargparse (as LightningCLI uses it) instantiating every entry; no server is
contacted (OpenAIBackend opens its client and MCPBackend its session on first use). The
last test checks that every test file a config comment cites exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

from slca_lightning.chat_backends import OpenAIBackend
from slca_lightning.rewards.judges import LLMJudge, SummaryJudge
from slca_lightning.tools.base import ToolSimulator
from slca_lightning.tools.mcp_backend import MCPBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import LLMBackend

ROOT = Path(__file__).resolve().parents[3] / "configs" / "components"


def build(base, spec):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--component", type=base)
    return parser.instantiate(parser.parse_object({"component": spec})).component


def test_openai_simulator_and_judge_components():
    spec = yaml.safe_load((ROOT / "simulator_openai.yaml").read_text())
    sim = build(ToolSimulator, spec["sgls_openai"])
    assert isinstance(sim, SchemaGuidedSimulator) and isinstance(sim.backend, LLMBackend)
    chat = sim.backend.chat
    assert isinstance(chat, OpenAIBackend) and chat.base_url == "http://127.0.0.1:8000/v1"
    assert (chat.max_in_flight, sim.max_workers, sim.backend.seed) == (64, 64, 0)
    assert chat._client is None  # nothing contacted yet
    judge = build(SummaryJudge, spec["judge_openai"])
    assert isinstance(judge, LLMJudge) and isinstance(judge.backend, OpenAIBackend)


@pytest.mark.parametrize("name", ["sgls_mcp_stdio", "sgls_mcp_http", "sgls_tau2_airline"])
def test_mcp_simulator_components(name):
    spec = yaml.safe_load((ROOT / "simulator_mcp.yaml").read_text())[name]
    sim = build(ToolSimulator, spec)
    assert isinstance(sim, SchemaGuidedSimulator) and isinstance(sim.backend, MCPBackend)
    assert sim.cache is False and sim.backend._serving is None  # no session opened
    if name == "sgls_tau2_airline":
        assert sim.backend.hidden_arguments == {"state_key"} and sim.backend.mode == "legacy"


def test_config_comments_cite_test_files_that_exist():
    configs = ROOT.parents[0]
    cited = {}
    for path in configs.rglob("*.yaml"):
        for ref in re.findall(r"tests/[\w/]+\.py", path.read_text()):
            cited.setdefault(ref, []).append(path.relative_to(configs).as_posix())
    assert "tests/unit/tools/test_simulator_components.py" in cited  # the references are read
    missing = {ref: where for ref, where in cited.items() if not (configs.parent / ref).exists()}
    assert not missing, f"config comments cite missing test files: {missing}"
