"""The patch planner's context: one rule for the doctor and the served plan."""

from __future__ import annotations

import attrs

from ascend_core.deployment import Deployment, ModelFacts, SpeculativeSettings
from ascend_core.patches import Feature, context_for, device_context
from ports.device import ChipFamily, DeviceKind

MODEL = ModelFacts("LlamaForCausalLM", "llama", 512, 2, 8, 8, 64)


def test_the_npu_stack_brings_triton_and_the_host_does_not() -> None:
    assert device_context(DeviceKind.NPU, ChipFamily.A3).features == {Feature.TRITON}
    host = device_context(DeviceKind.CPU, ChipFamily.HOST)
    assert (host.device_kind, host.chip_family, host.features) == (
        DeviceKind.CPU,
        ChipFamily.HOST,
        frozenset(),
    )


def test_a_deployment_adds_speculative_decoding_and_mamba_state() -> None:
    plain = Deployment(model=MODEL, chip_family=ChipFamily.HOST, device_kind=DeviceKind.CPU)
    assert context_for(plain).features == frozenset()
    drafting = attrs.evolve(plain, speculative=SpeculativeSettings("ngram", 3))
    assert context_for(drafting).features == {Feature.SPECULATIVE_DECODING}
    hybrid = attrs.evolve(plain, model=attrs.evolve(MODEL, hybrid=True))
    assert context_for(hybrid).features == {Feature.MAMBA_STATE}


def test_a_deployment_on_the_npu_keeps_its_device_and_chip() -> None:
    on_npu = Deployment(model=MODEL, chip_family=ChipFamily.A2, device_kind=DeviceKind.NPU)
    context = context_for(on_npu, extra={Feature.MAMBA_STATE})
    assert (context.device_kind, context.chip_family) == (DeviceKind.NPU, ChipFamily.A2)
    assert context.features == {Feature.TRITON, Feature.MAMBA_STATE}
