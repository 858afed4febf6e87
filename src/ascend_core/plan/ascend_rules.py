"""The reference plugin's `additional_config` rules that need the deployment, and the warnings
for reference keys this build accepts without acting on them.

Each rule follows vllm_ascend/ascend_config.py: FinegrainedTPConfig._validate_preconditions,
AscendConfig.derive_and_validate (enable_kv_nz, mlapo_keep_prefill_weights,
enable_reduce_sample, enable_force_eplb) and EplbConfig._validate_config (expert_map_path);
the rules of optional features are in plan.ascend_feature_rules. The reference raises bare
AssertionError / RuntimeError one at a time; here each is a ConfigError with a hint, all in
one pass.
"""

from __future__ import annotations

from ascend_core.ascend_config import AscendConfig
from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS
from ascend_core.deployment import Deployment, KvTransferRole
from ascend_core.errors import ConfigError
from ascend_core.plan.ascend_feature_rules import FEATURE_RULES, Rule

_ROOT = "additional_config"
_TP = f"{_ROOT}.finegrained_tp_config"


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
    # vllm_ascend/utils.py model_uses_sfa_sparse: an indexer without compression.
    sfa_sparse = model.use_sparse and not model.compressed_attention
    if not model.use_mla or sfa_sparse:
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


RULES: tuple[Rule, ...] = (
    _finegrained_tp,
    _expert_map,
    _kv_nz,
    _mlapo_keep,
    _reduce_sample,
    _force_eplb,
    *FEATURE_RULES,
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
