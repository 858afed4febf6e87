"""`additional_config` keys vllm-ascend accepts that this build validates but does not act on.

Each entry carries the reference plugin's type, range and default (vllm_ascend/ascend_config.py:
AscendConfig, EplbConfig, RlConfig, SchedulerConfig and its sub-configs, XliteGraphConfig,
DynamicSpecConfig, RejectionSamplerConfig, AscendFusionConfig, SparseKVOffloadConfig), so a
config written for the reference parses here with the same verdict on each value; the plan
then warns once per key that it has no effect in this build.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from attrs import frozen

from ascend_core.ascend_config.fields import BoolSpec, FieldSpec, IntSpec
from ascend_core.ascend_config.value_specs import (
    ChoiceSpec,
    FloatSpec,
    ObjectSpec,
    OptionalSpec,
    TextSpec,
)


@frozen
class ReferenceSection:
    """A nested mapping of reference keys this build has no section for."""

    doc: str
    keys: Mapping[str, FieldSpec | ReferenceSection]

    def expected(self) -> str:
        return "a mapping (JSON object) or null for the defaults"


@frozen
class ReferenceKey:
    """One key at dotted `path` under additional_config, as the reference defines it.

    `deprecated` says what the reference itself tells users to use instead, when it does.
    """

    path: str
    spec: FieldSpec | ReferenceSection
    default: object = None
    deprecated: str | None = None


def _bool(doc: str) -> BoolSpec:
    return BoolSpec(doc)


def _int(doc: str, minimum: int | None = None, maximum: int | None = None) -> IntSpec:
    return IntSpec(doc, minimum, maximum)


def _section(doc: str, **keys: FieldSpec | ReferenceSection) -> ReferenceSection:
    return ReferenceSection(doc, MappingProxyType(keys))


_PHASES = ("all", "prefill", "decode")

_KEYS: tuple[ReferenceKey, ...] = (
    # Top-level switches of AscendConfig.
    ReferenceKey("refresh", _bool("Rebuild the reference's cached global config."), False),
    ReferenceKey(
        "multistream_dsv4_dsa_overlap", _bool("Overlap DSv4 DSA on a second stream."), True
    ),
    ReferenceKey(
        "enable_mc2_hierarchy_comm",
        _bool("Hierarchical MC2 communication."),
        False,
        deprecated='mc2_comm_alg = "hierarchy"',
    ),
    ReferenceKey("enable_reduce_sample", _bool("Reduced sampling scheme (experimental)."), False),
    ReferenceKey("enable_dsa_cp", _bool("Context parallelism for DSA attention."), False),
    ReferenceKey("enable_force_eplb", _bool("Force static EPLB placement."), False),
    ReferenceKey(
        "enable_pcp_o_proj_weight_sharding", _bool("Shard o_proj weights over PCP."), False
    ),
    ReferenceKey("draft_window_size", OptionalSpec("Draft model window size.", _int("", 1)), None),
    ReferenceKey("mix_placement", _bool("Mixed expert placement."), False),
    ReferenceKey(
        "combine_quant_mode",
        ChoiceSpec("Forced MC2 combine communication quant mode; 0: the model's.", (0, 2, 3, 4)),
        0,
    ),
    ReferenceKey(
        "mega_moe_max_tokens", _int("Per-rank token capacity of fused MC2/MegaMoE.", 1), 65536
    ),
    ReferenceKey("ascend_log_path", TextSpec("Where the reference writes its logs."), None),
    ReferenceKey(
        "dump_config_path", TextSpec("msprobe dump configuration file.", nullable=True), None
    ),
    ReferenceKey("dump_config", ObjectSpec("Inline msprobe dump configuration."), None),
    ReferenceKey(
        "mc2_comm_alg",
        ChoiceSpec("MC2 communication algorithm.", ("", "fullmesh", "hierarchy", "fullmesh_v2")),
        "",
    ),
    ReferenceKey(
        "enable_fused_mc2",
        ChoiceSpec("Fused MC2: 0 off, 1 dispatch_ffn_combine, 2 MegaMoE.", (0, 1, 2)),
        0,
    ),
    ReferenceKey(
        "mlapo_keep_prefill_weights",
        _bool("Keep MLAPO prefill weights on decode nodes."),
        False,
    ),
    ReferenceKey("msmonitor_use_daemon", _bool("Run the msMonitor daemon."), False),
    ReferenceKey(
        "enable_transpose_kv_cache_by_block",
        _bool("Fused transpose_kv_cache_by_block op."),
        True,
    ),
    ReferenceKey(
        "ft_communication_abort_timeout",
        _int("Fault-tolerance abort timeout in seconds; 0 off, else at least 2.", 0),
        0,
    ),
    ReferenceKey("enable_sparse_sfa_c8", _bool("C8 main cache for sparse SFA."), False),
    ReferenceKey("enable_sparse_li_c8", _bool("C8 Lightning Indexer cache."), False),
    # Keys inside sections this build has.
    ReferenceKey(
        "finegrained_tp_config.olora_tensor_parallel_size",
        _int("Tensor-parallel size of the o_proj LoRA (some releases).", 0),
        0,
    ),
    ReferenceKey(
        "ascend_compilation_config.fuse_muls_add", _bool("Fuse the muls-plus-add pattern."), True
    ),
    ReferenceKey(
        "eplb_config.expert_map_record_path",
        TextSpec("Where dynamic EPLB records its expert map.", nullable=True, suffix=".json"),
        None,
    ),
    ReferenceKey("eplb_config.eplb_policy_type", ChoiceSpec("EPLB policy.", (0, 1, 2, 3)), 2),
    ReferenceKey(
        "eplb_config.eplb_heat_collection_stage",
        ChoiceSpec("Phase whose expert heat is collected.", _PHASES),
        "all",
    ),
    ReferenceKey(
        "eplb_config.load_collection_phase",
        ChoiceSpec("Phase feeding the expert-load window (model runner v2).", _PHASES),
        "all",
    ),
    ReferenceKey("rl_config.enabled", _bool("Reinforcement-learning defaults."), False),
    ReferenceKey("rl_config.sleep_mode_extra_cleanup", _bool("Extra cleanup on sleep."), False),
    ReferenceKey(
        "rl_config.enable_training_consistency", _bool("Training-consistent kernels."), False
    ),
    ReferenceKey("rl_config.enable_batch_invariant", _bool("Batch-invariant kernels."), False),
    ReferenceKey(
        "scheduler_config.enable_balance_scheduling", _bool("Balance DP scheduling."), False
    ),
    ReferenceKey(
        "scheduler_config.recompute_scheduler_enable", _bool("The recompute scheduler."), False
    ),
    ReferenceKey(
        "scheduler_config.short_request_first_config",
        _section(
            "Short-request-first scheduling.",
            enabled=_bool("Turn it on."),
            threshold=_int("Prompt tokens below which a request is short.", 0),
            long_max_wait_ms=FloatSpec("Longest wait of a long request (ms).", 0.0),
        ),
    ),
    ReferenceKey(
        "scheduler_config.profiling_chunk_config",
        _section(
            "Profiling-based dynamic chunk sizing.",
            enabled=_bool("Turn it on."),
            smooth_factor=FloatSpec("Smoothing factor.", 0.0, 1.0, minimum_open=True),
            min_chunk=_int("Smallest chunk.", 1),
            need_timing=OptionalSpec("Collect timings; null: follows enabled.", _bool("")),
            max_fit_chunk=_int("Data points for the fit.", 6),
        ),
    ),
    ReferenceKey(
        "scheduler_config.batch_job_sched_config",
        _section(
            "Batch-job-aware scheduling.",
            enabled=_bool("Turn it on."),
            max_jobs=_int("Jobs at once.", 0),
            reserve_margin_blocks=_int("Reserved margin blocks.", 0),
            reserve_max_blocks=_int("Reserved blocks at most.", 1),
            low_available_tokens_threshold=_int("Low free-token threshold.", 1),
            short_decode_token_threshold=_int("Short-decode threshold.", 1),
        ),
    ),
    ReferenceKey(
        "scheduler_config.dyntra_lb_config",
        _section(
            "Dynamic DP load balancing.",
            enabled=_bool("Turn it on."),
            enable_diagnostics=_bool("Log diagnostics."),
            mode=ChoiceSpec("Balancing mode.", ("static", "dynamic")),
            start_step=_int("First step.", 0),
            end_step=_int("Last step; -1 none.", -1),
            bubble_threshold=FloatSpec("Bubble threshold.", 0.0, minimum_open=True),
            long_req_block_threshold=_int("Blocks of a long request.", 1),
            dynamic_max_step=_int("Dynamic steps at most.", 1),
        ),
    ),
    # Sections this build does not have.
    ReferenceKey(
        "ascend_fusion_config",
        _section("Fused-operator switches.", fusion_ops_gmmswigluquant=_bool("gmm+swiglu+quant.")),
    ),
    ReferenceKey(
        "rejection_sampler_config",
        _section(
            "Block and entropy verification in rejection sampling.",
            enable_block_verify=_bool("Block verify."),
            enable_entropy_verify=_bool("Entropy verify."),
            posterior_threshold=FloatSpec("Posterior threshold.", 0.0, 1.0, minimum_open=True),
            posterior_alpha=FloatSpec("Posterior alpha.", 0.0),
        ),
    ),
    ReferenceKey(
        "xlite_graph_config",
        _section("Xlite graph mode.", enabled=_bool("Turn it on."), full_mode=_bool("Full mode.")),
    ),
    ReferenceKey(
        "dynamic_spec_config",
        _section(
            "Dynamic speculative length.",
            method=ChoiceSpec("Method; null off.", (None, "dspark", "dflash")),
            method_params=ObjectSpec("Parameters of the method."),
        ),
    ),
    ReferenceKey(
        "sparse_kv_offload_config",
        _section(
            "Sparse KV cache offloading to host memory.",
            enabled=_bool("Turn it on."),
            topk_buffer_size=_int("Top-k buffer size.", 1),
            dram_size_per_dp_GB=_int("Host memory per DP rank (GB).", 1),
            keep_device_kv_cache=_bool("Keep the device KV cache (debugging)."),
            use_fused_overlap=_bool("Fused overlap."),
        ),
    ),
)

REFERENCE_KEYS: Mapping[str, ReferenceKey] = MappingProxyType({k.path: k for k in _KEYS})


def reference_keys_under(section_path: str) -> tuple[str, ...]:
    """Names of the reference keys directly under `section_path` ('' for the top level)."""
    prefix = f"{section_path}." if section_path else ""
    return tuple(
        path.removeprefix(prefix)
        for path in REFERENCE_KEYS
        if path.startswith(prefix) and "." not in path.removeprefix(prefix)
    )
