"""The `expert parallelism` section: the MoE communication method per step size, the
experts each rank holds and MC2's HCCL buffer, all the core's (plan/moe_comm.py)."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan.items import FAIL, PASS
from ascend_core.moe import MoeCommMethod
from ascend_core.plan import ConfigPlan
from ascend_core.preflight import CheckItem

# What HCCL needs of its buffer for the methods without a floor.
NO_FLOOR = (
    "no HCCL_BUFFSIZE floor: HCCL moves larger all-to-all and all-gather payloads "
    "through its buffer in pieces"
)


def moe_items(plan: ConfigPlan) -> tuple[list[CheckItem], dict[str, Any] | None]:
    """The section's items and report data; none for a dense model or unknown batch
    limits (the plan decides nothing then)."""
    moe = plan.decisions.moe
    if moe is None:
        return [], None
    comm = moe.comm
    how = "forced by VLLM_ASCEND_MOE_COMM_METHOD" if comm.forced else "chosen by the plan"
    items = [
        CheckItem("method", PASS, f"{comm.describe()}; {how}"),
        CheckItem("MC2 capacity", PASS, f"{comm.capacity} tokens a step (across TP)"),
        CheckItem("experts", PASS, moe.placement.describe()),
        CheckItem("dispatched tokens", PASS, moe.token_dtype),
    ]
    if moe.in_graphs is not None:
        items.append(CheckItem("in graphs", PASS, moe.in_graphs))
    eplb = plan.decisions.eplb
    if eplb is not None:
        items.append(CheckItem("EPLB", PASS, eplb.describe()))
        items.extend(CheckItem("eplb_config", PASS, m.describe()) for m in eplb.mappings)
    buffer = moe.hccl_buffer
    data: dict[str, Any] = {
        "methods": [m.value for m in comm.methods()],
        "small_steps": comm.small.method.value,
        "large_steps": comm.large.method.value,
        "capacity": comm.capacity,
        "forced": comm.forced,
        "physical_experts": moe.placement.physical,
        "redundant_experts": moe.placement.redundant,
        "ep_size": moe.placement.ep_size,
        "experts_per_rank": moe.placement.most_per_rank,
        "hccl_buffer_needed_mb": buffer.needed_mb if buffer is not None else None,
        "hccl_buffsize_mb": buffer.given_mb if buffer is not None else None,
        "in_graphs": moe.in_graphs,
        "eplb": None if eplb is None else {
            "source": eplb.source,
            "redundant_experts": eplb.redundant,
            "window_size": eplb.window_size,
            "step_interval": eplb.step_interval,
            "communicator": eplb.communicator,
            "mapped": {m.key: m.vllm for m in eplb.mappings},
        },
    }
    if buffer is None:
        items.append(CheckItem("HCCL buffer", PASS, NO_FLOOR))
    elif buffer.fits:
        items.append(CheckItem("HCCL buffer", PASS, buffer.describe()))
    else:
        items.append(
            CheckItem(
                "HCCL buffer",
                FAIL,
                buffer.describe(),
                f"export HCCL_BUFFSIZE={buffer.needed_mb} (the config plan's error says why)",
            )
        )
    if MoeCommMethod.MC2 not in comm.methods() and moe.placement.ep_size > 1:
        data["hccl_buffer"] = NO_FLOOR
    return items, data
