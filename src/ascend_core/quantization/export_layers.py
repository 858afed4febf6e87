"""What a quantized export holds, per layer kind: its format, read from the files alone.

The support table (ascend_core.support.quant_matrix) judges each (format, layer kind,
device); the plan refuses what it does not serve before any weight loads, naming the
first layer of that kind, the scheme and the file that says so.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import evolve, frozen

from ascend_core.errors import AscendError
from ascend_core.quantization.fp8 import Projection, dense_projections, expert_projections
from ascend_core.quantization.methods import QuantMethod
from ascend_core.quantization.modelslim import DESCRIPTION_FILE, parse_description

CONFIG_FILE = "config.json"


class QuantFormat(enum.Enum):
    """A quantized format as exports write it; the value is how messages name it."""

    MODELSLIM_W8A8 = "ModelSlim W8A8 (int8 weights, static per-tensor int8 activations)"
    MODELSLIM_W8A8_DYNAMIC = "ModelSlim W8A8_DYNAMIC (int8 weights, per-token int8 activations)"
    MODELSLIM_W8A16 = "ModelSlim W8A16 (int8 weights, float activations)"
    MODELSLIM_W4A8_DYNAMIC = "ModelSlim W4A8_DYNAMIC (int4 weights, per-token int8 activations)"
    MODELSLIM_W4A8_PER_GROUP = ("ModelSlim W4A8_DYNAMIC with per-group weight scales "
                                "(group_size > 0, weight_scale_second)")
    MODELSLIM_UNKNOWN = "a ModelSlim scheme this plugin does not know"
    CT_INT8_W8A8 = "compressed-tensors int8 W8A8 (symmetric weights and activations)"
    CT_INT8_ASYMMETRIC = "compressed-tensors int8 W8A8 with asymmetric weights or activations"
    CT_W4A16 = ("compressed-tensors W4A16 (int4 pack-quantized weights, group-wise or "
                "per-channel scales, symmetric or with zero points)")
    CT_WNA16 = "compressed-tensors weight-only int2-int8 (WNA16) other than plain W4A16"
    CT_FP8_CHANNEL = ("compressed-tensors FP8 (fp8 e4m3 weights with a scale per output "
                      "channel, activations dynamic per token: FP8_DYNAMIC)")
    CT_FP8_BLOCK = ("compressed-tensors FP8 block-quantized (fp8 e4m3 weights with a scale "
                    "per [n, k] block: FP8_BLOCK)")
    CT_FP8 = ("compressed-tensors FP8 with per-tensor weight scales or static activation "
              "scales")
    CT_OTHER = "a compressed-tensors scheme of another kind"
    FP8_CHANNEL = "FP8 (fp8 weights with per-tensor scales, or quantized to fp8 at load)"
    FP8_BLOCK = ("FP8 block-quantized (fp8 e4m3 weights, weight_scale_inv per "
                 "weight_block_size block)")


class LayerKind(enum.Enum):
    """Which layers a format applies to; the value is how messages name them."""

    LINEAR = "linear layers"
    EXPERTS = "MoE experts"
    EMBEDDING = "the embedding and LM head"


@frozen
class QuantizedLayers:
    """Layers of one kind stored in one format: the first named, how many, and the evidence.

    says: what the files say of the first layer, in their own words (a ModelSlim label,
    a compressed-tensors group).
    """

    format: QuantFormat
    kind: LayerKind
    first: str
    count: int
    says: str
    # Block-quantized formats: the [n, k] weight block, and the decoder's linear layers
    # as the config sizes them (the plan checks that the blocks fit each rank's slice; for
    # W4A8_DYNAMIC linears, that the split fits the int4 layout).
    block: tuple[int, int] | None = None
    projections: tuple[Projection, ...] = ()


_MODELSLIM_FORMATS = {
    "W8A8": QuantFormat.MODELSLIM_W8A8,
    "W8A8_DYNAMIC": QuantFormat.MODELSLIM_W8A8_DYNAMIC,
    "W8A16": QuantFormat.MODELSLIM_W8A16,
    "W4A8_DYNAMIC": QuantFormat.MODELSLIM_W4A8_DYNAMIC,
}
_EXPERT = re.compile(r"\.experts\.\d+\.")
_EMBEDDING = ("embed_tokens", "lm_head", "wte", "word_embeddings")


def _kind_of_weight(name: str) -> LayerKind:
    if _EXPERT.search(name):
        return LayerKind.EXPERTS
    if any(part in _EMBEDDING for part in name.split(".")):
        return LayerKind.EMBEDDING
    return LayerKind.LINEAR


def _grouped(found: Sequence[tuple[QuantFormat, LayerKind, str, str]]
             ) -> tuple[QuantizedLayers, ...]:
    """One entry per (format, kind), in the order first met."""
    firsts: dict[tuple[QuantFormat, LayerKind], tuple[str, str]] = {}
    counts: dict[tuple[QuantFormat, LayerKind], int] = {}
    for fmt, kind, layer, says in found:
        firsts.setdefault((fmt, kind), (layer, says))
        counts[(fmt, kind)] = counts.get((fmt, kind), 0) + 1
    return tuple(
        QuantizedLayers(fmt, kind, layer, counts[(fmt, kind)], says)
        for (fmt, kind), (layer, says) in firsts.items()
    )


def modelslim_layers(description: Mapping[str, Any]) -> tuple[QuantizedLayers, ...]:
    """The quantized weights of a ModelSlim description, by format and layer kind."""
    parsed = parse_description(description)
    entries = parsed.entries
    found = []
    for key, label in entries.items():
        if not key.endswith(".weight"):
            continue
        scheme = label.strip().upper()
        if scheme == "FLOAT":
            continue
        fmt = _MODELSLIM_FORMATS.get(scheme, QuantFormat.MODELSLIM_UNKNOWN)
        says = f"{DESCRIPTION_FILE} says {key} is {label}"
        prefix = key.removesuffix(".weight")
        if fmt is QuantFormat.MODELSLIM_W4A8_DYNAMIC:
            # Per-group exports carry a second-level scale per group of inputs; vllm-ascend
            # reads group_size from the description (its linear method's default is 256).
            second = f"{prefix}.weight_scale_second"
            if (parsed.group_size or 0) > 0:
                fmt = QuantFormat.MODELSLIM_W4A8_PER_GROUP
                says += f" with group_size {parsed.group_size}"
            elif parsed.group_size is None and second in entries:
                fmt = QuantFormat.MODELSLIM_W4A8_PER_GROUP
                says += f" and describes {second}"
        found.append((fmt, _kind_of_weight(key), prefix, says))
    return _grouped(found)


# Names of modules a compressed-tensors group's targets and ignore list are matched against.
def _sample_modules(config: Mapping[str, Any]) -> dict[LayerKind, tuple[str, str]]:
    """A representative module per kind the model has: (its name, its class name)."""
    samples = {LayerKind.LINEAR: ("model.layers.0.self_attn.q_proj", "Linear")}
    experts = next((config.get(k) for k in ("num_experts", "n_routed_experts",
                                             "num_local_experts") if config.get(k)), None)
    if isinstance(experts, int) and experts > 0:
        first = config.get("first_k_dense_replace") or 0
        layer = first if isinstance(first, int) else 0
        samples[LayerKind.EXPERTS] = (f"model.layers.{layer}.mlp.experts.0.gate_proj", "Linear")
    return samples


def _matches(patterns: Any, name: str, class_name: str) -> bool:
    if not isinstance(patterns, Sequence) or isinstance(patterns, str):
        return False
    for pattern in patterns:
        if not isinstance(pattern, str):
            continue
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif pattern in (name, class_name):
            return True
    return False


def _ct_format(group: Mapping[str, Any], fmt: Any) -> tuple[QuantFormat, str]:
    raw_weights, raw_acts = group.get("weights"), group.get("input_activations")
    weights: Mapping[str, Any] = raw_weights if isinstance(raw_weights, Mapping) else {}
    acts: Mapping[str, Any] | None = raw_acts if isinstance(raw_acts, Mapping) else None
    bits, kind = weights.get("num_bits"), weights.get("type")
    strategy = weights.get("strategy")
    words = [f"weights {kind} {bits}-bit {strategy}"]
    if weights.get("group_size"):
        words.append(f"group {weights.get('group_size')}")
    if weights.get("block_structure"):
        words.append(f"block {weights.get('block_structure')}")
    if weights.get("symmetric") is False:
        words.append("asymmetric")
    if acts is None:
        words.append("float activations")
    else:
        words.append(f"activations {acts.get('type')} {acts.get('num_bits')}-bit "
                     f"{acts.get('strategy')}{' dynamic' if acts.get('dynamic') else ''}"
                     f"{'' if acts.get('symmetric', True) else ' asymmetric'}")
    if isinstance(fmt, str):
        words.append(f"format {fmt}")
    scheme = ", ".join(words)
    if kind == "float":
        dynamic_acts = acts is None or (acts.get("dynamic") is True
                                        and acts.get("type") == "float")
        if bits == 8 and dynamic_acts and strategy == "channel":
            return QuantFormat.CT_FP8_CHANNEL, scheme
        if bits == 8 and dynamic_acts and strategy == "block":
            return QuantFormat.CT_FP8_BLOCK, scheme
        return QuantFormat.CT_FP8, scheme
    if kind != "int":
        return QuantFormat.CT_OTHER, scheme
    if acts is None:
        plain_w4 = (bits == 4 and strategy in ("group", "channel")
                    and weights.get("actorder") != "group" and fmt in (None, "pack-quantized"))
        return (QuantFormat.CT_W4A16 if plain_w4 else QuantFormat.CT_WNA16), scheme
    if (bits == 8 and acts.get("type") == "int" and acts.get("num_bits") == 8
            and strategy in ("channel", "tensor")
            and acts.get("strategy") in ("token", "tensor")):
        if weights.get("symmetric", True) and acts.get("symmetric", True):
            return QuantFormat.CT_INT8_W8A8, scheme
        return QuantFormat.CT_INT8_ASYMMETRIC, scheme
    return QuantFormat.CT_OTHER, scheme


def compressed_tensors_layers(config: Mapping[str, Any]) -> tuple[QuantizedLayers, ...]:
    """The layers each config group of a compressed-tensors quantization_config covers."""
    qconfig = config.get("quantization_config")
    if not isinstance(qconfig, Mapping):
        return ()
    groups = qconfig.get("config_groups")
    ignore = qconfig.get("ignore") or []
    found = []
    for module, class_name in _sample_modules(config).values():
        kind = _kind_of_weight(f"{module}.weight")
        if _matches(ignore, module, class_name):
            continue
        for name, group in (groups or {}).items() if isinstance(groups, Mapping) else ():
            if isinstance(group, Mapping) and _matches(group.get("targets"), module, class_name):
                fmt, scheme = _ct_format(group, group.get("format") or qconfig.get("format"))
                found.append((fmt, kind, module,
                              f"{CONFIG_FILE} quantization_config.config_groups.{name} "
                              f"(targets {list(group.get('targets') or [])}) covers it "
                              f"({scheme})"))
                break
    return _with_blocks(_grouped(found), config, _ct_block(groups))


def _ct_block(groups: Any) -> tuple[int, int] | None:
    """The first block_structure of a compressed-tensors config's groups."""
    for group in groups.values() if isinstance(groups, Mapping) else ():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        block = weights.get("block_structure") if isinstance(weights, Mapping) else None
        if block:
            return _pair(block)
    return None


def _pair(block: Any) -> tuple[int, int] | None:
    if (isinstance(block, Sequence) and len(block) == 2
            and all(isinstance(v, int) and v > 0 for v in block)):
        return (block[0], block[1])
    return None


def _with_blocks(layers: tuple[QuantizedLayers, ...], config: Mapping[str, Any],
                 block: tuple[int, int] | None) -> tuple[QuantizedLayers, ...]:
    """Block-quantized linear layers and experts carry their block and the config's
    projections."""
    if block is None:
        return layers
    shapes = {LayerKind.LINEAR: dense_projections, LayerKind.EXPERTS: expert_projections}
    return tuple(
        evolve(g, block=block, projections=shapes[g.kind](config))
        if g.format in (QuantFormat.CT_FP8_BLOCK, QuantFormat.FP8_BLOCK)
        and g.kind in shapes else g
        for g in layers
    )


def fp8_layers(config: Mapping[str, Any] | None) -> tuple[QuantizedLayers, ...]:
    """The layers of an fp8 checkpoint (quant_method fp8), or of an unquantized model
    quantized to fp8 at load (--quantization fp8, no quantization_config)."""
    qconfig = (config or {}).get("quantization_config")
    if isinstance(qconfig, Mapping):
        block = qconfig.get("weight_block_size")
        fmt = QuantFormat.FP8_BLOCK if block else QuantFormat.FP8_CHANNEL
        says = (f"{CONFIG_FILE} quantization_config stores it in fp8 (activation_scheme "
                f"{qconfig.get('activation_scheme')}"
                + (f", weight_block_size {list(block)})" if block else ")"))
    else:
        fmt, says = QuantFormat.FP8_CHANNEL, "--quantization fp8 quantizes it to fp8 at load"
    found = [(fmt, k, module, says) for k, (module, _) in _sample_modules(config or {}).items()]
    block = _pair(qconfig.get("weight_block_size")) if isinstance(qconfig, Mapping) else None
    return _with_blocks(_grouped(found), config or {}, block)


def quantized_layers(
    method: QuantMethod,
    config: Mapping[str, Any] | None,
    description: Mapping[str, Any] | None,
) -> tuple[QuantizedLayers, ...]:
    """What the files hold under `method` (the one the plan serves with); () when the
    files are not readable as such (detection reports that, in its own words)."""
    try:
        if method is QuantMethod.ASCEND and description is not None:
            # W4A8_DYNAMIC linears carry the config's projections (the plan checks their
            # split and int4 layout).
            return tuple(
                evolve(g, projections=dense_projections(config or {}))
                if (g.format, g.kind) == (QuantFormat.MODELSLIM_W4A8_DYNAMIC, LayerKind.LINEAR)
                else g
                for g in modelslim_layers(description)
            )
        if method is QuantMethod.COMPRESSED_TENSORS and config is not None:
            return compressed_tensors_layers(config)
        if method is QuantMethod.FP8:
            return fp8_layers(config)
    except (AscendError, AttributeError, TypeError):
        return ()
    return ()
