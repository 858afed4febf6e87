"""The host's DeepSeek-V4 class: what it does not serve is refused before load, with a fix."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.deployment import (
    Deployment,
    ParallelSettings,
    SpeculativeSettings,
)
from ascend_core.model_facts import model_facts_from_config
from ascend_core.support import features_of
from ascend_core.support.compressed_mla import compressed_mla_limit_errors
from ascend_core.support.features import Feature
from ascend_core.support.matrix import Supported, verdict
from ports.device import ChipFamily, DeviceKind

TINY_V4: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 64, "partial_rotary_factor": 0.25,
    "n_routed_experts": 8, "index_topk": 4, "sliding_window": 16,
}
FACTS = model_facts_from_config(TINY_V4)


def _host(**settings: Any) -> Deployment:
    return Deployment(FACTS, ChipFamily.HOST, DeviceKind.CPU, **settings)


def test_the_plain_host_deployment_is_served() -> None:
    deployment = _host()
    assert Feature.COMPRESSED_MLA in features_of(deployment)
    assert isinstance(verdict(Feature.COMPRESSED_MLA, DeviceKind.CPU), Supported)
    assert compressed_mla_limit_errors(deployment) == ()


def test_the_npu_serves_it_in_bf16_with_the_same_limits() -> None:
    served = verdict(Feature.COMPRESSED_MLA, DeviceKind.NPU)
    assert isinstance(served, Supported) and "emulated NPU only" in served.note
    npu = Deployment(FACTS, ChipFamily.A3, DeviceKind.NPU)
    assert compressed_mla_limit_errors(npu) == ()
    (split,) = compressed_mla_limit_errors(
        Deployment(FACTS, ChipFamily.A3, DeviceKind.NPU, parallel=ParallelSettings(tp=2)))
    assert "tensor_parallel_size=2" in split.what and split.device == "npu"


@pytest.mark.parametrize(
    ("config", "what", "hint"),
    [
        ({"torch_dtype": "float16"}, "npu_moe_token_unpermute", "--dtype bfloat16"),
        ({"index_topk": 2049}, "index_topk 2049", "VLLM_ASCEND_DEVICE=cpu"),
    ],
)
def test_the_npu_refuses_what_its_ops_cannot_run(config: dict[str, Any], what: str,
                                                 hint: str) -> None:
    facts = model_facts_from_config({**TINY_V4, **config})
    (error,) = compressed_mla_limit_errors(Deployment(facts, ChipFamily.A3, DeviceKind.NPU))
    assert what in error.what and hint in error.hint and error.device == "npu"


@pytest.mark.parametrize(
    ("settings", "what", "hint"),
    [
        ({"parallel": ParallelSettings(tp=2)}, "tensor_parallel_size=2", "set tensor_parallel"),
        ({"parallel": ParallelSettings(pp=2)}, "pipeline_parallel_size=2", "set pipeline"),
        ({"user_quantization": "fp8"}, "quantized weights (fp8)", "bf16 or float32"),
        ({"speculative": SpeculativeSettings(method="mtp", num_speculative_tokens=1)},
         "no MTP layers", "without speculative_config"),
    ],
)
def test_each_unserved_setting_is_refused_with_its_fix(
    settings: dict[str, Any], what: str, hint: str
) -> None:
    (error,) = compressed_mla_limit_errors(_host(**settings))
    assert what in error.what and hint in error.hint
    assert error.feature == "COMPRESSED_MLA" and error.device == "cpu"


def test_other_models_are_not_concerned() -> None:
    llama = model_facts_from_config({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                     "num_attention_heads": 4, "num_hidden_layers": 2})
    deployment = Deployment(llama, ChipFamily.HOST, DeviceKind.CPU,
                            parallel=ParallelSettings(tp=2))
    assert compressed_mla_limit_errors(deployment) == ()


def test_the_plan_serves_it_eagerly_on_both_devices() -> None:
    from ascend_core.plan import fields, plan_config
    from ascend_core.plan.graph import COMPRESSED_MLA_EAGER_REASON
    from ascend_core.plan.result import CompileMode
    from unit.core.plan_fixtures import host, npu

    plan = plan_config(host(FACTS))
    assert plan.ok, plan.errors
    assert plan.compile_mode is CompileMode.NONE
    (change,) = plan.changes_to(fields.COMPILE_MODE)
    assert change.reason.endswith(COMPRESSED_MLA_EAGER_REASON)
    assert not plan_config(host(FACTS, parallel={"tp": 2})).ok
    on_npu = plan_config(npu(FACTS, chip=ChipFamily.A3))
    assert on_npu.ok, on_npu.errors
    (change,) = on_npu.changes_to(fields.COMPILE_MODE)
    assert change.reason.endswith(COMPRESSED_MLA_EAGER_REASON)
