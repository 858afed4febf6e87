"""ModelSlim's quant_model_description.json: per-weight schemes and the scheme of a vLLM layer."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from attrs import field, frozen

from ascend_core.errors import QuantizationError
from ascend_core.quantization.modelslim_names import candidate_prefixes, with_aliases
from ascend_core.suggest import did_you_mean

DESCRIPTION_FILE = "quant_model_description.json"


class QuantScheme(enum.Enum):
    """The per-weight schemes ModelSlim writes that this plugin serves."""

    W8A8 = "W8A8"  # int8 weights, static per-tensor int8 activations
    W8A8_DYNAMIC = "W8A8_DYNAMIC"  # int8 weights, per-token int8 activations
    W4A8_DYNAMIC = "W4A8_DYNAMIC"  # int4 weights, per-token int8 activations
    W8A16 = "W8A16"  # int8 weights, float activations
    FLOAT = "FLOAT"  # not quantized: the layer keeps its float weights

    @property
    def quantized(self) -> bool:
        return self is not QuantScheme.FLOAT


# vLLM fuses these projections into one layer; each shard is a separate weight in the file.
DEFAULT_FUSED_SHARDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "qkv_proj": ("q_proj", "k_proj", "v_proj"),
        "gate_up_proj": ("gate_proj", "up_proj"),
        "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),  # MLA (DeepSeek family)
    }
)
# The shard a model with k == v (config attention_k_eq_v) does not write.
_SHARED_WITH_K = "v_proj"


def _freeze(entries: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(entries))


@frozen
class ModelSlimDescription:
    """The parsed description: weight name -> scheme label, plus the global keys used here."""

    entries: Mapping[str, str] = field(converter=_freeze, hash=False, repr=False)
    model_quant_type: str | None = None
    version: str | None = None
    # W4A8_DYNAMIC: input features per weight group (0 or absent: per output channel).
    group_size: int | None = None

    @property
    def model_scheme(self) -> QuantScheme | None:
        """`model_quant_type` as a scheme, None when absent or not one this plugin serves."""
        return _scheme_or_none(self.model_quant_type)


def _scheme_or_none(label: str | None) -> QuantScheme | None:
    if label is None:
        return None
    try:
        return QuantScheme(label.strip().upper())
    except ValueError:
        return None


def parse_description(data: Any) -> ModelSlimDescription:
    """The description from its parsed JSON; a QuantizationError when it is not an object."""
    if not isinstance(data, Mapping):
        raise QuantizationError(
            f"{DESCRIPTION_FILE} holds a JSON {type(data).__name__}, "
            "not an object of weight name -> scheme.",
            "Re-export the model with ModelSlim, or remove the file if the model is not "
            "quantized.",
        )
    entries = with_aliases(
        {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)},
        DESCRIPTION_FILE,
    )
    model_quant_type = data.get("model_quant_type")
    version = data.get("version")
    group_size = data.get("group_size")
    return ModelSlimDescription(
        entries,
        model_quant_type if isinstance(model_quant_type, str) else None,
        version if isinstance(version, str) else None,
        group_size if isinstance(group_size, int) and not isinstance(group_size, bool) else None,
    )


@frozen
class LayerScheme:
    """The scheme of one vLLM layer and the description keys that decided it."""

    prefix: str
    scheme: QuantScheme
    weights: tuple[str, ...]

    @property
    def quantized(self) -> bool:
        return self.scheme.quantized


def _parse_scheme(key: str, label: str) -> QuantScheme:
    scheme = _scheme_or_none(label)
    if scheme is None:
        served = ", ".join(s.value for s in QuantScheme)
        raise QuantizationError(
            f'{DESCRIPTION_FILE}: "{key}" is "{label}", a scheme this plugin does not serve.',
            f"Served schemes: {served}.{did_you_mean(label.strip().upper(), served.split(', '))}"
            " Re-export the model with one of them.",
        )
    return scheme


def _missing(description: ModelSlimDescription, prefix: str, keys: Sequence[str]) -> str:
    close = did_you_mean(keys[0], description.entries.keys()) if keys else ""
    return (
        f"Check that {DESCRIPTION_FILE} was exported for this model "
        f"({len(description.entries)} entries).{close}"
    )


def scheme_for_layer(
    description: ModelSlimDescription,
    prefix: str,
    fused_shards: Mapping[str, Sequence[str]] = DEFAULT_FUSED_SHARDS,
    *,
    model_type: str | None = None,
    k_eq_v: bool = False,
) -> LayerScheme:
    """The scheme of the layer at `prefix` (e.g. `model.layers.0.self_attn.qkv_proj`).

    A layer the description names directly takes its scheme. A fused layer (its last
    name in `fused_shards`) takes the scheme its shards agree on; disagreeing or missing
    shards, and layers the description does not name, are QuantizationErrors.
    The export may name the layer differently (modelslim_names.candidate_prefixes, by
    `model_type`); every name that matches must agree. With `k_eq_v` a fused qkv layer
    needs no v_proj entry (k and v are one tensor).
    """
    found: list[LayerScheme] = []
    first_error: QuantizationError | None = None
    for name in candidate_prefixes(prefix, model_type):
        try:
            found.append(_scheme_at(description, name, fused_shards, k_eq_v))
        except _NotNamed as missing:
            first_error = first_error or missing.error
    if not found:
        assert first_error is not None
        raise first_error
    if len({f.scheme for f in found}) > 1:
        detail = ", ".join(f"{f.weights[0]}={f.scheme.value}" for f in found)
        raise QuantizationError(
            f"Layer {prefix}: {DESCRIPTION_FILE} names it more than once, with different "
            f"schemes ({detail}).",
            "Re-export the model with ModelSlim; one layer has one scheme.",
        )
    return LayerScheme(prefix, found[0].scheme, found[0].weights)


class _NotNamed(Exception):
    """The description has no entry for a name (another candidate name may have one)."""

    def __init__(self, error: QuantizationError) -> None:
        super().__init__(str(error))
        self.error = error


def _scheme_at(
    description: ModelSlimDescription,
    prefix: str,
    fused_shards: Mapping[str, Sequence[str]],
    k_eq_v: bool,
) -> LayerScheme:
    direct = f"{prefix}.weight"
    if direct in description.entries:
        return LayerScheme(prefix, _parse_scheme(direct, description.entries[direct]), (direct,))

    parent, _, name = prefix.rpartition(".")
    shards = tuple(fused_shards.get(name) or ())
    if not shards:
        raise _NotNamed(
            QuantizationError(
                f"Layer {prefix}: {DESCRIPTION_FILE} has no entry {direct}.",
                _missing(description, prefix, [direct]),
            )
        )

    def key_of(shard: str) -> str:
        return f"{parent}.{shard}.weight" if parent else f"{shard}.weight"

    if k_eq_v and key_of(_SHARED_WITH_K) not in description.entries:
        shards = tuple(s for s in shards if s != _SHARED_WITH_K)
    keys = [key_of(shard) for shard in shards]
    absent = [k for k in keys if k not in description.entries]
    if len(absent) == len(keys):
        raise _NotNamed(
            QuantizationError(
                f"Fused layer {prefix}: {DESCRIPTION_FILE} has no entry for "
                f"{', '.join(absent)} (shards {', '.join(shards)}).",
                _missing(description, prefix, absent),
            )
        )
    if absent:
        only_v = absent == [key_of(_SHARED_WITH_K)]
        raise QuantizationError(
            f"Fused layer {prefix}: {DESCRIPTION_FILE} has no entry for "
            f"{', '.join(absent)} (shards {', '.join(shards)}).",
            _missing(description, prefix, absent)
            + (
                " If the model shares one tensor for k and v (attention_k_eq_v), the "
                "layer is read with k_eq_v."
                if only_v
                else ""
            ),
        )
    schemes = [_parse_scheme(k, description.entries[k]) for k in keys]
    if len(set(schemes)) > 1:
        detail = ", ".join(f"{s}={sc.value}" for s, sc in zip(shards, schemes, strict=True))
        raise QuantizationError(
            f"Fused layer {prefix}: its shards disagree ({detail}), but vLLM runs them as "
            "one matrix with one scheme.",
            "Re-export with ModelSlim using the same scheme for "
            f"{', '.join(shards)} of every layer.",
        )
    return LayerScheme(prefix, schemes[0], tuple(keys))
