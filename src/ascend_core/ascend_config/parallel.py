"""Checks of `additional_config` against the deployment's parallel layout."""

from __future__ import annotations

from attrs import frozen

from ascend_core.ascend_config.schema import AscendConfig
from ascend_core.errors import ConfigError

_FINEGRAINED = "additional_config.finegrained_tp_config"


@frozen
class ParallelSizes:
    """The parallel sizes vLLM was asked for (its parallel_config)."""

    data_parallel_size: int
    tensor_parallel_size: int


def validate_against_parallel(config: AscendConfig, sizes: ParallelSizes) -> list[ConfigError]:
    """Every fine-grained TP size that does not fit the layout, naming both settings.

    The fine-grained groups are carved out of the data-parallel ranks, so a size
    must divide data_parallel_size (the reference plugin's feature guide states
    this limit and no other on the layout). tensor_parallel_size is kept in
    ParallelSizes for messages and for rules that need it.
    """
    dp = sizes.data_parallel_size
    errors: list[ConfigError] = []
    for name, size in config.finegrained_tp_config.sizes().items():
        if size == 0 or (dp >= 1 and dp % size == 0):
            continue
        divisors = [d for d in range(1, dp + 1) if dp % d == 0]
        errors.append(
            ConfigError(
                f"{_FINEGRAINED}.{name}={size} does not divide data_parallel_size={dp}.",
                f"use a divisor of data_parallel_size ({', '.join(map(str, divisors))}), "
                "or 0 to turn it off",
            )
        )
    return errors
