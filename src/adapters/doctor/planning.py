"""`ascend-doctor plan`: what the plugin will do with these `vllm serve` arguments, before
any weight is loaded. Every decision is the core's; this module only gathers inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from attrs import frozen

from adapters.doctor.report import Report, Section
from adapters.doctor.serve_args import ServeArgs
from ascend_core.attention import AttentionRequest, select_attention_backend
from ascend_core.deployment import (
    CacheSettings,
    CompilationSettings,
    CompileMode,
    Deployment,
    GraphMode,
    KvTransferRole,
    ModelFacts,
    ParallelSettings,
    SpeculativeSettings,
)
from ascend_core.env_registry import TRAINING_CONSISTENCY, read_env
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.memory_budget import (
    NOMINAL_DEVICE_MEMORY,
    MemoryBudget,
    MemoryDemand,
    Reserve,
    Scaling,
    dtype_bytes,
    estimate_reserve,
    exact_bytes,
    format_bytes,
    kv_bytes_per_token,
    plan_budget,
    weights_size,
)
from ascend_core.model_facts import model_facts_from_config
from ascend_core.patches import REGISTRY, context_for, plan_patches
from ascend_core.plan import ConfigPlan, plan_config
from ascend_core.preflight import CheckItem, CheckStatus
from ascend_core.quantization import QuantDetection, QuantMethod, detect_quantization
from ports.device import ChipFamily, DeviceKind, ProbeResult
from ports.environment import Environment
from ports.model_files import ModelFiles
from ports.upstream import Upstream

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
# vLLM's chunked-prefill token budget when --max-num-batched-tokens is not given.
DEFAULT_BATCHED_TOKENS = 8192
# The block size the budget assumes when neither the user nor the plan sets one.
DEFAULT_BLOCK_SIZE = 128


@frozen
class Target:
    """The devices the plan is for, and where the numbers came from."""

    kind: DeviceKind
    chip_family: ChipFamily
    memory_bytes: int
    device_count: int | None
    source: str


def choose_target(
    probe: ProbeResult,
    env: Environment,
    chip: ChipFamily | None = None,
    memory_bytes: int | None = None,
    host_memory_bytes: int | None = None,
) -> Target:
    """The probed NPU when there is one; else the chip and memory asked for, or an A2."""
    if (env.get("VLLM_ASCEND_DEVICE") or "").strip().lower() == "cpu":
        mem = memory_bytes or host_memory_bytes or 0
        return Target(DeviceKind.CPU, ChipFamily.HOST, mem, 1, "VLLM_ASCEND_DEVICE=cpu: host")
    facts = probe.facts if probe.available else None
    if facts is not None and chip is None:
        return Target(
            DeviceKind.NPU,
            facts.chip_family,
            memory_bytes or facts.memory_bytes_per_device,
            facts.device_count,
            f"probed: {facts.device_count} x {facts.device_name or facts.chip_family.value}",
        )
    family = chip or ChipFamily.A2
    nominal = NOMINAL_DEVICE_MEMORY.get(family, NOMINAL_DEVICE_MEMORY[ChipFamily.A2])
    where = "no NPU here" if facts is None else "chip given"
    if memory_bytes:
        return Target(DeviceKind.NPU, family, memory_bytes, None, f"{where}; --device-memory")
    return Target(
        DeviceKind.NPU,
        family,
        nominal,
        None,
        f"{where}; nominal {format_bytes(nominal)} of an {family.value} device "
        "(--chip/--device-memory to change)",
    )


def _enum(cls: type[Any], value: Any) -> Any:
    return cls[value] if isinstance(value, str) and value in cls.__members__ else None


def build_deployment(
    args: ServeArgs,
    model: ModelFacts,
    target: Target,
    env: Environment,
    detected: QuantMethod = QuantMethod.NONE,
) -> Deployment:
    """The Deployment the vLLM adapter would build, from the arguments as given."""
    comp = args.compilation
    role = args.kv_transfer.get("kv_role")
    return Deployment(
        model=model,
        chip_family=target.chip_family,
        device_kind=target.kind,
        parallel=ParallelSettings(
            tp=args.tp,
            pp=args.pp,
            dp=args.dp,
            pcp=args.pcp,
            dcp=args.dcp,
            expert_parallel=args.expert_parallel,
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
        additional_config=args.additional_config,
        user_quantization=args.quantization,
        detected_quantization=detected,
        launch_blocking=env.get("ASCEND_LAUNCH_BLOCKING") == "1",
        npu_alloc_conf=env.get("PYTORCH_NPU_ALLOC_CONF"),
    )


def _errors(error: AscendError) -> tuple[AscendError, ...]:
    return error.errors if isinstance(error, PlanErrors) else (error,)


def _failed(name: str, error: AscendError) -> list[CheckItem]:
    return [CheckItem(name, FAIL, e.what, e.hint) for e in _errors(error)]


def plan_report(
    args: ServeArgs,
    files: ModelFiles,
    env: Environment,
    upstream: Upstream,
    target: Target,
) -> Report:
    """Every section of `plan`; a failing section does not stop the others."""
    sections: list[Section] = []
    data: dict[str, Any] = {"model": files.location, "target": attrs.asdict(target)}
    config = files.read_json("config.json")
    if config is None:
        item = CheckItem(
            "config.json",
            FAIL,
            f"{files.location} has no config.json",
            "pass a local model directory (download it first, e.g. `hf download <id> "
            "--local-dir <dir>`)",
        )
        return Report("plan", [Section("model", [item])], data)
    if not isinstance(config, Mapping):
        item = CheckItem(
            "config.json",
            FAIL,
            f"{files.location}/config.json holds a {type(config).__name__}, not a JSON object",
            "use the config.json the model was published with",
        )
        return Report("plan", [Section("model", [item])], data)
    try:
        model = model_facts_from_config(
            config, f"{files.location}/config.json", args.dtype, args.max_model_len
        )
    except AscendError as error:
        return Report("plan", [Section("model", _failed("config.json", error))], data)
    sections.append(Section("model", _model_items(model, args, target)))

    quant_items, detection = _quantization(files, args)
    detected = detection.files_say if detection is not None else QuantMethod.NONE
    deployment = build_deployment(args, model, target, env, detected)
    plan_items, plan = _config_plan(deployment)
    sections.append(Section("config plan", plan_items))
    sections.append(Section("attention", _attention(model, target, env)))
    sections.append(Section("quantization", quant_items))
    patch_items, patch_data = _patches(deployment, upstream)
    sections.append(Section("patches", patch_items))
    block_size = (plan.block_size if plan is not None else None) or args.block_size
    memory_items, memory_data = _memory(args, files, model, target, block_size, detection)
    sections.append(Section("memory budget", memory_items))
    data.update(
        {
            "plan": plan.describe() if plan is not None else None,
            "changes": [c.describe() for c in plan.changes] if plan is not None else [],
            "patches": patch_data,
            "memory": memory_data,
        }
    )
    return Report("plan", sections, data)


def _model_items(model: ModelFacts, args: ServeArgs, target: Target) -> list[CheckItem]:
    attention = (
        f"MLA (kv_lora_rank {model.mla.kv_lora_rank}, qk_rope_head_dim "
        f"{model.mla.qk_rope_head_dim})"
        if model.mla is not None
        else f"{model.num_attention_heads} heads, {model.num_kv_heads} KV heads, "
        f"head_dim {model.head_size}"
    )
    items = [
        CheckItem(
            "model",
            PASS,
            f"{model.architecture} ({model.model_type}): {model.num_layers} layers, hidden "
            f"{model.hidden_size}, {attention}{', MoE' if model.is_moe else ''}, {model.dtype}",
        ),
        CheckItem(
            "max_model_len",
            PASS,
            f"{model.max_model_len}"
            + (" (--max-model-len)" if args.max_model_len else " (from config.json)"),
        ),
        CheckItem(
            "target", PASS, f"{target.kind.value} {target.chip_family.value}: {target.source}"
        ),
    ]
    devices = args.tp * args.pp * args.dp * args.pcp
    if target.device_count is not None and devices > target.device_count * args.nnodes:
        items.append(
            CheckItem(
                "devices",
                FAIL,
                f"tp x pp x dp x pcp = {devices} devices, but {target.device_count} per node "
                f"x {args.nnodes} node(s) are visible",
                "lower the parallel sizes, or add nodes (--nnodes)",
            )
        )
    return items


def _config_plan(deployment: Deployment) -> tuple[list[CheckItem], ConfigPlan | None]:
    try:
        plan = plan_config(deployment)
    except AscendError as error:
        return _failed("config plan", error), None
    items = [
        CheckItem(
            "decisions",
            PASS,
            f"worker {plan.worker_kind.name}, block_size {plan.block_size}, graph "
            f"{plan.graph_mode.name}, compile {_short(plan.compile_mode)}",
        )
    ]
    items += [
        CheckItem(c.field, PASS, f"{_short(c.old)} -> {_short(c.new)}: {c.reason}")
        for c in plan.changes
    ]
    items += [CheckItem("warning", WARN, w) for w in plan.warnings]
    items += [CheckItem("error", FAIL, e.what, e.hint) for e in plan.errors]
    return items, plan


def _short(value: object) -> str:
    text = getattr(value, "name", None) or ("unset" if value is None else str(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _attention(model: ModelFacts, target: Target, env: Environment) -> list[CheckItem]:
    try:
        consistency = read_env(env).get(TRAINING_CONSISTENCY)
    except AscendError:
        consistency = False  # `check` reports the bad value
    request = AttentionRequest(
        use_mla=model.use_mla,
        use_sparse=model.use_sparse,
        chip_family=target.chip_family,
        device_kind=target.kind,
        use_compressed=model.compressed_attention,
        training_consistency=consistency,
        model=model.architecture,
    )
    try:
        choice = select_attention_backend(request)
    except AscendError as error:
        return _failed("backend", error)
    return [CheckItem("backend", PASS, f"{choice.kind.value}: {choice.reason}")]


def _quantization(
    files: ModelFiles, args: ServeArgs
) -> tuple[list[CheckItem], QuantDetection | None]:
    try:
        detection = detect_quantization(files, args.quantization)
    except AscendError as error:
        return _failed("method", error), None
    items = [
        CheckItem(
            "method",
            PASS,
            f"{detection.method.value}, {detection.decided_by.value}: {detection.evidence}",
        )
    ]
    items += [CheckItem("warning", WARN, w) for w in detection.warnings]
    return items, detection


def _patches(
    deployment: Deployment, upstream: Upstream
) -> tuple[list[CheckItem], Mapping[str, Any]]:
    version = upstream.version("vllm")
    if version is None:
        item = CheckItem("patches", FAIL, "vLLM is not installed", "pip install vllm==0.33.0")
        return [item], {}
    context = context_for(deployment)
    try:
        patches = plan_patches(REGISTRY, context, version)
    except AscendError as error:
        return _failed("patches", error), {}
    items = [CheckItem(p.spec.id, PASS, p.why) for p in patches.to_apply]
    items.append(
        CheckItem(
            "skipped",
            PASS,
            f"{len(patches.skipped)} registered patch(es) not needed here"
            + (": " + ", ".join(s.spec.id for s in patches.skipped) if patches.skipped else ""),
        )
    )
    data = {
        "vllm_version": version,
        "apply": [{"id": p.spec.id, "why": p.why} for p in patches.to_apply],
        "skip": [{"id": s.spec.id, "cause": s.cause.value, "why": s.why} for s in patches.skipped],
    }
    return items, data


def _memory(
    args: ServeArgs,
    files: ModelFiles,
    model: ModelFacts,
    target: Target,
    block_size: int | None,
    detection: QuantDetection | None,
) -> tuple[list[CheckItem], Mapping[str, Any]]:
    if target.memory_bytes <= 0:
        return [CheckItem("budget", WARN, "device memory unknown", "pass --device-memory")], {}
    try:
        headers = files.tensor_headers()
        weights = weights_size(headers, model.dtype)
        kv_dtype = dtype_bytes(args.kv_cache_dtype, model.dtype)
    except AscendError as error:
        return _failed("budget", error), {}
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
    per_device = weights.total_bytes // shards
    kv = kv_bytes_per_token(model, kv_dtype, args.tp, args.pp)
    reserve = estimate_reserve(
        model,
        args.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS,
        dtype_bytes(model.dtype),
        args.tp,
    )
    block = block_size or DEFAULT_BLOCK_SIZE
    quantized = weights.quantized or (
        detection is not None and detection.method is not QuantMethod.NONE
    )
    explicit = args.kv_cache_memory_bytes
    if explicit:
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
            f"{format_bytes(per_device)} per device (/ tp x pp = {shards})",
        ),
        CheckItem("KV per token", PASS, f"{kv.bytes} B = {kv.formula}"),
        CheckItem("reserve", PASS, f"{reserve.describe()} (estimate)"),
    ]
    if explicit:
        items.append(_explicit_room(explicit, target.memory_bytes, per_device, reserve))
    items.append(_budget_item(budget))
    return items, _memory_data(budget, weights.total_bytes, kv.formula, reserve.describe())


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
