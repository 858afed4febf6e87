"""Step: NPU caching-allocator settings (PYTORCH_NPU_ALLOC_CONF) for the worker processes."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

EXPANDABLE = "expandable_segments"
# torch_npu's caching allocator refuses expandable segments together with either of these
# (they tune the fixed-segment allocator that expandable segments replace).
FIXED_SEGMENT_OPTIONS = ("max_split_size_mb", "garbage_collection_threshold")


def plan_allocator(deployment: Deployment, draft: Draft) -> Draft:
    """Add expandable_segments:True unless the user already chose.

    Not with sleep mode: its weights and KV cache come from a torch_npu MemPool over a
    pluggable allocator (adapters/npu/vmm_pool.py), which expandable segments would bypass
    (as in PyTorch, pytorch/pytorch#147851); the user's own expandable_segments:True is
    left as is, with a warning.
    """
    current = deployment.npu_alloc_conf
    draft = draft.decide(npu_alloc_conf=current)
    if deployment.device_kind is not DeviceKind.NPU:
        return draft  # only torch_npu reads the variable
    options = _parse(current)
    if options is None:
        return draft.warn(
            f"PYTORCH_NPU_ALLOC_CONF={current!r} is not a list of key:value pairs; "
            "left as is, without expandable_segments."
        )
    if deployment.cache.enable_sleep_mode:
        if options.get(EXPANDABLE, "").strip() == "True":
            return draft.warn(
                f"PYTORCH_NPU_ALLOC_CONF={current!r} sets {EXPANDABLE}:True with sleep mode: "
                "expandable segments bypass the MemPool that sleep mode allocates the weights "
                "and KV cache from, so the first sleep would stop with an error; remove it."
            )
        return draft  # no expandable segments under sleep mode's pool
    if EXPANDABLE in options:
        return draft  # the user's own choice stands
    fixed = [key for key in FIXED_SEGMENT_OPTIONS if key in options]
    if fixed:
        return draft.warn(
            f"PYTORCH_NPU_ALLOC_CONF={current!r} sets {' and '.join(fixed)}, which torch_npu "
            f"does not accept together with {EXPANDABLE}:True; left as is, without "
            "expandable segments (remove them to let the plan add expandable segments)."
        )
    new = f"{current},{EXPANDABLE}:True" if current else f"{EXPANDABLE}:True"
    return draft.change(
        fields.NPU_ALLOC_CONF,
        current,
        new,
        "expandable segments grow allocations in place, so the KV cache and activations "
        "fragment NPU memory less",
    ).decide(npu_alloc_conf=new)


def _parse(conf: str | None) -> dict[str, str] | None:
    """`a:1,b:2` as a dict; None when malformed (then the plan leaves it alone)."""
    if not conf or not conf.strip():
        return {}
    result: dict[str, str] = {}
    for item in conf.split(","):
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            return None
        result[key.strip()] = value.strip()
    return result
