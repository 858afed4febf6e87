"""Step: vLLM's EPLB (`--enable-eplb`, or the reference's `eplb_config.dynamic_eplb`) as it
serves on our devices, written back to vLLM's parallel config with a reason per field
(ascend_core/moe/eplb.py has the rules)."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.moe.eplb import EplbFacts, plan_eplb
from ascend_core.plan import fields
from ascend_core.plan.moe_comm import ep_size
from ascend_core.plan.result import Draft
from ascend_core.quantization.export_layers import LayerKind
from ascend_core.quantization.methods import QuantMethod


def decide_eplb(deployment: Deployment, draft: Draft) -> Draft:
    config = draft.decisions.ascend_config
    if config is None:
        return draft
    settings = deployment.parallel.eplb
    plan = plan_eplb(EplbFacts(
        settings=settings,
        reference=config.eplb_config,
        device_kind=deployment.device_kind,
        ep_size=ep_size(deployment.parallel),
        is_moe=deployment.model.is_moe,
        quantized=draft.decisions.quantization is not QuantMethod.NONE,
        expert_formats=frozenset(layers.format for layers in deployment.quantized_layers
                                 if layers.kind is LayerKind.EXPERTS),
        policy_type=config.reference_value("eplb_config.eplb_policy_type", 2),
    ))
    for error in plan.errors:
        draft = draft.fail(error)
    for warning in plan.warnings:
        draft = draft.warn(warning)
    decision = plan.decision
    if decision is None:
        return draft
    draft = draft.decide(eplb=decision)
    if not settings.enabled:
        draft = draft.change(fields.ENABLE_EPLB, False, True,
                             f"{decision.source} is served as vLLM's EPLB")
    else:
        draft = draft.change(
            fields.ENABLE_EPLB, False, True,
            "vLLM's config refuses --enable-eplb on platforms other than CUDA/ROCm/XPU, so "
            "the plugin held it past that check; on this device our MoE method maps "
            "logical to physical experts and records the load",
        )
    for path, old, new, reason in (
        (fields.EPLB_REDUNDANT, 0, decision.redundant,
         "redundant experts: replicas of the busiest experts over the EP ranks"),
        (fields.EPLB_WINDOW, settings.window_size, decision.window_size,
         "the load window, from the reference's eplb_config"),
        (fields.EPLB_STEP, settings.step_interval, decision.step_interval,
         "the steps between rebalances, from the reference's eplb_config"),
        (fields.EPLB_ASYNC, settings.use_async, False,
         "vLLM's async EPLB moves weights from a thread on a side CUDA stream; here the "
         "rebalance runs between steps (synchronous)"),
        (fields.EPLB_COMMUNICATOR, settings.communicator, decision.communicator,
         "expert weights move by torch.distributed point-to-point over the EP group "
         "(vLLM's torch_nccl communicator): its gloo group on the host, its device group "
         "(HCCL) on the NPU; vLLM would pick torch_gloo, which waits on an accelerator "
         "stream"),
    ):
        if new != old or (path == fields.EPLB_REDUNDANT and new):
            draft = draft.change(path, old, new, reason)
    return draft
