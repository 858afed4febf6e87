"""The `additional_config` schema: parse_ascend_config(raw, parallel=None) -> AscendConfig.

Public: parse_ascend_config, check_ascend_config (the same without raising), AscendConfig
and its sections (AscendCompilationConfig, EplbConfig, FinegrainedTPConfig, RLConfig,
SchedulerConfig), ParallelSizes, validate_against_parallel, RETIRED_KEYS, RetiredKey,
REFERENCE_KEYS and ReferenceKey (vllm-ascend keys accepted without effect), describe_keys,
KeyDoc.
"""

from ascend_core.ascend_config.docs import KeyDoc, describe_keys
from ascend_core.ascend_config.parallel import ParallelSizes, validate_against_parallel
from ascend_core.ascend_config.parse import check_ascend_config, parse_ascend_config
from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS, ReferenceKey
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
    "REFERENCE_KEYS",
    "RETIRED_KEYS",
    "AscendCompilationConfig",
    "AscendConfig",
    "EplbConfig",
    "FinegrainedTPConfig",
    "KeyDoc",
    "ParallelSizes",
    "RLConfig",
    "ReferenceKey",
    "RetiredKey",
    "SchedulerConfig",
    "check_ascend_config",
    "describe_keys",
    "parse_ascend_config",
    "validate_against_parallel",
]
