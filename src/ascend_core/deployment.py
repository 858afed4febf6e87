"""What is being deployed, as plain data: the input of the config plan.

The vLLM adapter fills one `Deployment` from `VllmConfig` (plus the device probe, the
environment and quantization detection); nothing here knows vLLM types.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen, validators

from ascend_core.env.outside_vars import LAUNCH_BLOCKING, given
from ascend_core.profiling import ProfilerSettings
from ascend_core.quantization.export_layers import QuantizedLayers
from ascend_core.quantization.methods import QuantMethod
from ports.device import ChipFamily, DeviceKind

_positive = validators.ge(1)


def _frozen_mapping(raw: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A read-only copy: the plan must not be able to mutate the user's additional_config.
    return MappingProxyType(dict(raw or {}))


def _int_tuple(raw: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in raw)


def _optional_int_tuple(raw: Any) -> tuple[int, ...] | None:
    return None if raw is None else _int_tuple(raw)


def _sizes_positive(_: object, attribute: Any, value: tuple[int, ...] | None) -> None:
    if value is not None and any(v < 1 for v in value):
        raise ValueError(f"{attribute.name} must hold positive sizes, got {list(value)}")


def _str_tuple(raw: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in raw)


class CompileMode(enum.Enum):
    """How the model is compiled; mirrors vLLM's `CompilationMode` member names."""

    NONE = "NONE"  # eager PyTorch, nothing compiled
    STOCK_TORCH_COMPILE = "STOCK_TORCH_COMPILE"
    DYNAMO_TRACE_ONCE = "DYNAMO_TRACE_ONCE"
    VLLM_COMPILE = "VLLM_COMPILE"  # vLLM's piecewise compiler, needed by piecewise graphs


class GraphMode(enum.Enum):
    """Which graphs are captured; vLLM calls this `cudagraph_mode`, on Ascend it is the
    NPU (ACL) graph. Member names mirror vLLM's `CUDAGraphMode`."""

    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"
    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"
    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"

    @property
    def needs_piecewise_compile(self) -> bool:
        """Piecewise graphs are cut at the splitting ops by vLLM's own compiler."""
        return self in (GraphMode.PIECEWISE, GraphMode.FULL_AND_PIECEWISE)


class KvTransferRole(enum.Enum):
    """This instance's side in prefill/decode disaggregation (vLLM's `kv_role`)."""

    PRODUCER = "kv_producer"  # prefill node: writes KV for others
    CONSUMER = "kv_consumer"  # decode node: reads KV written elsewhere
    BOTH = "kv_both"


class PluginModule(enum.Enum):
    """A module of this plugin the plan points vLLM at; where it lives is the vLLM adapter's
    to say (adapters/vllm/kv_transfer), so the core names no adapter module."""

    MOONCAKE_V1 = "this plugin's MooncakeConnectorV1 module"


@frozen
class KvTransferSettings:
    """vLLM's `kv_transfer_config` as plain data: the connector, its role and its options."""

    connector: str  # kv_connector, the factory name
    role: KvTransferRole
    # kv_connector_extra_config, untouched: the plan reads the keys it knows.
    extra: Mapping[str, Any] = field(factory=dict, converter=_frozen_mapping, eq=False, hash=False)
    # kv_connector_module_path: the adapter reads this plugin's own module as PluginModule.
    module_path: str | PluginModule | None = None
    kv_port: int | None = None  # kv_port (the reference's handshake port base)
    load_failure_policy: str = "fail"  # kv_load_failure_policy: fail or recompute
    # VLLM_MOONCAKE_BOOTSTRAP_PORT: where a Mooncake producer's bootstrap server listens.
    bootstrap_port: int | None = None
    # VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT: seconds a producer holds a finished request's KV
    # blocks for the consumer's pull (None: vLLM's default).
    abort_timeout: int | None = None


@frozen
class MlaShape:
    """Multi-head latent attention: one compressed latent KV per token shared by all heads."""

    kv_lora_rank: int = field(validator=_positive)
    qk_rope_head_dim: int = field(default=64, validator=validators.ge(0))
    qk_nope_head_dim: int = field(default=0, validator=validators.ge(0))  # 0: not stated
    v_head_dim: int = field(default=0, validator=validators.ge(0))  # 0: not stated


@frozen
class ModelFacts:
    """What the model is (from `model_config` / `hf_config`)."""

    architecture: str  # first entry of hf_config.architectures, e.g. "Qwen3ForCausalLM"
    model_type: str  # hf_config.model_type, e.g. "qwen3"
    hidden_size: int = field(validator=_positive)
    num_layers: int = field(validator=_positive)
    num_attention_heads: int = field(validator=_positive)
    num_kv_heads: int = field(validator=_positive)  # total, before TP sharding
    head_size: int = field(validator=_positive)
    dtype: str = "bfloat16"  # model_config.dtype without the "torch." prefix
    max_model_len: int = field(default=4096, validator=_positive)
    mla: MlaShape | None = None  # set when model_config.use_mla
    index_topk: int | None = None  # DSA (sparse attention): tokens the indexer keeps
    index_head_dim: int = 128  # DSA: the indexer's key width (its own cache per layer)
    compressed_attention: bool = False  # compressed KV with an indexer (DeepSeek-V4 style)
    hybrid: bool = False  # attention plus mamba/linear-attention layers
    # Hybrid models: how many layers are full attention (the others keep per-request state,
    # not per-token KV); None: every layer is.
    attention_layers: int | None = field(default=None, validator=validators.optional(_positive))
    is_moe: bool = False
    num_experts: int = field(default=0, validator=validators.ge(0))  # routed; 0: not MoE
    experts_per_token: int = field(default=0, validator=validators.ge(0))  # top-k; 0: unknown
    sliding_window: bool = False  # some or all layers attend over a window only
    attention_sinks: bool = False  # learned per-head sink logits (gpt-oss style)
    encoder_decoder: bool = False
    # Towers that feed the language model (the support matrix has a row for each):
    vision: bool = False  # a vision tower (image inputs)
    video: bool = False  # video inputs through the vision tower (the model has a video token)
    audio: bool = False  # an audio tower
    # The vision tower's attention (its vision_config): heads and head size; 0: not known.
    vision_heads: int = field(default=0, validator=validators.ge(0))
    vision_head_size: int = field(default=0, validator=validators.ge(0))

    @property
    def multimodal(self) -> bool:
        """Any tower feeds the language model."""
        return self.vision or self.video or self.audio

    @property
    def use_mla(self) -> bool:
        return self.mla is not None

    @property
    def use_sparse(self) -> bool:
        return self.index_topk is not None


@frozen
class EplbSettings:
    """vLLM's `--enable-eplb` and `--eplb-config` as the operator gave them (vLLM's
    defaults where unset); the plan decides what serves (ascend_core/moe/eplb.py)."""

    enabled: bool = False  # parallel_config.enable_eplb
    num_redundant_experts: int = field(default=0, validator=validators.ge(0))
    window_size: int = field(default=1000, validator=_positive)
    step_interval: int = field(default=3000, validator=_positive)
    use_async: bool = True
    policy: str = "default"
    communicator: str | None = None
    # Which of the above the operator wrote (the rest are vLLM's defaults).
    given: frozenset[str] = frozenset()


@frozen
class ParallelSettings:
    """Parallel sizes (`parallel_config`) and the switches that go with them."""

    tp: int = field(default=1, validator=_positive)  # tensor_parallel_size
    pp: int = field(default=1, validator=_positive)  # pipeline_parallel_size
    dp: int = field(default=1, validator=_positive)  # data_parallel_size
    pcp: int = field(default=1, validator=_positive)  # prefill_context_parallel_size
    dcp: int = field(default=1, validator=_positive)  # decode_context_parallel_size
    expert_parallel: bool = False  # enable_expert_parallel
    sequence_parallel: bool = False  # sequence parallelism of the residual stream over TP
    disable_custom_all_reduce: bool = False  # parallel_config.disable_custom_all_reduce
    ray: bool = False  # distributed_executor_backend is Ray: workers placed on a Ray cluster
    eplb: EplbSettings = EplbSettings()  # --enable-eplb, --eplb-config


@frozen
class DraftFacts:
    """The draft model of a speculative method that has one (eagle, eagle3, draft_model),
    from its config as vLLM read it, before any weight loads."""

    architecture: str  # e.g. "Eagle3LlamaForCausalLM"
    tp: int = field(validator=_positive)  # speculative_config.draft_tensor_parallel_size
    num_layers: int = field(validator=_positive)
    num_attention_heads: int = field(validator=_positive)
    num_kv_heads: int = field(validator=_positive)
    head_size: int = field(validator=_positive)
    vocab_size: int = field(validator=_positive)  # the embedding's (shared with the target)
    draft_vocab_size: int | None = None  # EAGLE-3's own head, when smaller (d2t mapping)


@frozen
class SpeculativeSettings:
    """Speculative decoding (`speculative_config`); method None means off."""

    method: str | None = None  # vLLM's method name as given: "mtp", "eagle3", "ngram", ...
    num_speculative_tokens: int = field(default=0, validator=validators.ge(0))
    draft: DraftFacts | None = None  # None: no draft model, or not known (the doctor)
    target_vocab_size: int | None = None  # the target's vocabulary, None: not known
    # The target's num_nextn_predict_layers (what `mtp` drafts with); None: not known.
    mtp_layers: int | None = None
    # Whether the method's proposer package imports (suffix: arctic_inference's suffix
    # trees, plan.speculative.PROPOSER_PACKAGES); None: not asked, or none needed.
    proposer_installed: bool | None = None


@frozen
class CompilationSettings:
    """Compilation and graph capture (`compilation_config`, `model_config.enforce_eager`)."""

    enforce_eager: bool = False
    mode: CompileMode | None = None  # None: vLLM has not resolved it yet
    graph_mode: GraphMode | None = None  # compilation_config.cudagraph_mode
    capture_sizes: tuple[int, ...] | None = field(  # compilation_config.cudagraph_capture_sizes
        default=None,
        converter=_optional_int_tuple,
        validator=_sizes_positive,
    )
    custom_ops: tuple[str, ...] = field(default=(), converter=_str_tuple)
    encoder_graphs: bool = False  # compilation_config.cudagraph_mm_encoder


@frozen
class BatchSettings:
    """The scheduler's batch limits (`scheduler_config`); None: not known (vLLM's default
    applies and the plan assumes nothing of it)."""

    max_num_seqs: int | None = field(default=None, validator=validators.optional(_positive))
    max_num_batched_tokens: int | None = field(
        default=None, validator=validators.optional(_positive)
    )


@frozen
class CacheSettings:
    """KV cache (`cache_config`) and sleep mode (`model_config.enable_sleep_mode`)."""

    block_size: int | None = field(  # None: the user did not choose one
        default=None, validator=validators.optional(_positive)
    )
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"  # cache_config.cache_dtype
    enable_sleep_mode: bool = False


def modality_set(raw: Iterable[str]) -> frozenset[str]:
    """Deployment.mm_off's converter: any iterable of modality names."""
    return frozenset(raw)


@frozen
class Deployment:
    """Everything the config plan looks at, filled once by the vLLM adapter.

    The sub-records group fields by the vLLM config they come from; the top-level
    fields come from the device probe, the environment and the model files.
    """

    model: ModelFacts
    chip_family: ChipFamily
    device_kind: DeviceKind
    parallel: ParallelSettings = ParallelSettings()
    speculative: SpeculativeSettings = SpeculativeSettings()
    compilation: CompilationSettings = CompilationSettings()
    cache: CacheSettings = CacheSettings()
    batch: BatchSettings = BatchSettings()
    kv_transfer_role: KvTransferRole | None = None  # None: no KV transfer configured
    kv_transfer: KvTransferSettings | None = None  # the whole kv_transfer_config, if any
    # vLLM's additional_config, untouched: the plan parses and validates it.
    additional_config: Mapping[str, Any] = field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )
    user_quantization: str | None = None  # model_config.quantization as the user gave it
    # What the model files say: QuantDetection.files_say from detect_quantization.
    detected_quantization: QuantMethod = QuantMethod.NONE
    # The quantized layers of the files under the method served (the user's choice, else
    # the files'), by format and layer kind: the quantization support table judges them.
    quantized_layers: tuple[QuantizedLayers, ...] = ()
    npu_alloc_conf: str | None = None  # current PYTORCH_NPU_ALLOC_CONF, None when unset
    omp_num_threads: str | None = None  # current OMP_NUM_THREADS, None when unset
    # VLLM_USE_V2_MODEL_RUNNER as the operator set it, None when unset (plan.model_runner)
    v2_model_runner: str | None = None
    # CPUs this process may use (scheduling affinity capped by the cgroup quota);
    # None when the adapter could not tell.
    host_cpus: int | None = field(default=None, validator=validators.optional(_positive))
    lora: bool = False  # --enable-lora
    # Input modalities ("image", "video", "audio") vLLM takes none of: a limit of 0 in
    # --limit-mm-per-prompt, or every one with --language-model-only. Their towers stay idle.
    mm_off: frozenset[str] = field(default=frozenset(), converter=modality_set)
    profiler: ProfilerSettings = field(factory=ProfilerSettings)  # --profiler-config
    training_consistency: bool = False  # batch-invariant kernels asked for
    # The VLLM_ASCEND_* variables as set (name -> raw text); the plan parses them, so a
    # bad value is one more error of the same pass.
    ascend_env: Mapping[str, str] = field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )
    # The variables outside VLLM_ASCEND_* the plan checks (env.outside_vars, e.g.
    # HCCL_BUFFSIZE) that are set, as written.
    outside_env: Mapping[str, str] = field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )
    # Files additional_config names (e.g. eplb_config.expert_map_path) -> whether the
    # adapter found them readable (ascend_config.files.probe_referenced_files); a path
    # missing here was not checked.
    readable_files: Mapping[str, bool] = field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )

    @property
    def launch_blocking(self) -> bool:
        """ASCEND_LAUNCH_BLOCKING=1 (synchronous kernel launch) in outside_env; a value CANN
        does not take (0 or 1) counts as unset here, and `ascend-doctor check` names it."""
        try:
            return given(self.outside_env, LAUNCH_BLOCKING) == 1
        except ValueError:
            return False
