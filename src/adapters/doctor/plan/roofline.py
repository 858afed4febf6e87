"""The `roofline` section: the upper bound of decode tokens per second per batch size and
of prefill tokens per second on the target chip, and what binds each (the core's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from attrs import frozen

from adapters.doctor.plan.config import speculative_facts
from adapters.doctor.plan.items import PASS, WARN
from adapters.doctor.plan.model import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import ModelFacts
from ascend_core.errors import AscendError
from ascend_core.memory_budget import dtype_bytes, kv_bytes_per_token
from ascend_core.preflight import CheckItem
from ascend_core.quantization import QuantDetection, QuantMethod
from ascend_core.roofline import (
    DEFAULT_BATCHES,
    ChipFigures,
    DecodeRow,
    Setup,
    chip_figures,
    decode_row,
    model_shape,
    prefill_bound,
    weight_format,
)
from ports.model_files import ModelFiles

# The context each sequence holds when --context is not given (capped at max_model_len).
DEFAULT_CONTEXT = 4096
NOTE = (
    "upper bounds from the chip's peak figures (assumed ones marked in --json), every "
    "resource perfectly overlapped and no launch or collective latency: a prediction, not "
    "a measurement; nothing here has run on Ascend hardware"
)


@frozen
class RooflineAsk:
    """What the bound is asked for: tokens of context a sequence holds, and batch sizes
    (sequences per DP rank)."""

    context: int | None = None
    batches: tuple[int, ...] = DEFAULT_BATCHES


def roofline_items(
    args: ServeArgs,
    files: ModelFiles,
    model: ModelFacts,
    target: Target,
    detection: QuantDetection | None,
    ask: RooflineAsk,
    draft_files: ModelFiles | None = None,
) -> tuple[list[CheckItem], Mapping[str, Any]]:
    """The bound's items and numbers; a warning when the chip has no figures kept."""
    chip = chip_figures(target.chip_family)
    if chip is None:
        return [
            CheckItem(
                "chip",
                WARN,
                f"no published figures are kept for {target.chip_family.value}: roofline skipped",
                "pass --chip A2, A3 or A5",
            )
        ], {}
    if model.hybrid:
        return [
            CheckItem(
                "roofline",
                WARN,
                "skipped: the roofline counts attention and MLP layers only, not this "
                "model's linear-attention (mamba/GDN) layers",
                "read the bound of a model of attention layers only",
            )
        ], {}
    try:
        shape = model_shape(files.read_json("config.json") or {}, f"{files.location}/config.json")
        kv_dtype = dtype_bytes(args.kv_cache_dtype, model.dtype)
        float_bytes = dtype_bytes(model.dtype)
    except AscendError as error:  # the bound is advice: a warning, never a failed plan
        return [CheckItem("roofline", WARN, f"skipped: {error.what}", error.hint)], {}
    speculative = speculative_facts(args, files, draft_files)
    kv = kv_bytes_per_token(model, kv_dtype, args.tp, args.pp, speculative)
    method = detection.method if detection is not None else QuantMethod.NONE
    description = detection.description if detection is not None else None
    scheme = description.model_scheme if description is not None else None
    fmt = weight_format(method, scheme, float_bytes)
    mtp = speculative is not None and "mtp" in (speculative.method or "")
    drafts = speculative.num_speculative_tokens if speculative is not None and mtp else 0
    context = ask.context or min(model.max_model_len, DEFAULT_CONTEXT)
    setup = Setup(
        tp=args.tp,
        dp=args.dp,
        pp=args.pp,
        expert_parallel=args.expert_parallel,
        weight_bytes=fmt.bytes_per_weight,
        float_bytes=float_bytes,
        int8_compute=fmt.int8_compute,
        kv_bytes_per_token=kv.bytes,
        context=context,
        draft_tokens=drafts,
    )
    rows = [decode_row(shape, chip, setup, b) for b in ask.batches]
    prefill = prefill_bound(shape, chip, setup)
    ep = f", EP over {setup.moe_group}" if args.expert_parallel and shape.experts else ""
    context_from = "--context" if ask.context else f"default, at most {DEFAULT_CONTEXT}"
    items = [
        CheckItem("chip", PASS, _chip_line(chip)),
        CheckItem(
            "setup",
            PASS,
            f"tp {args.tp} x dp {args.dp} x pp {args.pp} = {setup.devices} devices{ep}"
            f"; weights {fmt.label}; KV {kv.bytes} B a token a rank; context {context} "
            f"tokens ({context_from})"
            + (f"; MTP {drafts} draft(s) a step, all counted accepted" if drafts else ""),
        ),
        *(CheckItem(f"decode bs={r.batch}", PASS, _row_line(r, chip)) for r in rows),
        CheckItem(
            "prefill",
            PASS,
            f"{prefill.tokens_per_s:,.0f} tok/s over {setup.devices} devices at "
            f"{context}-token prompts, bound by {prefill.binds.value} "
            f"({prefill.flops_per_token / 1e9:,.1f} GFLOP a token)",
        ),
        CheckItem("note", PASS, NOTE),
    ]
    return items, {
        "chip": _chip_data(chip),
        "setup": attrs.asdict(setup),
        "weights": fmt.label,
        "kv_formula": kv.formula,
        "decode": [_row_data(r) for r in rows],
        "prefill": {
            "tokens_per_s": prefill.tokens_per_s,
            "binds": prefill.binds.value,
            "flops_per_token": prefill.flops_per_token,
            "link_bytes_per_token_per_rank": prefill.link_bytes_per_token,
        },
        "note": NOTE,
    }


def _chip_line(chip: ChipFigures) -> str:
    assumed = sum(not f.published for f in chip.figures().values())
    return (
        f"{chip.name}: HBM {chip.hbm_bytes.value / 1e9:.0f} GB at "
        f"{chip.hbm_bytes_per_s.value / 1e12:.1f} TB/s, cube "
        f"{chip.cube_bf16_flops.value / 1e12:.0f} TFLOPS bf16 / "
        f"{chip.cube_int8_ops.value / 1e12:.0f} TOPS int8, HCCS "
        f"{chip.scale_up_bytes_per_s.value / 1e9:.0f} GB/s, RoCE "
        f"{chip.scale_out_bytes_per_s.value / 1e9:.0f} GB/s a device one way "
        f"({assumed} of 7 figures assumed; sources in --json)"
    )


def _row_line(r: DecodeRow, chip: ChipFigures) -> str:
    fit = "" if r.fits else f"; does not fit {chip.hbm_bytes.value / 1e9:.0f} GB"
    return (
        f"{r.tokens_per_s:,.0f} tok/s ({r.tokens_per_s_per_device:,.1f} a device), step >= "
        f"{r.step_s * 1e3:.2f} ms, bound by {r.binds.value}: HBM "
        f"{(r.weight_bytes + r.kv_bytes) / 1e9:.2f} GB {r.hbm_s * 1e3:.2f} ms, "
        f"{r.link} {r.link_bytes / 1e6:.1f} MB {r.link_s * 1e3:.2f} ms, compute "
        f"{r.compute_s * 1e3:.2f} ms{fit}"
    )


def _row_data(r: DecodeRow) -> dict[str, Any]:
    return {**attrs.asdict(r), "step_s": r.step_s, "binds": r.binds.value}


def _chip_data(chip: ChipFigures) -> dict[str, Any]:
    return {
        "family": chip.family.value,
        "name": chip.name,
        "figures": {name: attrs.asdict(f) for name, f in chip.figures().items()},
    }
