"""The plan's inputs: the model directory's facts and the target devices."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from adapters.doctor.plan.items import FAIL, PASS, failed
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import ModelFacts
from ascend_core.device_selection import DeviceRequest
from ascend_core.errors import AscendError
from ascend_core.memory_budget import NOMINAL_DEVICE_MEMORY, format_bytes
from ascend_core.model_facts import max_model_len_error, model_facts_from_config
from ascend_core.preflight import CheckItem, missing_model_error, names_local_path
from ports.device import ChipFamily, DeviceKind, ProbeResult
from ports.environment import Environment
from ports.model_files import ModelFiles
from ports.runtime import MemoryInfo


@frozen
class Target:
    """The devices the plan is for, and where the numbers came from."""

    kind: DeviceKind
    chip_family: ChipFamily
    memory_bytes: int
    # Devices per node; None when unknown or unbounded (the host device: each TP/PP/DP
    # rank is a worker process on the same CPUs, as `vllm serve` starts them).
    device_count: int | None
    source: str
    # The host device: memory the OS has available now (the runtime port's free bytes),
    # before the weights load; None when unknown or not the host.
    available_bytes: int | None = None


def choose_target(
    probe: ProbeResult,
    device: DeviceRequest,
    chip: ChipFamily | None = None,
    memory_bytes: int | None = None,
    host_memory: MemoryInfo | None = None,
) -> Target:
    """The probed NPU when there is one; else the chip and memory asked for, or an A2.

    host_memory: the host's memory through the runtime port (VLLM_ASCEND_DEVICE=cpu).
    """
    if device is DeviceRequest.CPU:
        mem = memory_bytes or (host_memory.total_bytes if host_memory else 0)
        available = host_memory.free_bytes if host_memory else None
        return Target(
            DeviceKind.CPU,
            ChipFamily.HOST,
            mem,
            None,
            "VLLM_ASCEND_DEVICE=cpu: host (every rank a worker process on this machine's CPUs)",
            available,
        )
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


def read_model(
    files: ModelFiles, args: ServeArgs, env: Environment
) -> ModelFacts | list[CheckItem]:
    """The model's facts from its config.json, or the items saying why they cannot be read."""
    if not files.exists():
        if names_local_path(args.model):
            error = missing_model_error(args.model)
            return [CheckItem("model", FAIL, error.what, error.hint)]
        return [
            CheckItem(
                "model",
                FAIL,
                f"{files.location} does not exist",
                "pass the local directory that holds the model's config.json and weights "
                "(download it first, e.g. `hf download <id> --local-dir <dir>`)",
            )
        ]
    config = files.read_json("config.json")
    if config is None:
        return [
            CheckItem(
                "config.json",
                FAIL,
                f"{files.location} has no config.json",
                "pass a local model directory (download it first, e.g. `hf download <id> "
                "--local-dir <dir>`)",
            )
        ]
    if not isinstance(config, Mapping):
        return [
            CheckItem(
                "config.json",
                FAIL,
                f"{files.location}/config.json holds a {type(config).__name__}, not a JSON object",
                "use the config.json the model was published with",
            )
        ]
    source = f"{files.location}/config.json"
    allow_long = (env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") or "").strip() in ("1", "true")
    too_long = max_model_len_error(config, args.max_model_len, allow_long, source)
    if too_long is not None:
        return failed("max_model_len", too_long)
    try:
        return model_facts_from_config(config, source, args.dtype, args.max_model_len)
    except AscendError as error:
        return failed("config.json", error)


def model_items(model: ModelFacts, args: ServeArgs, target: Target) -> list[CheckItem]:
    """The `model` section: what the model is, its length, the target and the device count."""
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
    # On Ray the cluster's nodes hold the workers: the Ray section checks them instead.
    on_ray = args.distributed_executor_backend == "ray"
    visible = None if target.device_count is None else target.device_count * args.nnodes
    if not on_ray and visible is not None and devices > visible:
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
