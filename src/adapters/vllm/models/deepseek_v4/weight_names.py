"""DeepSeek-V4 checkpoint names -> this room's module names.

The room keeps DeepSeek's own per-layer names (attn.wq_a, ffn.experts.E.w1, hc_attn_fn, ...),
so only the top level differs: DeepSeek's release writes embed.weight, norm.weight,
head.weight and hc_head_{fn,base,scale} at the root, transformers' save_pretrained writes
model.embed_tokens.weight, model.norm.weight, model.hc_head.hc_* and model.layers.*.
MTP layers (mtp.*) are not served and are skipped. The routed experts' w1, w3 and w2 load
into their layer's stacked w13 and w2 (expert_weight), the form the MoE port takes.
"""

from __future__ import annotations

import re

_EXPERT = re.compile(r"^(?P<moe>.+\.ffn)\.experts\.(?P<index>\d+)\.(?P<part>w[123])\.weight$")

_ROOT = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "hc_head_fn": "model.hc_head.hc_fn",
    "hc_head_base": "model.hc_head.hc_base",
    "hc_head_scale": "model.hc_head.hc_scale",
}


def checkpoint_name(name: str) -> str | None:
    """The module name a checkpoint tensor loads into; None for tensors not served."""
    if name.startswith("mtp."):
        return None
    if name in _ROOT:
        return _ROOT[name]
    if name.startswith("layers."):
        return f"model.{name}"
    return name


def expert_weight(name: str) -> tuple[str, int, str] | None:
    """(the MoE module, the expert, w1 / w2 / w3) of a routed expert's weight, by module
    name (checkpoint_name's); None for every other weight."""
    found = _EXPERT.match(name)
    if found is None:
        return None
    return found["moe"], int(found["index"]), found["part"]
