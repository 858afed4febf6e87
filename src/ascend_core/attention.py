"""Attention backend selection: a decision table from the model's attention and the device."""

from __future__ import annotations

import enum

from attrs import frozen

from ascend_core.deployment import ModelFacts
from ascend_core.env_registry import EnvSettings
from ascend_core.errors import BackendSelectionError
from ports.device import ChipFamily, DeviceKind
from ports.environment import Environment


class AttentionBackendKind(enum.Enum):
    """The attention backends the plugin has; the vLLM adapter maps each to a class path."""

    STANDARD = "standard"  # MHA/GQA on A2/A3/A5
    MLA = "mla"  # multi-head latent attention
    SPARSE_MLA = "sparse_mla"  # DSA: MLA plus an indexer keeping the top-k tokens
    COMPRESSED_MLA = "compressed_mla"  # compressed latent KV plus an indexer (DeepSeek-V4)
    P310 = "310p"  # MHA/GQA on the 310P inference cards
    BATCH_INVARIANT = "batch_invariant"  # MHA/GQA whose results do not depend on the batch
    HOST = "host"  # MHA/GQA in plain torch on the host device


class AttentionShape(enum.Enum):
    """The model's kind of attention, from the request's flags."""

    STANDARD = "MHA/GQA"
    MLA = "MLA"
    SPARSE_MLA = "sparse MLA (DSA)"
    COMPRESSED_MLA = "compressed MLA with an indexer"


class Platform(enum.Enum):
    """Where attention runs, as far as backend choice cares."""

    NPU = "an Ascend NPU (A2/A3/A5)"
    P310 = "a 310P card"
    HOST = "the host device (CPU)"


@frozen
class AttentionRequest:
    """What vLLM asks for (`AttentionSelectorConfig` flags) and where it will run."""

    use_mla: bool
    use_sparse: bool  # DSA (DeepSeek sparse attention: indexer + top-k)
    chip_family: ChipFamily
    device_kind: DeviceKind
    use_compressed: bool = False  # compressed latent KV with an indexer
    training_consistency: bool = False  # batch-invariant kernels asked for
    model: str = ""  # architecture name, for messages only
    sliding_window: bool = False  # some layer attends over a window only
    attention_sinks: bool = False  # learned per-head sink logits

    def describe(self) -> str:
        return (
            f"use_mla={self.use_mla}, use_sparse={self.use_sparse}, "
            f"use_compressed={self.use_compressed}, chip_family={self.chip_family.value}, "
            f"device_kind={self.device_kind.value}, "
            f"training_consistency={self.training_consistency}, "
            f"sliding_window={self.sliding_window}, attention_sinks={self.attention_sinks}"
        )


@frozen
class BackendChoice:
    """The backend picked and why."""

    kind: AttentionBackendKind
    reason: str


@frozen
class _Use:
    kind: AttentionBackendKind
    reason: str


@frozen
class _Refuse:
    what: str  # completed with the model and the request's inputs
    hint: str


@frozen
class DecisionRow:
    """One line of the table: where, which attention, whether batch-invariant; then what."""

    platform: Platform | None  # None: any
    shape: AttentionShape | None  # None: any
    consistency: bool | None  # training_consistency; None: any
    outcome: _Use | _Refuse


_N, _P, _H = Platform.NPU, Platform.P310, Platform.HOST
_STD, _MLA = AttentionShape.STANDARD, AttentionShape.MLA
_DSA, _CMP = AttentionShape.SPARSE_MLA, AttentionShape.COMPRESSED_MLA
_K = AttentionBackendKind
_R = DecisionRow
_ON_NPU = "Serve on an Atlas A2/A3 or Ascend 950 NPU."
_INVARIANT_HINT_NPU = "Unset VLLM_ASCEND_TRAINING_CONSISTENCY or serve on an A2/A3/A5 NPU."
_INVARIANT_HINT_MODEL = "Unset VLLM_ASCEND_TRAINING_CONSISTENCY for this model."

_HOST_CMP = (
    "the host device serves; the plugin's DeepSeek-V4 class attends itself in plain torch "
    "(window, compressed rows and indexer recomputed from each layer's cached inputs)"
)

_BATCH_INVARIANT = (
    "MHA/GQA with VLLM_ASCEND_TRAINING_CONSISTENCY=1: results must not depend on the batch"
)
_INVARIANT_NPU_ONLY = "the batch-invariant backend exists on A2/A3/A5 NPUs only."
_INVARIANT_GQA_ONLY = "the batch-invariant backend runs MHA/GQA only."

# First matching row wins; the refusals come first, then the choices.
# fmt: off
DECISION_TABLE: tuple[DecisionRow, ...] = (
    # platform  shape  training_consistency  outcome
    _R(_P, _MLA, None, _Refuse("MLA has no backend on 310P.", _ON_NPU)),
    _R(_P, _DSA, None, _Refuse("sparse MLA (DSA) has no backend on 310P.", _ON_NPU)),
    _R(_P, _CMP, None, _Refuse("compressed MLA has no backend on 310P.", _ON_NPU)),
    _R(_N, _STD, True, _Use(_K.BATCH_INVARIANT, _BATCH_INVARIANT)),
    _R(None, _STD, True, _Refuse(_INVARIANT_NPU_ONLY, _INVARIANT_HINT_NPU)),
    _R(None, None, True, _Refuse(_INVARIANT_GQA_ONLY, _INVARIANT_HINT_MODEL)),
    _R(_N, _STD, False, _Use(_K.STANDARD, "MHA/GQA on an Ascend NPU")),
    _R(_N, _MLA, False, _Use(_K.MLA, "the model uses multi-head latent attention")),
    _R(_N, _DSA, False, _Use(_K.SPARSE_MLA, "the model uses MLA with a sparse indexer (DSA)")),
    _R(_N, _CMP, False, _Use(_K.COMPRESSED_MLA, "the model compresses its latent KV cache")),
    _R(_P, _STD, False, _Use(_K.P310, "MHA/GQA on a 310P card, which has its own kernels")),
    _R(_H, _STD, False, _Use(_K.HOST, "the host device serves; plain-torch MHA/GQA")),
    _R(_H, _MLA, False, _Use(_K.MLA, "the host device serves; plain-torch MLA")),
    _R(_H, _DSA, False, _Use(_K.SPARSE_MLA, "the host device serves; plain-torch sparse MLA "
                             "with the indexer's top-k (DSA)")),
    _R(_H, _CMP, False, _Use(_K.COMPRESSED_MLA, _HOST_CMP)),
)
# fmt: on

# (use_mla, use_sparse, use_compressed) -> shape; None: no model has that combination.
SHAPES: dict[tuple[bool, bool, bool], AttentionShape | None] = {
    (False, False, False): _STD,
    (True, False, False): _MLA,
    (True, True, False): _DSA,
    (True, False, True): _CMP,
    (True, True, True): _CMP,  # the compressed path has its own indexer
    (False, True, False): None,  # DSA indexes MLA's latent cache
    (False, False, True): None,
    (False, True, True): None,
}


def select_attention_backend(request: AttentionRequest) -> BackendChoice:
    """The backend for this request, or BackendSelectionError naming its inputs."""
    row, shape, platform = find_row(request)
    if isinstance(row.outcome, _Refuse):
        raise BackendSelectionError(
            f"{request.model or 'the model'} uses {shape.value} attention on "
            f"{platform.value}: {row.outcome.what} ({request.describe()})",
            row.outcome.hint,
        )
    return BackendChoice(row.outcome.kind, row.outcome.reason)


def find_row(request: AttentionRequest) -> tuple[DecisionRow, AttentionShape, Platform]:
    """The first table row matching the request, with the shape and platform it matched on."""
    model = request.model or "the model"
    shape = SHAPES.get((request.use_mla, request.use_sparse, request.use_compressed))
    if shape is None:
        raise BackendSelectionError(
            f"{model} asks for sparse or compressed attention without MLA ({request.describe()})"
            "; these index the MLA latent cache, so no backend serves the combination.",
            "Check the model's config (kv_lora_rank, index_topk) and VLLM_MLA_DISABLE.",
        )
    platform = _platform(request)
    for row in DECISION_TABLE:
        if (
            row.platform in (None, platform)
            and row.shape in (None, shape)
            and row.consistency in (None, request.training_consistency)
        ):
            return row, shape, platform
    raise BackendSelectionError(  # the table covers every case; this guards edits to it
        f"no attention backend for {model} ({request.describe()}).",
        "Report this combination; it is missing from the attention decision table.",
    )


def _platform(request: AttentionRequest) -> Platform:
    if request.device_kind is DeviceKind.CPU:
        return Platform.HOST
    if request.chip_family is ChipFamily.P310:
        return Platform.P310
    if request.chip_family is ChipFamily.HOST:
        raise BackendSelectionError(
            f"device_kind=npu with chip_family=host ({request.describe()}): no Ascend chip "
            "was found for the NPU backends.",
            "Check the NPU driver (npu-smi info), or set VLLM_ASCEND_DEVICE=cpu.",
        )
    return Platform.NPU


# vLLM's own switch for the same kernels (vllm/envs.py reads it as an int, nonzero: on).
VLLM_BATCH_INVARIANT = "VLLM_BATCH_INVARIANT"


def batch_invariant_requested(env: Environment, settings: EnvSettings) -> bool:
    """Whether batch-invariant attention is asked for, by our variable or by vLLM's."""
    raw = (env.get(VLLM_BATCH_INVARIANT) or "0").strip()
    try:
        vllm_switch = int(raw) != 0
    except ValueError:
        vllm_switch = False  # vLLM itself stops on the value when it reads it
    return settings.training_consistency or vllm_switch


# The backend kinds this build has a backend for (the vLLM adapter maps each to a class;
# a test keeps its map and this set equal). MHA/GQA on the host and on an NPU are one
# backend, MLA another: the device's ops ports do the math.
BUILT_BACKENDS: frozenset[AttentionBackendKind] = frozenset(
    {_K.HOST, _K.STANDARD, _K.MLA, _K.SPARSE_MLA}
)


@frozen
class LayerAttention:
    """What vLLM's attention layer says of itself (its `AttentionSelectorConfig`)."""

    use_mla: bool
    use_sparse: bool
    sliding_window: bool = False
    attention_sinks: bool = False


def attention_request(
    model: ModelFacts | None,
    device_kind: DeviceKind,
    chip_family: ChipFamily,
    *,
    batch_invariant: bool,
    layer: LayerAttention | None = None,
) -> AttentionRequest:
    """The one way to build the request, for `vllm serve` and `ascend-doctor plan` alike.

    model: the core's facts of the model (None: vLLM asked before it knew the model);
    layer: what the serving layer says (MLA as vLLM enabled it; a window or sinks the
    config did not show), None where no layer exists yet (the doctor);
    batch_invariant: VLLM_ASCEND_TRAINING_CONSISTENCY or vLLM's VLLM_BATCH_INVARIANT.
    """
    if layer is None:
        if model is None:
            raise ValueError("attention_request needs the model's facts or the layer's flags")
        layer = LayerAttention(model.use_mla, model.use_sparse)
    return AttentionRequest(
        use_mla=layer.use_mla,
        use_sparse=layer.use_sparse,
        chip_family=chip_family,
        device_kind=device_kind,
        use_compressed=model is not None and model.compressed_attention,
        training_consistency=batch_invariant,
        model=model.architecture if model is not None else "",
        sliding_window=layer.sliding_window or (model is not None and model.sliding_window),
        attention_sinks=layer.attention_sinks or (model is not None and model.attention_sinks),
    )


# Backends that compute a per-layer sliding window and learned sink logits (gpt-oss): the
# paged MHA/GQA backend on both devices (the ops port's window and sinks arguments).
WINDOW_AND_SINK_BACKENDS: frozenset[AttentionBackendKind] = frozenset({_K.HOST, _K.STANDARD})


def serving_backend(request: AttentionRequest) -> BackendChoice:
    """The table's choice, refused where this build has no such backend, or where the
    chosen backend cannot compute what the model's layers ask (a window, sink logits:
    the paged MHA/GQA backends can, MLA cannot)."""
    choice = select_attention_backend(request)
    if choice.kind not in BUILT_BACKENDS:
        raise BackendSelectionError(
            f"The core chose the {choice.kind.value} attention backend for "
            f"{request.model or 'the model'} ({choice.reason}), which this build does not "
            "have yet.",
            "Serve a standard MHA/GQA or MLA model.",
        )
    extras = [
        name
        for name, present in (
            ("attention sinks", request.attention_sinks),
            ("sliding window", request.sliding_window),
        )
        if present and choice.kind not in WINDOW_AND_SINK_BACKENDS
    ]
    if extras:
        raise BackendSelectionError(
            f"The {choice.kind.value} attention backend does not support "
            f"{', '.join(extras)} ({request.model or 'the model'}): it computes full causal "
            "attention without sink logits, so the outputs would be wrong.",
            "Serve a model with full causal attention, or an MHA/GQA model (the paged "
            "backend computes windows and sinks).",
        )
    return choice
