"""The `config plan` section: the Deployment from the arguments, and what the core plans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from adapters.doctor.plan.batch import serve_max_num_batched_tokens, serve_max_num_seqs
from adapters.doctor.plan.items import FAIL, PASS, WARN, failed
from adapters.doctor.plan.model import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core import kv_transfer
from ascend_core.deployment import (
    BatchSettings,
    CacheSettings,
    CompilationSettings,
    CompileMode,
    Deployment,
    DraftFacts,
    GraphMode,
    KvTransferRole,
    ModelFacts,
    ParallelSettings,
    SpeculativeSettings,
)
from ascend_core.deployment_builder import Requested
from ascend_core.deployment_builder import build_deployment as core_build_deployment
from ascend_core.errors import AscendError
from ascend_core.model_facts import text_config
from ascend_core.moe.eplb import eplb_settings_from
from ascend_core.plan import ConfigPlan, ModelRunner, plan_config
from ascend_core.plan.speculative import DRAFT_MODEL_METHODS
from ascend_core.preflight import CheckItem
from ascend_core.profiling import settings_from_mapping
from ascend_core.quantization import QuantMethod
from ascend_core.quantization.export_layers import QuantizedLayers
from ascend_core.support import Supported, features_of, verdict
from ascend_core.support.quant_matrix import quant_verdict
from ascend_core.v2_kernels import kernels_summary
from ports.device import DeviceKind
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles


def _enum(cls: type[Any], value: Any) -> Any:
    return cls[value] if isinstance(value, str) and value in cls.__members__ else None


def requested(args: ServeArgs) -> Requested:
    """What the operator asked for, from the `vllm serve` arguments as vLLM parsed them."""
    comp = args.compilation
    role = args.kv_transfer.get("kv_role")
    return Requested(
        parallel=ParallelSettings(
            tp=args.tp,
            pp=args.pp,
            dp=args.dp,
            pcp=args.pcp,
            dcp=args.dcp,
            expert_parallel=args.expert_parallel,
            # What vLLM's ParallelConfig holds when our hook runs: it turns the switch on
            # for every platform whose use_custom_allreduce() is False (Platform's default,
            # which ours keep), whatever the flag says; the plan decides from there.
            disable_custom_all_reduce=True,
            ray=args.distributed_executor_backend == "ray",
            eplb=eplb_settings_from(args.enable_eplb, args.eplb_config),
        ),
        speculative=SpeculativeSettings(
            method=args.speculative.get("method"),
            num_speculative_tokens=int(args.speculative.get("num_speculative_tokens") or 0),
        ),
        compilation=CompilationSettings(
            enforce_eager=args.enforce_eager,
            mode=_enum(CompileMode, comp.get("mode")),
            graph_mode=_enum(GraphMode, comp.get("cudagraph_mode")),
            capture_sizes=comp.get("cudagraph_capture_sizes"),
            custom_ops=tuple(comp.get("custom_ops") or ()),
            encoder_graphs=bool(comp.get("cudagraph_mm_encoder", False)),
        ),
        cache=CacheSettings(
            block_size=args.block_size,
            enable_prefix_caching=(
                True if args.enable_prefix_caching is None else args.enable_prefix_caching
            ),
            kv_cache_dtype=args.kv_cache_dtype,
            enable_sleep_mode=args.enable_sleep_mode,
        ),
        kv_transfer_role=KvTransferRole(role) if role else None,
        kv_transfer=kv_transfer.settings_from(args.kv_transfer) if role else None,
        additional_config=args.additional_config,
        user_quantization=args.quantization,
        lora=args.enable_lora,
        mm_off=modalities_off(args),
        profiler=settings_from_mapping(args.profiler),
    )


def serve_batch(args: ServeArgs, target: Target) -> BatchSettings:
    """The batch limits `vllm serve` runs with on this device (vLLM's defaults by memory
    when not given); unknown when the device's memory is."""
    if target.memory_bytes <= 0 and not (args.max_num_seqs and args.max_num_batched_tokens):
        return BatchSettings()
    return BatchSettings(
        max_num_seqs=serve_max_num_seqs(args, target.memory_bytes),
        max_num_batched_tokens=serve_max_num_batched_tokens(args, target.memory_bytes),
    )


def modalities_off(args: ServeArgs) -> frozenset[str]:
    """The modalities `vllm serve` takes none of, read as vLLM's MultiModalConfig reads
    --limit-mm-per-prompt (a count or {"count": n, ...}; unnamed ones 999) and
    --language-model-only (all 0). A text-only model's are ignored by the matrix."""
    modalities = ("image", "video", "audio")
    if args.language_model_only:
        return frozenset(modalities)

    def count(value: Any) -> Any:
        return value.get("count", 999) if isinstance(value, Mapping) else value

    return frozenset(
        m for m in modalities
        if m in args.limit_mm_per_prompt and count(args.limit_mm_per_prompt[m]) == 0
    )


def build_deployment(
    args: ServeArgs,
    model: ModelFacts,
    target: Target,
    env: Environment,
    detected: QuantMethod = QuantMethod.NONE,
    host_cpus: int | None = None,
    local_files: LocalFiles | None = None,
    quantized: tuple[QuantizedLayers, ...] = (),
) -> Deployment:
    """The Deployment `vllm serve` builds from these arguments: the core's one builder.

    `local_files` answers whether files additional_config names exist (the container's,
    as serving checks them); without it they are not checked."""
    return core_build_deployment(
        model,
        target.kind,
        target.chip_family,
        attrs.evolve(requested(args), batch=serve_batch(args, target)),
        env,
        detected,
        host_cpus,
        local_files,
        quantized,
    )


def speculative_facts(
    args: ServeArgs, files: ModelFiles, draft_files: ModelFiles | None = None
) -> SpeculativeSettings | None:
    """The speculative settings with what the model's config says about them (its
    vocabulary, its MTP layers) and, for a method with a draft model of its own, the
    draft's config (`draft_files`, speculative_config.model), as serving reads them; None
    without a method. A draft whose config.json cannot be read is left unknown."""
    method = args.speculative.get("method")
    if not method:
        return None
    config = text_config(files.read_json("config.json") or {})
    vocab = config.get("vocab_size")
    draft = None
    if str(method) in DRAFT_MODEL_METHODS and draft_files is not None:
        tp = int(args.speculative.get("draft_tensor_parallel_size") or args.tp)
        draft = draft_facts(draft_files.read_json("config.json") or {}, tp)
    return SpeculativeSettings(
        method=str(method),
        num_speculative_tokens=int(args.speculative.get("num_speculative_tokens") or 0),
        draft=draft,
        target_vocab_size=int(vocab) if isinstance(vocab, int) and vocab > 0 else None,
        mtp_layers=int(config.get("num_nextn_predict_layers") or 0),
    )


def draft_facts(config: Mapping[str, Any], tp: int) -> DraftFacts | None:
    """The draft model's facts from its config.json, read as vLLM's ModelConfig reads them
    for serving (adapters/vllm/engine/translate.py): KV heads default to the attention heads, the
    head size to hidden_size over heads. None when the config lacks its shape."""
    text = text_config(config)

    def number(key: str) -> int | None:
        value = text.get(key)
        return value if isinstance(value, int) and value > 0 else None

    heads, hidden, vocab = (number(k) for k in ("num_attention_heads", "hidden_size",
                                               "vocab_size"))
    if heads is None or vocab is None or (number("head_dim") is None and hidden is None):
        return None
    return DraftFacts(
        architecture=str((text.get("architectures") or ["?"])[0]),
        tp=max(1, tp),
        num_layers=number("num_hidden_layers") or 1,
        num_attention_heads=heads,
        num_kv_heads=number("num_key_value_heads") or heads,
        head_size=number("head_dim") or (hidden or 0) // heads,
        vocab_size=vocab,
        draft_vocab_size=number("draft_vocab_size"),
    )


def config_plan_items(deployment: Deployment) -> tuple[list[CheckItem], ConfigPlan | None]:
    """The core's decisions and changes for this deployment, or why it refused."""
    try:
        plan = plan_config(deployment)
    except AscendError as error:
        return failed("config plan", error), None
    graphs, how = engine_execution(plan, deployment.device_kind)
    items = [
        CheckItem(
            "decisions",
            PASS,
            f"worker {plan.worker_kind.name}, block_size {plan.block_size}, graph "
            f"{graphs.name}, compile {_short(plan.compile_mode)}",
        ),
        CheckItem("execution", PASS, how),
        CheckItem(
            "model runner", PASS, f"{plan.model_runner.name}: {plan.decisions.model_runner_reason}"
        ),
    ]
    if plan.model_runner is ModelRunner.V2:
        items.append(CheckItem("V2 kernels", PASS, kernels_summary()))
    # What serves each listed feature the deployment uses (refusals are plan.errors).
    for feature in features_of(deployment):
        served = verdict(feature, deployment.device_kind)
        if isinstance(served, Supported):
            items.append(CheckItem("serves", PASS, f"{feature.value}: {served.note}"))
    for group in deployment.quantized_layers:  # the quantization table's rows it uses
        how = quant_verdict(group.format, group.kind, deployment.device_kind)
        if isinstance(how, Supported):
            items.append(CheckItem(
                "serves", PASS,
                f"{group.format.value}, {group.kind.value} ({group.count}, first "
                f"{group.first}): {how.note}",
            ))
    items += [
        CheckItem(c.field, PASS, f"{_short(c.old)} -> {_short(c.new)}: {c.reason}")
        for c in plan.changes
    ]
    items += [CheckItem("warning", WARN, w) for w in plan.warnings]
    items += [CheckItem("error", FAIL, e.what, e.hint) for e in plan.errors]
    return items, plan


# The NPU worker lets vLLM capture the plan's graphs: DeviceWorker.compile_or_warm_up_model
# (adapters/vllm/worker/worker.py) calls the runner's capture_model (an integration test keeps
# the two in step); the plan only asks for the graphs the NPU serves (plan/graph.py).
NPU_WORKER_CAPTURES_GRAPHS = True


def engine_execution(plan: ConfigPlan, device: DeviceKind) -> tuple[GraphMode, str]:
    """The graph mode the engine will run, and in words how it executes the model and why.

    The plan's graph mode is what it asks vLLM for; what runs also depends on the worker
    capturing the graphs (the NPU worker does; the host captures none)."""
    compile_mode = plan.compile_mode
    named = _short(compile_mode) if compile_mode is not None else "unset: vLLM's VLLM_COMPILE"
    if compile_mode is CompileMode.NONE:
        compiled = "eager: every op runs as called, nothing compiled"
    elif device is DeviceKind.CPU:
        compiled = (
            f"compiled ({named}): one Dynamo trace, Inductor generates the "
            "host code around our custom ops; attention runs eagerly as one opaque op"
        )
    else:
        compiled = (
            f"compiled ({named}): Dynamo traces the model, vLLM's piecewise compiler "
            "splits it at attention, and the pieces run our NPU ops eagerly (compile "
            "backend eager)"
        )
    if plan.graph_mode is GraphMode.NONE:
        why = (
            "graph capture is an NPU feature"
            if device is DeviceKind.CPU
            else "the plan chose no graphs"
        )
        return GraphMode.NONE, f"{compiled}; no graphs: {why}"
    if device is DeviceKind.NPU and NPU_WORKER_CAPTURES_GRAPHS:
        return plan.graph_mode, f"{compiled}; NPU graphs captured: {plan.graph_mode.name}"
    return GraphMode.NONE, (
        f"{compiled}; no graphs: the plan asks vLLM for {plan.graph_mode.name}, but the "
        "NPU worker captures no graphs yet (it skips the runner's capture_model), so every "
        "step runs without a graph"
    )


def _short(value: object) -> str:
    text = getattr(value, "name", None) or ("unset" if value is None else str(value))
    return text if len(text) <= 60 else text[:57] + "..."
