"""The plan's EPLB step: which of vLLM's --enable-eplb settings serve on our devices, the
redundant experts per rank, and the reference's eplb_config keys mapped onto vLLM's."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.deployment import BatchSettings, EplbSettings
from ascend_core.moe.eplb import eplb_settings_from
from ascend_core.plan import fields, plan_config
from ascend_core.quantization import QuantMethod
from ascend_core.quantization.export_layers import LayerKind, QuantFormat, QuantizedLayers
from unit.core.plan_fixtures import dense_model, host, mla_model, npu

QWEN3_MOE = mla_model(num_experts=8, experts_per_token=2, hidden_size=1024)


def deployment(on: Any = npu, *, eplb: EplbSettings | None = None, tp: int = 2,
               ep: bool = True, model: Any = QWEN3_MOE, **top: Any):
    top.setdefault("batch", BatchSettings(max_num_seqs=8, max_num_batched_tokens=64))
    top.setdefault("compilation", {"enforce_eager": True})
    parallel = {"tp": tp, "expert_parallel": ep, "eplb": eplb or EplbSettings()}
    return on(model, parallel=parallel, **top)


def enabled(**given: Any) -> EplbSettings:
    return eplb_settings_from(True, given)


def changed(plan: Any) -> dict[str, Any]:
    return {c.field: c.new for c in plan.changes}


def test_without_eplb_nothing_changes():
    plan = plan_config(deployment())
    assert plan.ok and plan.decisions.eplb is None
    assert not any(f.startswith("parallel_config.eplb") for f in changed(plan))


def test_enable_eplb_serves_synchronously_with_redundant_experts_per_rank():
    plan = plan_config(deployment(eplb=enabled(num_redundant_experts=2, step_interval=6)))
    assert plan.ok, plan.describe()
    eplb, moe = plan.decisions.eplb, plan.decisions.moe
    assert eplb is not None and moe is not None
    assert (eplb.redundant, eplb.step_interval, eplb.window_size) == (2, 6, 1000)
    assert moe.placement.describe() == "10 experts (8 + 2 redundant) over 2 EP ranks: 5 a rank"
    new = changed(plan)
    assert new[fields.ENABLE_EPLB] is True
    assert new[fields.EPLB_REDUNDANT] == 2
    assert new[fields.EPLB_ASYNC] is False  # vLLM's async worker is CUDA-stream work
    assert new[fields.EPLB_COMMUNICATOR] == "torch_nccl"  # the NPU's EP device group
    assert "synchronous" in eplb.describe()


def test_the_host_moves_weights_over_the_ep_groups_gloo():
    # torch_nccl: torch.distributed P2P over the group the weights live on (gloo here);
    # torch_gloo waits on an accelerator stream the host does not have.
    plan = plan_config(deployment(host, eplb=enabled()))
    assert plan.ok, plan.describe()
    assert changed(plan)[fields.EPLB_COMMUNICATOR] == "torch_nccl"
    assert not plan_config(deployment(host, eplb=enabled(communicator="torch_gloo"))).ok
    assert plan_config(deployment(eplb=enabled(communicator="torch_gloo"))).ok


def test_the_reference_keys_map_onto_vllms():
    config = {"eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 2,
                              "expert_heat_collection_interval": 4,
                              "algorithm_execution_interval": 2}}
    plan = plan_config(deployment(additional_config=config))
    assert plan.ok, plan.describe()
    eplb = plan.decisions.eplb
    assert eplb is not None and eplb.source.endswith("dynamic_eplb=true")
    assert (eplb.redundant, eplb.window_size, eplb.step_interval) == (2, 4, 6)
    mapped = {m.key: m.vllm for m in eplb.mappings}
    assert mapped["expert_heat_collection_interval"] == "eplb_config.window_size"
    assert mapped["algorithm_execution_interval"] == "eplb_config.step_interval"
    assert mapped["dynamic_eplb"] == "parallel_config.enable_eplb"
    assert changed(plan)[fields.EPLB_WINDOW] == 4


def test_dynamic_eplb_alone_takes_the_reference_defaults():
    plan = plan_config(deployment(additional_config={"eplb_config": {"dynamic_eplb": True}}))
    eplb = plan.decisions.eplb
    assert plan.ok and eplb is not None
    assert (eplb.window_size, eplb.step_interval) == (600, 650)


def test_a_key_given_twice_differently_is_refused_naming_both():
    config = {"eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 4}}
    plan = plan_config(deployment(eplb=enabled(num_redundant_experts=2),
                                  additional_config=config))
    assert any("num_redundant_experts" in e.what and "--eplb-config" in e.what
               for e in plan.errors), plan.describe()


def test_eplb_needs_more_than_one_ep_rank_and_a_moe_model():
    assert not plan_config(deployment(eplb=enabled(), ep=False)).ok
    assert not plan_config(deployment(eplb=enabled(), tp=1)).ok
    dense = plan_config(deployment(eplb=enabled(), model=dense_model()))
    assert any("no routed experts" in e.what for e in dense.errors)


def test_redundant_experts_must_split_evenly_over_the_ep_ranks():
    plan = plan_config(deployment(eplb=enabled(num_redundant_experts=3)))
    assert any("do not split evenly" in e.what for e in plan.errors), plan.describe()


def test_redundant_experts_without_eplb_are_refused():
    plan = plan_config(deployment(additional_config={
        "eplb_config": {"num_redundant_experts": 2}}))
    assert any("without EPLB" in e.what for e in plan.errors), plan.describe()


def test_what_cannot_be_mapped_is_refused_or_reported():
    refused = plan_config(deployment(eplb=enabled(communicator="nixl")))
    assert any("communicator" in e.what for e in refused.errors)
    policy = plan_config(deployment(additional_config={
        "eplb_config": {"dynamic_eplb": True, "eplb_policy_type": 1}}))
    assert any("eplb_policy_type" in w for w in policy.warnings), policy.describe()


def _modelslim(experts: tuple[QuantFormat, ...], on: Any = npu) -> Any:
    """An EPLB deployment of a ModelSlim export: W8A8_DYNAMIC linears, experts as given."""
    layers = (QuantizedLayers(QuantFormat.MODELSLIM_W8A8_DYNAMIC, LayerKind.LINEAR,
                              "model.layers.0.self_attn.o_proj", 4, "W8A8_DYNAMIC"),
              *(QuantizedLayers(f, LayerKind.EXPERTS, "model.layers.1.mlp.experts.0.up_proj",
                                16, f.name) for f in experts))
    return deployment(on, eplb=enabled(num_redundant_experts=2), quantized_layers=layers,
                      detected_quantization=QuantMethod.ASCEND, user_quantization="ascend")


def _eplb_errors(plan: Any) -> list[str]:
    return [e.what for e in plan.errors if "EPLB on this plugin serves" in e.what]


@pytest.mark.parametrize("on", [npu, host])
def test_w8a8_dynamic_experts_serve_eplb(on) -> None:
    """W8A8_DYNAMIC experts keep every tensor (int8 weights, per-channel scales and
    offsets) as the layer's parameters, which vLLM's rearrange moves: served."""
    plan = plan_config(_modelslim((QuantFormat.MODELSLIM_W8A8_DYNAMIC,), on))
    assert not _eplb_errors(plan), plan.describe()
    assert plan.decisions.eplb is not None and plan.decisions.eplb.redundant == 2


@pytest.mark.parametrize("experts", [
    (QuantFormat.MODELSLIM_W4A8_DYNAMIC,),
    (QuantFormat.MODELSLIM_W8A8_DYNAMIC, QuantFormat.MODELSLIM_W4A8_DYNAMIC),
    (),  # quantized linears, the experts' format unknown to the plan
])
def test_other_quantized_experts_are_refused_naming_their_format(experts) -> None:
    errors = _eplb_errors(plan_config(_modelslim(experts)))
    assert len(errors) == 1, errors
    if QuantFormat.MODELSLIM_W4A8_DYNAMIC in experts:
        assert QuantFormat.MODELSLIM_W4A8_DYNAMIC.value in errors[0]
        assert QuantFormat.MODELSLIM_W8A8_DYNAMIC.value not in errors[0]
    else:
        assert "no quantized experts the plan could name" in errors[0]


def test_an_fp8_model_is_refused_eplb() -> None:
    """Online fp8 (no files' layers): the plan cannot tell its experts serve EPLB."""
    plan = plan_config(deployment(eplb=enabled(), user_quantization="fp8"))
    assert plan.decisions.quantization is QuantMethod.FP8, plan.describe()
    assert _eplb_errors(plan), plan.describe()


def test_vllms_parsed_config_counts_only_fields_off_their_defaults_as_given():
    settings = eplb_settings_from(True, {"window_size": 1000, "step_interval": 5,
                                         "use_async": True, "communicator": None})
    assert settings.given == frozenset({"step_interval"}) and settings.step_interval == 5


def test_the_doctor_shows_eplb_and_each_mapped_key():
    from adapters.doctor.plan.moe import moe_items

    config = {"eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 2}}
    items, data = moe_items(plan_config(deployment(additional_config=config)))
    details = {i.name: i.detail for i in items}
    assert details["experts"] == "10 experts (8 + 2 redundant) over 2 EP ranks: 5 a rank"
    assert details["EPLB"].startswith("EPLB on (additional_config.eplb_config.dynamic_eplb")
    assert sum(i.name == "eplb_config" for i in items) == 4  # redundant, 2 intervals, switch
    assert data is not None and data["eplb"]["redundant_experts"] == 2
    assert data["eplb"]["mapped"]["expert_heat_collection_interval"] == "eplb_config.window_size"
