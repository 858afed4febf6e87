"""Keys the reference plugin's `additional_config` had and this one does not, and their fate."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from attrs import frozen


@frozen
class RetiredKey:
    """A retired key at `path` (dotted, under additional_config).

    `replacement` is the dotted path of the key that took over, or None when
    the key was removed with nothing to set in its place.
    """

    path: str
    replacement: str | None
    reason: str


_SCHEDULER_MOVED = (
    "vllm-ascend deprecates the top-level spelling; scheduler keys live in scheduler_config"
)

_RETIRED: tuple[RetiredKey, ...] = (
    RetiredKey(
        "torchair_graph_config",
        "ascend_compilation_config",
        "graph mode goes through vLLM's compilation with npugraph_ex, not torchair",
    ),
    RetiredKey(
        "ascend_scheduler_config",
        None,
        "vLLM's own scheduler schedules; its additions are under scheduler_config",
    ),
    RetiredKey(
        "chunked_prefill_for_mla",
        None,
        "chunked prefill for MLA follows vLLM's enable_chunked_prefill",
    ),
    RetiredKey(
        "expert_tensor_parallel_size",
        None,
        "expert parallelism follows vLLM's enable_expert_parallel",
    ),
    RetiredKey("dynamic_eplb", "eplb_config.dynamic_eplb", "EPLB keys live in eplb_config"),
    RetiredKey("expert_map_path", "eplb_config.expert_map_path", "EPLB keys live in eplb_config"),
    RetiredKey(
        "lmhead_tensor_parallel_size",
        "finegrained_tp_config.lmhead_tensor_parallel_size",
        "per-module tensor-parallel sizes live in finegrained_tp_config",
    ),
    RetiredKey(
        "oproj_tensor_parallel_size",
        "finegrained_tp_config.oproj_tensor_parallel_size",
        "per-module tensor-parallel sizes live in finegrained_tp_config",
    ),
)

_RETIRED += tuple(
    RetiredKey(name, f"scheduler_config.{name}", _SCHEDULER_MOVED)
    for name in (
        "enable_balance_scheduling",
        "recompute_scheduler_enable",
        "short_request_first_config",
        "profiling_chunk_config",
        "batch_job_sched_config",
    )
)

RETIRED_KEYS: Mapping[str, RetiredKey] = MappingProxyType({r.path: r for r in _RETIRED})
