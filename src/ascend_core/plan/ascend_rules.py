"""The reference plugin's `additional_config` rules that need the deployment, and the warnings
for reference keys this build accepts without acting on them.

Each rule follows vllm_ascend/ascend_config.py: FinegrainedTPConfig._validate_preconditions,
AscendConfig.derive_and_validate (enable_kv_nz, mlapo_keep_prefill_weights,
enable_reduce_sample, enable_force_eplb, profiling_chunk_config), EplbConfig._validate_config
(expert_map_path), XliteGraphConfig._validate_preconditions and
SparseKVOffloadConfig._validate_preconditions, and vllm_ascend/platform.py _check_ascend_config
(scheduler extensions against the KV-transfer role). The reference raises bare AssertionError /
RuntimeError one at a time; here each is a ConfigError with a hint, all in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ascend_core.ascend_config import AscendConfig
from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS
from ascend_core.deployment import Deployment, KvTransferRole
from ascend_core.errors import ConfigError
from ports.device import ChipFamily, DeviceKind

_ROOT = "additional_config"
_TP = f"{_ROOT}.finegrained_tp_config"

Rule = Callable[[Deployment, AscendConfig], list[ConfigError]]


def _section(config: AscendConfig, path: str) -> Mapping[str, object]:
    value = config.reference_value(path, {})
    return value if isinstance(value, Mapping) else {}


def _finegrained_tp(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    sizes = {name: size for name, size in config.finegrained_tp_config.sizes().items() if size}
    if not sizes:
        return []
    errors = []
    if not deployment.model.is_moe:
        # Dense models run each DP rank as its own engine: there is no DP group to shard over.
        errors.append(
            ConfigError(
                f"{_TP} ({', '.join(f'{k}={v}' for k, v in sizes.items())}) on "
                f"{deployment.model.architecture}, a dense model: fine-grained tensor "
                "parallelism shards across data-parallel ranks, which only MoE deployments "
                "keep as one group.",
                "remove finegrained_tp_config for dense models",
            )
        )
    oproj = sizes.get("oproj_tensor_parallel_size")
    if oproj:
        where = f"{_TP}.oproj_tensor_parallel_size={oproj}"
        if deployment.parallel.tp > 1:
            errors.append(
                ConfigError(
                    f"{where} needs tensor_parallel_size=1, got {deployment.parallel.tp}: the "
                    "o_proj shards and the attention output would be split on different axes.",
                    "set tensor_parallel_size to 1 (use data parallelism), or oproj to 0",
                )
            )
        if deployment.compilation.enforce_eager:
            errors.append(
                ConfigError(
                    f"{where} works only with graph capture, and enforce_eager is set.",
                    "drop --enforce-eager, or set oproj_tensor_parallel_size to 0",
                )
            )
        if deployment.kv_transfer_role is not KvTransferRole.CONSUMER:
            errors.append(
                ConfigError(
                    f"{where} is only supported on the decode node of prefill/decode "
                    "disaggregation (kv_role=kv_consumer).",
                    "use it on a kv_consumer instance only, or set it to 0",
                )
            )
    return errors


def _expert_map(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    path = config.eplb_config.expert_map_path
    if path is None:
        return []
    if not path.endswith(".json"):
        return [
            ConfigError(
                f"{_ROOT}.eplb_config.expert_map_path={path!r} is not a .json file.",
                "give the JSON expert map the EPLB tools wrote",
            )
        ]
    if deployment.readable_files.get(path) is False:
        return [
            ConfigError(
                f"{_ROOT}.eplb_config.expert_map_path={path!r} does not exist or cannot be read.",
                "check the path (it is read on every node), or remove the key",
            )
        ]
    return []


def _kv_nz(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    if not config.enable_kv_nz:
        return []
    model = deployment.model
    errors = []
    if not model.use_mla or model.use_sparse:
        errors.append(
            ConfigError(
                f"{_ROOT}.enable_kv_nz=true on {model.architecture}: the NZ KV cache exists "
                "only for dense MLA attention (not MHA/GQA, not sparse MLA).",
                "remove enable_kv_nz for this model",
            )
        )
    if deployment.kv_transfer_role is not KvTransferRole.CONSUMER:
        role = deployment.kv_transfer_role
        errors.append(
            ConfigError(
                f"{_ROOT}.enable_kv_nz=true needs the decode node of prefill/decode "
                f"disaggregation (kv_role=kv_consumer), got "
                f"{'no KV transfer' if role is None else 'kv_role=' + role.value}.",
                "use enable_kv_nz on the kv_consumer instance only",
            )
        )
    return errors


def _mlapo_keep(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    if config.reference_value("mlapo_keep_prefill_weights", False) and not deployment.model.use_mla:
        return [
            ConfigError(
                f"{_ROOT}.mlapo_keep_prefill_weights=true on {deployment.model.architecture}, "
                "which does not use MLA: only MLA attention frees its prefill weights.",
                "remove mlapo_keep_prefill_weights",
            )
        ]
    return []


def _reduce_sample(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    producer = deployment.kv_transfer_role is KvTransferRole.PRODUCER
    if config.reference_value("enable_reduce_sample", False) and producer:
        return [
            ConfigError(
                f"{_ROOT}.enable_reduce_sample=true is not supported on a KV producer "
                "(prefill/decode disaggregation).",
                "remove enable_reduce_sample on this instance",
            )
        ]
    return []


def _force_eplb(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    forced = config.reference_value("enable_force_eplb", False)
    if forced and config.eplb_config.dynamic_eplb and deployment.model.is_moe:
        return [
            ConfigError(
                f"{_ROOT}.enable_force_eplb=true cannot be mixed with "
                f"{_ROOT}.eplb_config.dynamic_eplb=true.",
                "keep one of them",
            )
        ]
    return []


def _profiling_chunk(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    chunk = _section(config, "scheduler_config.profiling_chunk_config")
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
    if not _section(config, "xlite_graph_config").get("enabled"):
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
    offload = _section(config, "sparse_kv_offload_config")
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
    if _section(config, f"{sched}.short_request_first_config").get("enabled") and (
        role is KvTransferRole.CONSUMER
    ):
        errors.append(
            ConfigError(
                f"{_ROOT}.{sched}.short_request_first_config runs on prefill or mixed nodes, "
                "not on a kv_consumer (decode) node.",
                "turn it off on the decode instance",
            )
        )
    if _section(config, f"{sched}.dyntra_lb_config").get("enabled"):
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
    offload = _section(config, "sparse_kv_offload_config")
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


RULES: tuple[Rule, ...] = (
    _finegrained_tp,
    _expert_map,
    _kv_nz,
    _mlapo_keep,
    _reduce_sample,
    _force_eplb,
    _profiling_chunk,
    _xlite,
    _sparse_offload,
    _scheduler_roles,
    _mc2_comm_alg,
    _sparse_offload_topk,
)


def deployment_rule_errors(deployment: Deployment, config: AscendConfig) -> list[ConfigError]:
    """Every reference rule between additional_config and the deployment that is broken."""
    return [error for rule in RULES for error in rule(deployment, config)]


def reference_key_warnings(config: AscendConfig) -> list[str]:
    """One warning per vllm-ascend key given that this build accepts but does not act on."""
    warnings = []
    for path in config.reference:
        if not config.given(path):
            continue  # set by a VLLM_ASCEND_* fallback: that variable warns for itself
        key = REFERENCE_KEYS[path]
        instead = (
            f" vllm-ascend itself deprecates it for {key.deprecated}." if key.deprecated else ""
        )
        warnings.append(
            f"{_ROOT}.{path} is a vllm-ascend setting this build validates but does not act "
            f"on: it has no effect here.{instead}"
        )
    return warnings
