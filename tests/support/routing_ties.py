"""Routing near-ties of a DeepSeek-V3-style MoE model, from the float32 oracle.

A MoE layer's router picks groups, then experts, by sigmoid score (plus the
e_score_correction_bias). Where two choices are within bf16's reach of each other, two
bf16 runs of the same math (another summation order, another rank's rounding) may take
different experts at that token, and the outputs move by nats although the output's own
top-2 gap was wide: the near-tie is inside the layer. This module measures it: the
model of support.quant_reference (each quantized linear as its scheme's integer math; or
the float model for an unquantized dir), in float32, teacher-forced on a prompt and the
tokens generated so far, and at the last position each MoE layer's margins: the topk_group-th
best group score minus the next group's, and among the experts of the chosen groups the
top_k-th score minus the next one's.

`tp`: the row-parallel layers vLLM splits over TP ranks (attention's o_proj, the dense
MLP's and the shared experts' down_proj) quantize each rank's slice of a token with its
own per-token scale, as the plugin's and vllm-project/vllm-ascend's W8A8_DYNAMIC linear
methods do (each rank quantizes the input it holds), and the ranks' outputs are summed;
the routed experts stay whole (expert parallelism gives each its own rank).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import torch

from support.quant_reference import DESCRIPTION, F32, FakeQuantLinear, _load

# A parting from the reference is accepted at an output near-tie (the reference's top-2
# gap below NEAR_TIE_NATS: the bf16 tolerance of test_generate_on_emulated_npu.py) or a
# routing near-tie (a margin below ROUTING_TIE in sigmoid score: on the W8A8_DYNAMIC
# npu-ep-mla export, MoE layer 1's router scores differ between bf16 and the float32
# oracle by up to 0.022 on the EP tests' prompts, median 0.0095, measured 2026-12-07).
NEAR_TIE_NATS = 0.25
ROUTING_TIE = 0.02
ROW_PARALLEL = ("self_attn.o_proj", "mlp.down_proj", "shared_experts.down_proj")


class RankSlicedLinear(torch.nn.Module):
    """A W8A8_DYNAMIC row-parallel linear at TP `tp`: each rank's slice of the input
    quantized with its own per-token scale (s = max|x_r| / 127), the ranks' products summed."""

    def __init__(self, inner: FakeQuantLinear, tp: int) -> None:
        super().__init__()
        self.inner, self.tp = inner, tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(F32)
        k = xf.shape[-1] // self.tp
        out = None
        for r in range(self.tp):
            part = xf[..., r * k:(r + 1) * k]
            s = part.abs().amax(dim=-1, keepdim=True) / 127.0
            q = torch.where(s > 0, torch.round(part / torch.where(s > 0, s, 1.0)), 0.0)
            acc = q.clamp(-128, 127).to(torch.int64) @ self.inner.w[:, r * k:(r + 1) * k].T
            y = (acc.to(F32) * self.inner.w_scale * s).to(x.dtype)
            out = y if out is None else out + y
        assert out is not None
        return out


@functools.cache
def oracle(export_dir: str, tp: int) -> torch.nn.Module:
    """A fresh float32 fake-quant model of the export with its row-parallel W8A8_DYNAMIC
    layers split over `tp` ranks (cached per export and TP); the float model of a dir
    without a quantization description (TP changes nothing there but rounding)."""
    root = Path(export_dir).resolve()
    if not (root / DESCRIPTION).exists():
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(str(root), dtype=F32).eval()
    model = _load.__wrapped__(str(root), F32)  # not the shared one
    for name, module in list(model.named_modules()):
        if (tp > 1 and isinstance(module, FakeQuantLinear) and name.endswith(ROW_PARALLEL)
                and module.scheme == "W8A8_DYNAMIC"):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RankSlicedLinear(module, tp))
    return model


@attrs.frozen
class RoutingTies:
    """At the last position: the output's top-2 gap (nats) and each MoE layer's smallest
    routing margin (group or expert, in sigmoid score)."""

    top2_gap: float
    margins: dict[str, float]

    @property
    def smallest(self) -> float:
        return min(self.margins.values(), default=float("inf"))

    def describe(self) -> str:
        layer = min(self.margins, key=self.margins.__getitem__)
        return (f"float32 oracle: top-2 gap {self.top2_gap:.3f}, routing margin "
                f"{self.smallest:.4f} in {layer}")


def _margins(router: torch.nn.Module, hidden: torch.Tensor) -> float:
    """The last token's smallest routing margin in a DeepseekV3TopkRouter."""
    h = hidden.reshape(-1, router.hidden_dim)[-1:].to(F32)
    scores = (h @ router.weight.to(F32).T).sigmoid() + router.e_score_correction_bias.to(F32)
    groups, per = router.num_group, router.num_experts // router.num_group
    group_scores = scores.view(groups, per).topk(2, dim=-1).values.sum(-1)
    ranked = group_scores.sort(descending=True)
    k = router.topk_group
    group_margin = float(ranked.values[k - 1] - ranked.values[k]) if k < groups else float("inf")
    allowed = torch.zeros(groups, dtype=torch.bool)
    allowed[ranked.indices[:k]] = True
    experts = scores.view(groups, per)[allowed].reshape(-1).sort(descending=True).values
    expert_margin = float(experts[router.top_k - 1] - experts[router.top_k])
    return min(group_margin, expert_margin)


def routing_ties(export_dir: str | Path, tp: int, prompt: Sequence[int],
                 generated: Sequence[int]) -> RoutingTies:
    """The oracle on prompt + generated: the last position's top-2 gap and routing margins."""
    model = oracle(str(export_dir), tp)
    routers = {name: m for name, m in model.named_modules()
               if type(m).__name__ == "DeepseekV3TopkRouter"}
    assert routers, "not a DeepSeek-V3-style MoE model"
    margins: dict[str, float] = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, name=name: margins.__setitem__(name, _margins(mod, inp[0])))
        for name, m in routers.items()
    ]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([list(prompt) + list(generated)])).logits[0, -1]
    finally:
        for hook in hooks:
            hook.remove()
    top = torch.log_softmax(logits.to(F32), dim=-1).topk(2).values
    return RoutingTies(float(top[0] - top[1]), margins)


def loud_partings(ids: Sequence[Sequence[int]], reference: Sequence[Sequence[int]],
                  top2: Sequence[Sequence[Sequence[float]]],
                  tie_at: Callable[[int, Sequence[int]], RoutingTies]) -> list[str]:
    """Each sequence's first step off the reference, printed with the reference's top-2
    gap; returned, those at no near-tie: a gap of NEAR_TIE_NATS or more and, at that
    token, `tie_at(sequence, tokens generated before it)`'s smallest routing margin
    ROUTING_TIE or more (the oracle is asked only past an output near-tie)."""
    shown, loud = [], []
    for seq, (got, want) in enumerate(zip(ids, reference, strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        if step is None:
            continue
        first, second = top2[seq][step]
        what = f"prompt {seq} step {step}: {got[step]} for {want[step]} (gap {first - second:.3f}"
        if first - second < NEAR_TIE_NATS:
            shown.append(what + ")")
            continue
        ties = tie_at(seq, want[:step])
        what += f"; {ties.describe()})"
        shown.append(what)
        if ties.smallest >= ROUTING_TIE:
            loud.append(what)
    print("partings:", shown or "none")
    return loud
