"""The scheme of a MoE layer's routed experts in a ModelSlim description.

ModelSlim names each expert's projections `<prefix>.<e>.{gate,up,down}_proj.weight`
(prefix e.g. `model.layers.1.mlp.experts`); vLLM runs all of a layer's experts as one
grouped computation, so every expert weight of the layer must be described, with one
scheme. The router (`mlp.gate`) and shared experts are ordinary layers (scheme_for_layer).
"""

from __future__ import annotations

from collections.abc import Sequence

from ascend_core.errors import QuantizationError
from ascend_core.quantization.modelslim import (
    DESCRIPTION_FILE,
    LayerScheme,
    ModelSlimDescription,
    QuantScheme,
    _parse_scheme,
)

EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
# Schemes a MoE method serves experts in (W8A8 static has no grouped kernel here).
EXPERT_SCHEMES = (QuantScheme.W8A8_DYNAMIC, QuantScheme.W4A8_DYNAMIC, QuantScheme.FLOAT)


def expert_weight_keys(
    prefix: str, num_experts: int, projections: Sequence[str] = EXPERT_PROJECTIONS
) -> tuple[str, ...]:
    """The description keys of every expert weight, expert by expert."""
    return tuple(f"{prefix}.{e}.{p}.weight" for e in range(num_experts) for p in projections)


def scheme_for_experts(
    description: ModelSlimDescription,
    prefix: str,
    num_experts: int,
    projections: Sequence[str] = EXPERT_PROJECTIONS,
) -> LayerScheme:
    """The one scheme of the `num_experts` experts under `prefix`; a QuantizationError
    naming the first expert weight that is not described, two weights that disagree, or
    a scheme no MoE method serves."""
    keys = expert_weight_keys(prefix, num_experts, projections)
    absent = [k for k in keys if k not in description.entries]
    if absent:
        more = f" (and {len(absent) - 1} more expert weights)" if len(absent) > 1 else ""
        raise QuantizationError(
            f"MoE layer {prefix}: {DESCRIPTION_FILE} has no entry {absent[0]}{more}; each "
            f"of its {num_experts} experts needs an entry for {', '.join(projections)}.",
            f"Check that {DESCRIPTION_FILE} was exported for this model "
            f"({len(description.entries)} entries); re-export it with ModelSlim.",
        )
    schemes = [_parse_scheme(k, description.entries[k]) for k in keys]
    odd = next((i for i, s in enumerate(schemes) if s is not schemes[0]), None)
    if odd is not None:
        raise QuantizationError(
            f"MoE layer {prefix}: its experts have different schemes ({keys[0]}="
            f"{schemes[0].value}, {keys[odd]}={schemes[odd].value}), but the layer runs all "
            "its experts as one grouped computation with one scheme.",
            "Re-export with ModelSlim using one scheme for every expert weight of a layer.",
        )
    if schemes[0] not in EXPERT_SCHEMES:
        *most, last = (s.value for s in EXPERT_SCHEMES)
        served = f"{', '.join(most)} or {last}"
        raise QuantizationError(
            f"MoE layer {prefix}: {DESCRIPTION_FILE} says its experts are {schemes[0].value} "
            f"({keys[0]}), and MoE experts are served as {served} only.",
            "Re-export the experts with ModelSlim as W8A8_DYNAMIC or W4A8_DYNAMIC (or keep "
            "them FLOAT).",
        )
    if schemes[0] is QuantScheme.W4A8_DYNAMIC and (description.group_size or 0) > 0:
        raise QuantizationError(
            f"MoE layer {prefix}: its experts are W4A8_DYNAMIC with per-group weight scales "
            f"(group_size {description.group_size} in {DESCRIPTION_FILE}), and W4A8_DYNAMIC "
            "experts are served with per-channel scales only; vllm-project/vllm-ascend no "
            "longer serves per-group W4A8 experts either.",
            "Re-export the experts with ModelSlim's per-channel W4A8_DYNAMIC (group_size 0), "
            "or as W8A8_DYNAMIC.",
        )
    return LayerScheme(prefix, schemes[0], keys)
