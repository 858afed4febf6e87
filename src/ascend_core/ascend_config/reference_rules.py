"""The reference plugin's rules between `additional_config` keys that need no deployment facts.

Each follows a check of vllm_ascend/ascend_config.py (AscendConfig.derive_and_validate,
_check_mix_placement, _validate_mc2_comm_alg, _resolve_dump_config_path,
_validate_sparse_c8_kv_offload_compatibility, DyntraLBConfig._validate_config) and of
vllm_ascend/platform.py (_check_ascend_config: scheduler extensions); where the
reference quietly changes a value instead (fused MC2 turning multistream overlap off), this
build refuses, so the operator sees the conflict.
"""

from __future__ import annotations

from collections.abc import Callable

from ascend_core.ascend_config.schema import AscendConfig
from ascend_core.errors import ConfigError

_ROOT = "additional_config"


def _dump(config: AscendConfig) -> ConfigError | None:
    if config.given("dump_config") and config.given("dump_config_path"):
        return ConfigError(
            f"{_ROOT}.dump_config and {_ROOT}.dump_config_path are both set; only one may be.",
            "keep the inline dump_config or the dump_config_path file, not both",
        )
    return None


def _fused_mc2_multistream(config: AscendConfig) -> ConfigError | None:
    fused = config.reference_value("enable_fused_mc2", 0)
    if fused and config.multistream_overlap_shared_expert:
        return ConfigError(
            f"{_ROOT}.enable_fused_mc2={fused} and {_ROOT}.multistream_overlap_shared_expert="
            "true cannot run together (the reference turns the overlap off silently).",
            "set multistream_overlap_shared_expert to false, or enable_fused_mc2 to 0",
        )
    return None


def _fused_mc2_hierarchy(config: AscendConfig) -> ConfigError | None:
    hierarchy = config.reference_value("mc2_comm_alg", "") == "hierarchy" or bool(
        config.reference_value("enable_mc2_hierarchy_comm", False)
    )
    fused = config.reference_value("enable_fused_mc2", 0)
    if hierarchy and fused:
        return ConfigError(
            f"{_ROOT}.enable_fused_mc2={fused} cannot be used with hierarchical MC2 "
            f'communication ({_ROOT}.mc2_comm_alg="hierarchy" or enable_mc2_hierarchy_comm).',
            "set enable_fused_mc2 to 0, or choose another mc2_comm_alg",
        )
    return None


def _mix_placement(config: AscendConfig) -> ConfigError | None:
    if config.reference_value("mix_placement", False) and (
        config.enable_shared_expert_dp or config.multistream_overlap_shared_expert
    ):
        return ConfigError(
            f"{_ROOT}.mix_placement=true cannot be combined with enable_shared_expert_dp or "
            "multistream_overlap_shared_expert.",
            "turn mix_placement off, or both shared-expert switches",
        )
    return None


def _profiling_chunk(config: AscendConfig) -> ConfigError | None:
    chunk = config.reference_section("scheduler_config.profiling_chunk_config")
    balance = config.reference_value("scheduler_config.enable_balance_scheduling", False)
    if chunk.get("enabled") and balance:
        return ConfigError(
            f"{_ROOT}.scheduler_config.profiling_chunk_config.enabled and "
            f"{_ROOT}.scheduler_config.enable_balance_scheduling cannot both be on.",
            "turn one of them off",
        )
    return None


def _mlapo_keep(config: AscendConfig) -> ConfigError | None:
    if config.reference_value("mlapo_keep_prefill_weights", False) and not config.enable_mlapo:
        return ConfigError(
            f"{_ROOT}.mlapo_keep_prefill_weights=true requires {_ROOT}.enable_mlapo=true: "
            "the prefill weights are only freed when MLAPO is on.",
            "set enable_mlapo to true, or remove mlapo_keep_prefill_weights",
        )
    return None


def _reduce_sample(config: AscendConfig) -> ConfigError | None:
    lmhead = config.finegrained_tp_config.lmhead_tensor_parallel_size
    if config.reference_value("enable_reduce_sample", False) and lmhead > 0:
        return ConfigError(
            f"{_ROOT}.enable_reduce_sample=true is incompatible with "
            f"{_ROOT}.finegrained_tp_config.lmhead_tensor_parallel_size={lmhead}.",
            "turn one of them off",
        )
    return None


def _recompute_scheduler(config: AscendConfig) -> ConfigError | None:
    tp = config.finegrained_tp_config
    needing = [
        f"{name}={size}"
        for name, size in (
            ("oproj_tensor_parallel_size", tp.oproj_tensor_parallel_size),
            ("embedding_tensor_parallel_size", tp.embedding_tensor_parallel_size),
        )
        if size > 0
    ]
    recompute = config.reference_value("scheduler_config.recompute_scheduler_enable", False)
    if needing and not recompute:
        return ConfigError(
            f"{_ROOT}.finegrained_tp_config.{' and '.join(needing)} requires "
            f"{_ROOT}.scheduler_config.recompute_scheduler_enable=true: their cross-DP "
            "collectives need the same token count on every DP rank, which only the "
            "recompute scheduler guarantees.",
            "set scheduler_config.recompute_scheduler_enable to true, or the sizes to 0",
        )
    return None


def _dyntra_steps(config: AscendConfig) -> ConfigError | None:
    dyntra = config.reference_section("scheduler_config.dyntra_lb_config")
    start, end = dyntra.get("start_step", 250), dyntra.get("end_step", -1)
    if isinstance(start, int) and isinstance(end, int) and end != -1 and end <= start:
        return ConfigError(
            f"{_ROOT}.scheduler_config.dyntra_lb_config.end_step={end} must be greater than "
            f"start_step={start}, or -1 for no end.",
            "raise end_step above start_step, or set it to -1",
        )
    return None


def _ft_timeout(config: AscendConfig) -> ConfigError | None:
    if config.reference_value("ft_communication_abort_timeout", 0) == 1:
        return ConfigError(
            f"{_ROOT}.ft_communication_abort_timeout=1: it must be 0 (off) or at least 2 "
            "seconds (the HCCL timeouts are set one second below it).",
            "set it to 0 or to 2 or more",
        )
    return None


def _sparse_offload_c8(config: AscendConfig) -> ConfigError | None:
    offload = config.reference_section("sparse_kv_offload_config")
    if offload.get("enabled") and config.reference_value("enable_sparse_sfa_c8", False):
        return ConfigError(
            f"{_ROOT}.sparse_kv_offload_config.enabled does not support "
            f"{_ROOT}.enable_sparse_sfa_c8 (the sparse SFA C8 main cache).",
            "turn enable_sparse_sfa_c8 off (enable_sparse_li_c8 is supported)",
        )
    return None


def _scheduler_mutexes(config: AscendConfig) -> ConfigError | None:
    sched = "scheduler_config"
    on = {
        name: bool(config.reference_section(f"{sched}.{name}").get("enabled"))
        for name in (
            "short_request_first_config",
            "batch_job_sched_config",
            "profiling_chunk_config",
            "dyntra_lb_config",
        )
    }
    on["enable_balance_scheduling"] = bool(
        config.reference_value(f"{sched}.enable_balance_scheduling", False)
    )
    exclusive = (
        ("short_request_first_config", "batch_job_sched_config"),
        ("short_request_first_config", "profiling_chunk_config"),
        ("dyntra_lb_config", "enable_balance_scheduling"),
        ("dyntra_lb_config", "profiling_chunk_config"),
    )
    clashes = [f"{a} with {b}" for a, b in exclusive if on[a] and on[b]]
    if clashes:
        return ConfigError(
            f"{_ROOT}.{sched}: these scheduler extensions cannot run together: "
            f"{'; '.join(clashes)}.",
            "keep one scheduler extension of each pair",
        )
    return None


RULES: tuple[Callable[[AscendConfig], ConfigError | None], ...] = (
    _dump,
    _fused_mc2_multistream,
    _fused_mc2_hierarchy,
    _mix_placement,
    _profiling_chunk,
    _mlapo_keep,
    _reduce_sample,
    _recompute_scheduler,
    _dyntra_steps,
    _ft_timeout,
    _sparse_offload_c8,
    _scheduler_mutexes,
)


def reference_rule_errors(config: AscendConfig) -> list[ConfigError]:
    """Every reference rule between keys that `config` breaks."""
    return [error for rule in RULES if (error := rule(config)) is not None]
