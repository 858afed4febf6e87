"""Rules between `additional_config` keys; each error names every key involved."""

from __future__ import annotations

from ascend_core.ascend_config.reference_rules import reference_rule_errors
from ascend_core.ascend_config.schema import AscendConfig, EplbConfig
from ascend_core.errors import ConfigError

_COMPILE = "additional_config.ascend_compilation_config"
_EPLB = "additional_config.eplb_config"
_SCHED = "additional_config.scheduler_config"


def cross_field_errors(config: AscendConfig) -> list[ConfigError]:
    """Every violated rule between keys of one AscendConfig."""
    errors: list[ConfigError] = []
    compilation = config.ascend_compilation_config
    # Static kernels are compiled per captured graph shape: without npugraph_ex
    # nothing is captured, so the switch would silently do nothing.
    if compilation.enable_static_kernel and not compilation.enable_npugraph_ex:
        errors.append(
            ConfigError(
                f"{_COMPILE}.enable_static_kernel=true requires "
                f"{_COMPILE}.enable_npugraph_ex=true.",
                "set enable_npugraph_ex to true, or enable_static_kernel to false",
            )
        )
    # The intervals pace the dynamic balancer; with it off they would be ignored,
    # which usually means dynamic_eplb was forgotten.
    eplb = config.eplb_config
    defaults = EplbConfig()
    if not eplb.dynamic_eplb:
        for name in ("expert_heat_collection_interval", "algorithm_execution_interval"):
            if getattr(eplb, name) != getattr(defaults, name):
                errors.append(
                    ConfigError(
                        f"{_EPLB}.{name} is set but {_EPLB}.dynamic_eplb is false, "
                        "so nothing would use it.",
                        f"set dynamic_eplb to true, or remove {name}",
                    )
                )
    # The decode cap applies only to the decode phase that pd transfer creates.
    scheduler = config.scheduler_config
    if scheduler.decode_max_num_seqs and not scheduler.enable_pd_transfer:
        errors.append(
            ConfigError(
                f"{_SCHED}.decode_max_num_seqs={scheduler.decode_max_num_seqs} is set but "
                f"{_SCHED}.enable_pd_transfer is false, so nothing would use it.",
                "set enable_pd_transfer to true, or remove decode_max_num_seqs",
            )
        )
    errors.extend(reference_rule_errors(config))
    return errors
