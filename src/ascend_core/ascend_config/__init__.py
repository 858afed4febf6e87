"""The `additional_config` schema: parse_ascend_config(raw, parallel=None) -> AscendConfig.

Public: parse_ascend_config, AscendConfig and its sections (AscendCompilationConfig,
EplbConfig, FinegrainedTPConfig, RLConfig, SchedulerConfig), ParallelSizes,
validate_against_parallel, RETIRED_KEYS, RetiredKey, describe_keys, KeyDoc.
"""

from ascend_core.ascend_config.docs import KeyDoc, describe_keys
from ascend_core.ascend_config.parallel import ParallelSizes, validate_against_parallel
from ascend_core.ascend_config.parse import parse_ascend_config
from ascend_core.ascend_config.retired import RETIRED_KEYS, RetiredKey
from ascend_core.ascend_config.schema import (
    AscendCompilationConfig,
    AscendConfig,
    EplbConfig,
    FinegrainedTPConfig,
    RLConfig,
    SchedulerConfig,
)

__all__ = [
    "RETIRED_KEYS",
    "AscendCompilationConfig",
    "AscendConfig",
    "EplbConfig",
    "FinegrainedTPConfig",
    "KeyDoc",
    "ParallelSizes",
    "RLConfig",
    "RetiredKey",
    "SchedulerConfig",
    "describe_keys",
    "parse_ascend_config",
    "validate_against_parallel",
]
