"""The `additional_config` value objects: one frozen attrs class per section.

Each field is a key; its spec (type, range, default, doc) sits in the field's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
from attrs import frozen

from ascend_core.ascend_config.fields import (
    ascending_ints_field,
    bool_field,
    int_field,
    path_field,
    section_field,
)


def _read_only(raw: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(raw))


@frozen
class AscendCompilationConfig:
    """Graph capture and graph-level fusions (replaced the reference plugin's torchair config)."""

    enable_npugraph_ex: bool = bool_field(
        True, "Capture graphs with torch_npu's npugraph_ex backend (not on 310P)."
    )
    enable_static_kernel: bool = bool_field(
        False, "Compile static-shape kernels for each captured shape; needs enable_npugraph_ex."
    )
    fuse_norm_quant: bool = bool_field(
        True, "Fuse RMSNorm with the activation quantization that follows it."
    )
    fuse_qknorm_rope: bool = bool_field(True, "Fuse the q/k head norms with rotary embedding.")
    fuse_allreduce_rms: bool = bool_field(
        False, "Fuse the tensor-parallel all-reduce with the RMSNorm that follows it."
    )


@frozen
class EplbConfig:
    """Expert-parallel load balancing for MoE models."""

    dynamic_eplb: bool = bool_field(
        False, "Move experts between ranks at run time according to measured load."
    )
    expert_map_path: str | None = path_field(
        "JSON file placing experts (and their replicas) on ranks at load time."
    )
    num_redundant_experts: int = int_field(
        0, "Extra expert replicas spread over the expert-parallel ranks.", minimum=0
    )
    expert_heat_collection_interval: int = int_field(
        600, "Forward steps over which expert load is measured (dynamic_eplb).", minimum=1
    )
    algorithm_execution_interval: int = int_field(
        50, "Steps between a placement decision and its application (dynamic_eplb).", minimum=1
    )


@frozen
class FinegrainedTPConfig:
    """Tensor parallelism for single modules across data-parallel ranks; 0 turns one off."""

    lmhead_tensor_parallel_size: int = int_field(
        0, "Tensor-parallel size of the LM head.", minimum=0
    )
    oproj_tensor_parallel_size: int = int_field(
        0, "Tensor-parallel size of attention's output projection.", minimum=0
    )
    embedding_tensor_parallel_size: int = int_field(
        0, "Tensor-parallel size of the token embedding.", minimum=0
    )
    mlp_tensor_parallel_size: int = int_field(
        0, "Tensor-parallel size of dense MLP layers.", minimum=0
    )

    def sizes(self) -> dict[str, int]:
        """Key name to size, for every module."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(FinegrainedTPConfig)}


@frozen
class RLConfig:
    """Settings for serving inside a reinforcement-learning loop."""

    weight_refit: bool = bool_field(
        False,
        "The trainer rewrites weights in place between rollouts: keep them in their "
        "loaded layout (no NZ conversion) so they can be overwritten.",
    )


@frozen
class SchedulerConfig:
    """Additions to vLLM's scheduler (which still schedules)."""

    enable_pd_transfer: bool = bool_field(
        False, "Run all prefills of a batch first, then decode them together."
    )
    decode_max_num_seqs: int = int_field(
        0,
        "Sequences decoded at once in the decode phase of enable_pd_transfer; 0: vLLM's "
        "max_num_seqs.",
        minimum=0,
    )


@frozen
class AscendConfig:
    """The validated `additional_config` of one deployment; every key has a default.

    (RUF009 is silenced on the sections: their default is a fresh frozen instance.)
    """

    ascend_compilation_config: AscendCompilationConfig = section_field(  # noqa: RUF009
        AscendCompilationConfig, "Graph capture and fusion switches."
    )
    weight_nz_mode: int = int_field(
        1,
        "Weights in the NPU's fractal NZ layout: 0 never, 1 where it pays off, 2 all eligible.",
        minimum=0,
        maximum=2,
    )
    enable_mlapo: bool = bool_field(
        True, "Run MLA preprocessing (norms, projections, rope) as one fused kernel."
    )
    pa_shape_list: tuple[int, ...] = ascending_ints_field(
        "Batch sizes given their own paged-attention kernel shape; empty: the kernel's own."
    )
    enable_shared_expert_dp: bool = bool_field(
        False, "Replicate shared experts on every data-parallel rank instead of sharding them."
    )
    multistream_overlap_shared_expert: bool = bool_field(
        False, "Compute shared experts on a second stream, overlapping the routed experts."
    )
    enable_cpu_binding: bool = bool_field(
        True, "Pin each worker's threads to the CPU cores nearest its NPU."
    )
    enable_prefill_mc2: bool = bool_field(
        False, "Use MC2 (fused dispatch/combine) MoE communication in prefill, not only decode."
    )
    enable_kv_nz: bool = bool_field(False, "Keep the KV cache in the NZ layout.")
    enable_flashcomm1: bool = bool_field(
        False,
        "Sequence parallelism (FlashComm1); wins over VLLM_ASCEND_ENABLE_FLASHCOMM1. "
        "vllm-ascend deprecates it for vLLM's own sequence parallelism.",
    )
    eplb_config: EplbConfig = section_field(  # noqa: RUF009
        EplbConfig, "Expert load balancing."
    )
    finegrained_tp_config: FinegrainedTPConfig = section_field(  # noqa: RUF009
        FinegrainedTPConfig, "Per-module tensor parallelism."
    )
    rl_config: RLConfig = section_field(  # noqa: RUF009
        RLConfig, "Reinforcement-learning serving."
    )
    scheduler_config: SchedulerConfig = section_field(  # noqa: RUF009
        SchedulerConfig, "Scheduler additions."
    )
    # Bookkeeping, not keys: the dotted paths (under additional_config) the user wrote,
    # and the values of the reference plugin's keys this build accepts without acting
    # on them (ascend_config.reference_keys), by dotted path.
    explicit: frozenset[str] = attrs.field(default=frozenset(), eq=False, hash=False)
    reference: Mapping[str, object] = attrs.field(
        factory=dict, converter=_read_only, eq=False, hash=False
    )

    def given(self, path: str) -> bool:
        """Whether the user wrote the key at dotted `path` (not just took its default)."""
        return path in self.explicit

    def reference_value(self, path: str, default: object = None) -> object:
        """The value given for a reference-only key at `path`, else `default`."""
        return self.reference.get(path, default)

    def reference_section(self, path: str) -> Mapping[str, object]:
        """The keys given in a reference-only section at `path` ({} when not given)."""
        value = self.reference.get(path)
        return value if isinstance(value, Mapping) else {}

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (lists, not tuples) of the keys, for logs and JSON."""
        data = attrs.asdict(
            self,
            value_serializer=_lists,
            filter=lambda a, _v: a.name not in ("explicit", "reference"),
        )
        for path, value in self.reference.items():
            parent, _, name = path.rpartition(".")
            section = data.get(parent) if parent else data
            # Each reference key sits under a section of this schema or at the top.
            assert isinstance(section, dict), path
            section[name] = _plain(value)
        return data


def _lists(_inst: object, _field: object, value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _plain(value: object) -> object:
    return dict(value) if isinstance(value, Mapping) else value
