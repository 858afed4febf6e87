"""The reference plugin's rules for optional features against the deployment: profiling
chunks, xlite, sparse KV offload, scheduler extensions and MC2 communication.

Each follows vllm_ascend/ascend_config.py (AscendConfig.derive_and_validate,
_validate_mc2_comm_alg, XliteGraphConfig._validate_preconditions,
SparseKVOffloadConfig._validate_preconditions) or vllm_ascend/platform.py
(_check_ascend_config: scheduler extensions against the KV-transfer role).
"""

from __future__ import annotations

from collections.abc import Callable

from ascend_core.ascend_config import AscendConfig
from ascend_core.deployment import Deployment, KvTransferRole
from ascend_core.errors import ConfigError
from ports.device import ChipFamily, DeviceKind

_ROOT = "additional_config"

Rule = Callable[[Deployment, AscendConfig], list[ConfigError]]


def _profiling_chunk(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    chunk = config.reference_section("scheduler_config.profiling_chunk_config")
    if chunk.get("enabled") and deployment.parallel.pp <= 1:
        return [
            ConfigError(
                f"{_ROOT}.scheduler_config.profiling_chunk_config needs pipeline parallelism, "
                f"and pipeline_parallel_size={deployment.parallel.pp}.",
                "set --pipeline-parallel-size above 1, or turn profiling_chunk_config off",
            )
        ]
    return []


def _xlite(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    if not config.reference_section("xlite_graph_config").get("enabled"):
        return []
    errors = []
    spec = deployment.speculative
    if spec.method is not None and spec.num_speculative_tokens != 1:
        errors.append(
            ConfigError(
                f"{_ROOT}.xlite_graph_config.enabled supports speculative decoding only with "
                f"num_speculative_tokens=1, got {spec.num_speculative_tokens}.",
                "set num_speculative_tokens to 1, or turn xlite off",
            )
        )
    if deployment.parallel.pp > 1:
        errors.append(
            ConfigError(
                f"{_ROOT}.xlite_graph_config.enabled is not compatible with pipeline "
                f"parallelism (pipeline_parallel_size={deployment.parallel.pp}).",
                "set pipeline_parallel_size to 1, or turn xlite off",
            )
        )
    return errors


def _sparse_offload(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    offload = config.reference_section("sparse_kv_offload_config")
    if not offload.get("enabled"):
        return []
    where = f"{_ROOT}.sparse_kv_offload_config.enabled"
    model, p = deployment.model, deployment.parallel
    problems = []
    if model.compressed_attention:
        problems.append(("does not support compressed attention", "turn it off"))
    if not model.use_sparse:
        problems.append(("needs a sparse-attention model (an indexer)", "turn it off"))
    if p.pcp * p.dcp > 1:
        problems.append(("does not support context parallelism", "set pcp and dcp to 1"))
    if p.pp > 1:
        problems.append(("does not support pipeline parallelism", "set pp to 1"))
    consumer = deployment.kv_transfer_role is KvTransferRole.CONSUMER
    if not offload.get("keep_device_kv_cache") and not consumer:
        problems.append(
            (
                "runs only on a kv_consumer (decode) node unless keep_device_kv_cache is set",
                "use it on the decode node, or set keep_device_kv_cache for debugging",
            )
        )
    return [ConfigError(f"{where} {what} ({model.architecture}).", hint) for what, hint in problems]


def _scheduler_roles(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    sched = "scheduler_config"
    role = deployment.kv_transfer_role
    shown = "no KV transfer" if role is None else f"kv_role={role.value}"
    errors = []
    balance = config.reference_value(f"{sched}.enable_balance_scheduling", False)
    if balance and role not in (None, KvTransferRole.BOTH):
        errors.append(
            ConfigError(
                f"{_ROOT}.{sched}.enable_balance_scheduling works only without prefill/decode "
                f"disaggregation (kv_role=kv_both or no kv_transfer_config), got {shown}.",
                "turn balance scheduling off on disaggregated instances",
            )
        )
    if config.reference_section(f"{sched}.short_request_first_config").get("enabled") and (
        role is KvTransferRole.CONSUMER
    ):
        errors.append(
            ConfigError(
                f"{_ROOT}.{sched}.short_request_first_config runs on prefill or mixed nodes, "
                "not on a kv_consumer (decode) node.",
                "turn it off on the decode instance",
            )
        )
    if config.reference_section(f"{sched}.dyntra_lb_config").get("enabled"):
        if role is not KvTransferRole.CONSUMER:
            errors.append(
                ConfigError(
                    f"{_ROOT}.{sched}.dyntra_lb_config runs only on a kv_consumer (decode) "
                    f"node, got {shown}.",
                    "use it on the decode instance of a disaggregated deployment",
                )
            )
        if deployment.parallel.dp <= 1:
            errors.append(
                ConfigError(
                    f"{_ROOT}.{sched}.dyntra_lb_config balances data-parallel ranks and "
                    f"data_parallel_size={deployment.parallel.dp}.",
                    "use data_parallel_size > 1, or turn it off",
                )
            )
    recompute = config.reference_value(f"{sched}.recompute_scheduler_enable", False)
    if recompute and role not in (KvTransferRole.CONSUMER, KvTransferRole.PRODUCER):
        errors.append(
            ConfigError(
                f"{_ROOT}.{sched}.recompute_scheduler_enable works only on a kv_consumer "
                f"(decode) node, got {shown}.",
                "turn it off outside prefill/decode disaggregation",
            )
        )
    return errors


def _mc2_comm_alg(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    """vllm_ascend/ascend_config.py _validate_mc2_comm_alg against the hardware profile
    (device/hardware_profile.py: MC2_FULLMESH_V2_COMM on A3 only, MC2_HIERARCHY_COMM on the
    standard A2/A3 profiles)."""
    alg = config.reference_value("mc2_comm_alg", "")
    if config.reference_value("enable_mc2_hierarchy_comm", False):
        alg = "hierarchy"
    chip = deployment.chip_family
    if deployment.device_kind is DeviceKind.CPU or not alg:
        return []
    allowed = {"fullmesh_v2": (ChipFamily.A3,), "hierarchy": (ChipFamily.A2, ChipFamily.A3)}
    families = allowed.get(str(alg))
    if families is None or chip in families:
        return []
    return [
        ConfigError(
            f'{_ROOT}.mc2_comm_alg="{alg}" is not supported on {chip.value} (only on '
            f"{', '.join(f.value for f in families)}).",
            "choose another mc2_comm_alg for this chip, or remove the key",
        )
    ]


def _sparse_offload_topk(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    offload = config.reference_section("sparse_kv_offload_config")
    topk, size = deployment.model.index_topk, offload.get("topk_buffer_size", 4096)
    if offload.get("enabled") and topk is not None and isinstance(size, int) and size < topk:
        return [
            ConfigError(
                f"{_ROOT}.sparse_kv_offload_config.topk_buffer_size={size} is smaller than "
                f"the model's index_topk={topk}.",
                f"set topk_buffer_size to {topk} or more",
            )
        ]
    return []


def _fused_mc2_minimax(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    """ascend_config.py derive_and_validate: MiniMax M3 does not support fused MC2 (the
    reference reads 2 as 1 before this check)."""
    fused = config.reference_value("enable_fused_mc2", 0)
    if fused and deployment.model.architecture.startswith("MiniMaxM3"):
        return [
            ConfigError(
                f"{_ROOT}.enable_fused_mc2={fused} is not supported by "
                f"{deployment.model.architecture}.",
                "set enable_fused_mc2 to 0",
            )
        ]
    return []


FEATURE_RULES: tuple[Rule, ...] = (
    _profiling_chunk,
    _xlite,
    _sparse_offload,
    _scheduler_roles,
    _mc2_comm_alg,
    _sparse_offload_topk,
    _fused_mc2_minimax,
)
