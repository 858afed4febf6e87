"""The `memory budget` section: weights, KV cache per token and reserve against the
device memory, as vllm serve will budget them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from adapters.doctor.plan.batch import serve_max_num_seqs
from adapters.doctor.plan.config import speculative_facts
from adapters.doctor.plan.encoder import encoder_items
from adapters.doctor.plan.items import FAIL, PASS, WARN, failed
from adapters.doctor.plan.model import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import ModelFacts
from ascend_core.errors import AscendError
from ascend_core.memory_budget import (
    Accounting,
    BudgetFlag,
    EncoderBudget,
    HostKvDefault,
    Int4Holder,
    MemoryBudget,
    MemoryDemand,
    Reserve,
    Scaling,
    SequenceCap,
    dtype_bytes,
    estimate_reserve,
    exact_bytes,
    flags_leave_default,
    format_bytes,
    host_flag_warning,
    kv_bytes_per_token,
    lora_slot_bytes,
    plan_budget,
    weights_size,
)
from ascend_core.preflight import CheckItem
from ascend_core.quantization import QuantDetection, QuantMethod
from ascend_core.quantization.fp8 import Fp8Path, fp8_serving
from ports.device import DeviceKind
from ports.model_files import ModelFiles

# vLLM's chunked-prefill token budget when --max-num-batched-tokens is not given.
DEFAULT_BATCHED_TOKENS = 8192
# The block size the budget assumes when neither the user nor the plan sets one.
DEFAULT_BLOCK_SIZE = 128
def memory_items(
    args: ServeArgs,
    files: ModelFiles,
    model: ModelFacts,
    target: Target,
    block_size: int | None,
    detection: QuantDetection | None,
    draft_files: ModelFiles | None = None,
) -> tuple[list[CheckItem], Mapping[str, Any]]:
    """The budget's items and its numbers as report data; skipped when memory or weights
    are unknown."""
    if target.memory_bytes <= 0:
        return [CheckItem("budget", WARN, "device memory unknown", "pass --device-memory")], {}
    try:
        headers = files.tensor_headers()
        # fp8 weights: held as the chip's fp8 path holds them (the model dtype where
        # they are dequantized at load).
        fp8 = fp8_serving(target.chip_family, target.kind).path is Fp8Path.DEQUANTIZE_AT_LOAD
        # int4 weights (W4A16, W4A8_DYNAMIC): as the device repacks or dequantizes them.
        holder = Int4Holder.HOST if target.kind is DeviceKind.CPU else Int4Holder.NPU
        weights = weights_size(headers, model.dtype, fp8_dequantized=fp8, int4_holder=holder)
        kv_dtype = dtype_bytes(args.kv_cache_dtype, model.dtype)
    except AscendError as error:
        return failed("budget", error), {}
    if not headers:
        return [
            CheckItem(
                "weights",
                WARN,
                f"{files.location} has no *.safetensors: weights unknown, budget skipped",
                "download the safetensors files (their headers are enough)",
            )
        ], {}
    shards = args.tp * args.pp
    # vLLM's EP group (--enable-expert-parallel) is every TP rank of every DP replica.
    ep = args.tp * args.dp if args.expert_parallel and weights.routed_expert_bytes else None
    per_device = weights.per_device(args.tp, args.pp, ep)
    split = f"tp x pp = {shards}" + (f"; routed experts / ep x pp = {ep * args.pp}" if ep else "")
    speculative = speculative_facts(args, files, draft_files)
    kv = kv_bytes_per_token(model, kv_dtype, args.tp, args.pp, speculative)
    lora = (
        lora_slot_bytes(
            headers, args.max_loras, args.max_lora_rank, dtype_bytes(model.dtype), args.tp
        )
        if args.enable_lora
        else 0
    )
    encoder = encoder_items(args, files, model, target.memory_bytes)
    reserve = estimate_reserve(
        model,
        args.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS,
        dtype_bytes(model.dtype),
        args.tp,
        lora,
        encoder.total_bytes if encoder else 0,
    )
    block = block_size or DEFAULT_BLOCK_SIZE
    quantized = weights.quantized or (
        detection is not None and detection.method is not QuantMethod.NONE
    )
    explicit = args.kv_cache_memory_bytes
    on_host = target.kind is DeviceKind.CPU
    host_default = on_host and flags_leave_default(args.gpu_memory_utilization, explicit)
    if host_default and target.available_bytes is None:
        return [
            CheckItem(
                "budget",
                WARN,
                "host memory unknown: the host default KV cache cannot be computed",
                "pass --kv-cache-memory-bytes",
            )
        ], {}
    if host_default and target.available_bytes is not None:
        # The worker's numbers are read once the weights are loaded: the doctor takes
        # the weights of every local worker and the reserve estimate off what is
        # available now, then applies the same core default.
        workers = shards * args.dp
        after = target.available_bytes - weights.total_bytes - reserve.total_bytes * workers
        seqs = serve_max_num_seqs(args, target.memory_bytes)
        blocks = -(-model.max_model_len // block)
        cap = SequenceCap(seqs, model.max_model_len, blocks * block * kv.bytes, block * kv.bytes)
        default = HostKvDefault(after, target.memory_bytes, workers, sequences=cap)
        demand = MemoryDemand.from_host_default(
            default, kv.bytes, model.max_model_len, block, Accounting.ESTIMATED
        )
        budget = plan_budget(demand)
    elif explicit:
        # vllm serve's worker: the flag is the whole KV budget and its message, with only
        # the two fixes that need no model facts, so the doctor prints what serve will.
        demand = MemoryDemand.explicit(explicit, kv.bytes, model.max_model_len, block)
        budget = plan_budget(demand)
    else:
        demand = MemoryDemand(
            device_memory_bytes=target.memory_bytes,
            memory_utilization=args.gpu_memory_utilization,
            weights_bytes=per_device,
            reserve_bytes=reserve.total_bytes,
            kv_bytes_per_token=kv.bytes,
            max_model_len=model.max_model_len,
            block_size=block,
        )
        budget = plan_budget(demand, Scaling(model, kv_dtype, args.tp, args.pp, quantized))
    items = [
        CheckItem(
            "weights",
            PASS,
            f"{format_bytes(weights.total_bytes)} ({weights.detail}); "
            f"{format_bytes(per_device)} per device (/ {split})",
        ),
        CheckItem("KV per token", PASS, f"{kv.bytes} B = {kv.formula}"),
        CheckItem("reserve", PASS, f"{reserve.describe()} (estimate)"),
    ]
    if encoder is not None:
        items.append(CheckItem("encoder", PASS, encoder.describe()))
    if explicit:
        items.append(_explicit_room(explicit, target.memory_bytes, per_device, reserve))
    if on_host and not host_default:
        items.append(_host_flag_item(args, target.memory_bytes))
    items.append(_budget_item(budget))
    data = _memory_data(budget, weights.total_bytes, kv.formula, reserve.describe())
    return items, {**data, "encoder": _encoder_data(encoder)}


def _explicit_room(explicit: int, device_bytes: int, weights: int, reserve: Reserve) -> CheckItem:
    """Whether --kv-cache-memory-bytes fits beside the weights and the estimated reserve:
    vllm serve refuses a value above the free memory it measures after profiling."""
    room = device_bytes - weights - reserve.total_bytes
    told = f"--kv-cache-memory-bytes={explicit} ({format_bytes(explicit)})"
    if explicit > room:
        return CheckItem(
            "free memory",
            WARN,
            f"{told} is more than the {exact_bytes(max(0, room))} a device keeps free after "
            f"{format_bytes(weights)} weights and {format_bytes(reserve.total_bytes)} reserve "
            "(estimate); vllm serve refuses a KV cache larger than the free memory it measures",
            f"lower --kv-cache-memory-bytes to at most {max(0, room)}, or spread the weights "
            "over more devices",
        )
    return CheckItem(
        "free memory",
        PASS,
        f"{told} sets the KV cache instead of --gpu-memory-utilization; it fits in the "
        f"{format_bytes(room)} a device keeps free after weights and reserve (estimate)",
    )


def _host_flag_item(args: ServeArgs, total_bytes: int) -> CheckItem:
    """On the host, a flag instead of the default: a warning when it takes most of the RAM."""
    explicit = args.kv_cache_memory_bytes
    flag = BudgetFlag.KV_CACHE_MEMORY_BYTES if explicit else BudgetFlag.MEMORY_UTILIZATION
    share = explicit or int(total_bytes * args.gpu_memory_utilization)
    warning = host_flag_warning(flag.value, share, total_bytes)
    if warning is None:
        return CheckItem(
            "host RAM",
            PASS,
            f"{flag.value} gives vLLM {format_bytes(share)} of the host's "
            f"{format_bytes(total_bytes)} RAM instead of the host default",
        )
    what, _, fix = warning.partition(" Fix: ")
    return CheckItem("host RAM", WARN, what, fix)


def _budget_item(budget: MemoryBudget) -> CheckItem:
    if budget.fits:
        return CheckItem("KV cache", PASS, budget.what())
    return CheckItem("KV cache", FAIL, budget.what(), budget.hint())


def _memory_data(
    budget: MemoryBudget, weights_total: int, formula: str, reserve: str
) -> Mapping[str, Any]:
    d = budget.demand
    return {
        "budget_flag": d.budget_flag.value,
        "host_default": attrs.asdict(d.host_default) if d.host_default is not None else None,
        "device_memory_bytes": d.device_memory_bytes,
        "memory_utilization": d.memory_utilization,
        "weights_bytes_total": weights_total,
        "weights_bytes_per_device": d.weights_bytes,
        "reserve_bytes": d.reserve_bytes,
        "reserve": reserve,
        "kv_bytes_per_token": d.kv_bytes_per_token,
        "kv_formula": formula,
        "kv_bytes_available": d.kv_bytes_available,
        "block_size": d.block_size,
        "max_model_len": d.max_model_len,
        "tokens": budget.tokens,
        "sequences": budget.sequences,
        "fits": budget.fits,
        "fixes": [
            {"kind": f.kind.value, "argument": f.argument, "value": f.value, "detail": f.detail}
            for f in budget.fixes
        ],
    }


def _encoder_data(encoder: EncoderBudget | None) -> Mapping[str, Any] | None:
    if encoder is None:
        return None
    return {
        "max_tokens_per_item": dict(encoder.max_tokens_per_item),
        "cache_tokens": encoder.cache_tokens,
        "compute_tokens": encoder.compute_tokens,
        "bytes_per_token": encoder.bytes_per_token,
        "cache_bytes": encoder.cache_bytes,
        "profile_modality": encoder.profile_modality,
        "profile_items": encoder.profile_items,
        "activation_bytes": encoder.activation_bytes,
    }
