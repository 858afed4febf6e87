"""The doctor's Deployment carries the VLLM_ASCEND_* variables and the expert-map check, so
`ascend-doctor plan` reports what the core's reference rules say, as serving does."""

from __future__ import annotations

from adapters.doctor.plan.config import build_deployment
from adapters.doctor.plan_command import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core.model_facts import model_facts_from_config
from ascend_core.plan import plan_config
from ports.device import ChipFamily, DeviceKind
from unit.doctor.large_models import LLAMA_70B_CONFIG
from unit.fakes.environment import FakeEnvironment
from unit.fakes.local_files import FakeLocalFiles

A2 = Target(DeviceKind.NPU, ChipFamily.A2, 64 << 30, None, "test: nominal A2")


def test_variables_and_file_facts_reach_the_plan() -> None:
    args = ServeArgs.from_parsed(
        {
            "model": "/m/llama",
            "additional_config": {"eplb_config": {"expert_map_path": "/maps/ep.json"}},
        }
    )
    model = model_facts_from_config(LLAMA_70B_CONFIG, source="/m/llama/config.json")
    env = FakeEnvironment({"VLLM_ASCEND_ENABLE_PREFETCH_MLP": "1", "OTHER": "x"})
    deployment = build_deployment(args, model, A2, env, local_files=FakeLocalFiles())
    assert dict(deployment.ascend_env) == {"VLLM_ASCEND_ENABLE_PREFETCH_MLP": "1"}
    assert dict(deployment.readable_files) == {"/maps/ep.json": False}
    plan = plan_config(deployment)
    assert any("expert_map_path" in e.what and "does not exist" in e.what for e in plan.errors)
    assert any("VLLM_ASCEND_ENABLE_PREFETCH_MLP" in w for w in plan.warnings)
