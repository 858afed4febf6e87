"""The upper bound of decode and prefill tokens per second on one chip family.

A decode step of B sequences per DP rank must, on every rank, read its share of the
weights (for MoE the experts the step's tokens touch), read the KV cache of its B
sequences, send its collectives' bytes over the link and do its FLOPs; the step takes
at least the longest of the three times (HBM, link, compute), each at the chip's
published peak, all perfectly overlapped. Launch and collective latencies, the
vector units and the host are not counted: real steps are slower, never faster.
"""

from __future__ import annotations

import enum
import math

from attrs import evolve, field, frozen

from ascend_core.roofline.chips import ChipFigures
from ascend_core.roofline.shape import ModelShape

DEFAULT_BATCHES = (1, 8, 32, 64, 128, 256)
ACTIVATION_BYTES = 2  # bf16 hidden states over the link


class Resource(enum.Enum):
    """What binds a step."""

    HBM = "HBM"
    LINK = "link"
    COMPUTE = "compute"


@frozen
class Setup:
    """The deployment the bound is for.

    weight_bytes: bytes per element of the decoder layers' linear weights (W8A8: 1,
    W4A8: 0.5, bf16: 2); float_bytes: the embedding, lm_head and router (model dtype).
    kv_bytes_per_token: one token's KV on one rank (memory_budget.kv_bytes_per_token).
    draft_tokens: speculative tokens per step (MTP); the bound counts every one accepted.
    """

    tp: int = 1
    dp: int = 1
    pp: int = 1
    expert_parallel: bool = False
    weight_bytes: float = 2
    float_bytes: int = 2
    int8_compute: bool = False
    kv_bytes_per_token: int = 0
    context: int = field(default=4096)
    draft_tokens: int = 0

    @property
    def devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def moe_group(self) -> int:
        """Ranks an MoE layer's experts are spread over: vLLM's EP size with
        --enable-expert-parallel, its TP x DP sharding of every expert without."""
        return self.tp * self.dp


@frozen
class DecodeRow:
    """One batch size's bound; bytes, FLOPs and times are per rank and per step."""

    batch: int  # sequences per DP rank
    weight_bytes: float
    kv_bytes: float
    link_bytes: float
    link: str  # "HCCS" or "RoCE": the slowest link the step's collectives cross
    flops: float
    hbm_s: float
    link_s: float
    compute_s: float
    tokens_per_s: float  # the whole deployment
    tokens_per_s_per_device: float
    fits: bool  # the weights a rank holds and the batch's KV fit the chip's HBM

    @property
    def step_s(self) -> float:
        return max(self.hbm_s, self.link_s, self.compute_s)

    @property
    def binds(self) -> Resource:
        times = {Resource.HBM: self.hbm_s, Resource.LINK: self.link_s}
        times[Resource.COMPUTE] = self.compute_s
        return max(times, key=lambda r: times[r])


@frozen
class PrefillBound:
    """Prefill of prompts `context` tokens long over the whole deployment."""

    flops_per_token: float
    link_bytes_per_token: float  # per rank
    compute_tokens_per_s: float
    link_tokens_per_s: float

    @property
    def tokens_per_s(self) -> float:
        return min(self.compute_tokens_per_s, self.link_tokens_per_s)

    @property
    def binds(self) -> Resource:
        if self.link_tokens_per_s < self.compute_tokens_per_s:
            return Resource.LINK
        return Resource.COMPUTE


def experts_touched(experts: int, per_token: int, tokens: int) -> float:
    """Expected distinct experts `tokens` tokens route to, each choosing `per_token`
    distinct experts uniformly: E x (1 - (1 - k/E)^T). One token: k; many: all E."""
    if experts == 0 or tokens == 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def _ring_all_reduce(tokens: float, hidden: int, group: int) -> float:
    """Bytes one rank sends in a ring all-reduce of tokens x hidden bf16 values."""
    return 2 * (group - 1) / group * tokens * hidden * ACTIVATION_BYTES if group > 1 else 0.0


def _layer_weights(shape: ModelShape, s: Setup, moe_tokens: float) -> tuple[float, float]:
    """Weight bytes a rank reads over its layers: (attention and dense MLPs, MoE layers),
    the MoE part for the experts `moe_tokens` tokens of the whole group touch."""
    kv_split = min(s.tp, shape.kv_heads) if shape.attention_kv else 1
    attention = (
        shape.attention_sharded / s.tp + shape.attention_kv / kv_split + shape.attention_replicated
    )
    dense = shape.dense_layers * shape.dense_mlp / s.tp
    touched = experts_touched(shape.experts, shape.experts_per_token, math.ceil(moe_tokens))
    moe_layer = touched * shape.expert / s.moe_group + shape.shared / s.tp
    plain = (shape.layers * attention + dense) * s.weight_bytes
    moe = shape.moe_layers * (moe_layer * s.weight_bytes + shape.router * s.float_bytes)
    return plain / s.pp, moe / s.pp


def _link_bytes(shape: ModelShape, s: Setup, tokens: float) -> tuple[float, float]:
    """Bytes a rank sends per step, (over its TP group, over the MoE group): TP
    all-reduces (attention and dense MLP outputs, and with EP the shared experts' output),
    and the MoE layers' dispatch and combine (with EP: each token to its k experts' ranks,
    int8 with a float32 scale under W8A8, bf16 back; without EP: an all-reduce of the
    gathered tokens over the TP x DP group)."""
    moe_layers = shape.moe_layers / s.pp
    tp = (shape.layers + shape.dense_layers) / s.pp * _ring_all_reduce(tokens, shape.hidden, s.tp)
    if not moe_layers:
        return tp, 0.0
    g = s.moe_group
    if s.expert_parallel and g > 1:
        # Each rank dispatches its 1/tp share of its DP group's tokens.
        remote = tokens / s.tp * shape.experts_per_token * (g - 1) / g
        dispatch = remote * (shape.hidden + 4 if s.int8_compute else shape.hidden * 2)
        combine = remote * shape.hidden * ACTIVATION_BYTES
        if shape.shared:
            tp += moe_layers * _ring_all_reduce(tokens, shape.hidden, s.tp)
        return tp, moe_layers * (dispatch + combine)
    return tp, moe_layers * _ring_all_reduce(tokens * s.dp, shape.hidden, g)


def _link_time(chip: ChipFigures, s: Setup, tp_bytes: float, moe_bytes: float) -> tuple[float, str]:
    """Seconds on the link and its name: one link carries both groups' bytes in turn;
    HCCS inside the TP group and RoCE across the MoE group run side by side."""
    tp_bw, tp_link = chip.link_bytes_per_s(s.tp)
    moe_bw, moe_link = chip.link_bytes_per_s(s.moe_group)
    if tp_link == moe_link:
        return (tp_bytes + moe_bytes) / tp_bw, tp_link
    return max(tp_bytes / tp_bw, moe_bytes / moe_bw), moe_link if moe_bytes else tp_link


def _linear_flops(shape: ModelShape, s: Setup, tokens: float) -> float:
    """Matmul FLOPs of a rank for `tokens` tokens of its DP group."""
    kv_split = min(s.tp, shape.kv_heads) if shape.attention_kv else 1
    attention = (
        shape.attention_sharded / s.tp + shape.attention_kv / kv_split + shape.attention_replicated
    )
    per_token = (
        shape.layers * attention
        + shape.dense_layers * shape.dense_mlp / s.tp
        + shape.moe_layers
        * (shape.experts_per_token * shape.expert / s.tp + shape.shared / s.tp + shape.router)
    ) / s.pp + shape.vocab * shape.hidden / s.tp
    return 2 * tokens * per_token


def decode_row(shape: ModelShape, chip: ChipFigures, s: Setup, batch: int) -> DecodeRow:
    """The bound for `batch` sequences per DP rank at `s.context` tokens of context."""
    tokens = batch * (1 + s.draft_tokens)  # the verify step carries the drafts
    plain, moe = _layer_weights(shape, s, tokens * s.dp)
    weights = plain + moe + shape.vocab * shape.hidden / s.tp * s.float_bytes
    weights += tokens * shape.hidden * s.float_bytes  # the embedding rows
    flops = _linear_flops(shape, s, tokens)
    tp_sent, moe_sent = _link_bytes(shape, s, tokens)
    if s.draft_tokens:  # MTP: its layer (the last layer's kind) and lm_head, once per draft
        draft = _draft_shape(shape)
        d_plain, d_moe = _layer_weights(draft, s, batch * s.dp)
        per_draft = d_plain + d_moe + (2 * shape.hidden * shape.hidden) * s.weight_bytes / s.tp
        per_draft += shape.vocab * shape.hidden / s.tp * s.float_bytes
        weights += s.draft_tokens * per_draft * s.pp
        lm_head = 2 * batch * shape.vocab * shape.hidden / s.tp
        flops += s.draft_tokens * (_linear_flops(draft, s, batch) * s.pp + lm_head)
        d_tp, d_moe = _link_bytes(draft, s, batch)
        tp_sent += s.draft_tokens * d_tp * s.pp
        moe_sent += s.draft_tokens * d_moe * s.pp
    kv = batch * s.context * s.kv_bytes_per_token
    attn_flops = tokens * s.context * shape.attention_flops_decode * shape.layers / s.tp / s.pp
    rate = chip.cube_int8_ops.value if s.int8_compute else chip.cube_bf16_flops.value
    compute_s = flops / rate + attn_flops / chip.cube_bf16_flops.value
    link_s, link_name = _link_time(chip, s, tp_sent, moe_sent)
    hbm_s = (weights + kv) / chip.hbm_bytes_per_s.value
    step = max(hbm_s, link_s, compute_s)
    total = tokens * s.dp / step
    held = held_weight_bytes(shape, s)
    return DecodeRow(
        batch=batch,
        weight_bytes=weights,
        kv_bytes=kv,
        link_bytes=tp_sent + moe_sent,
        link=link_name,
        flops=flops + attn_flops,
        hbm_s=hbm_s,
        link_s=link_s,
        compute_s=compute_s,
        tokens_per_s=total,
        tokens_per_s_per_device=total / s.devices,
        fits=held + kv <= chip.hbm_bytes.value,
    )


def held_weight_bytes(shape: ModelShape, s: Setup) -> float:
    """The weights one rank holds: its share of every expert, embedding and lm_head."""
    plain, _ = _layer_weights(shape, s, 0)
    experts = shape.moe_layers * shape.experts * shape.expert / s.moe_group * s.weight_bytes
    shared = shape.moe_layers * (
        shape.shared / s.tp * s.weight_bytes + shape.router * s.float_bytes
    )
    return plain + (experts + shared) / s.pp + 2 * shape.vocab * shape.hidden / s.tp * s.float_bytes


def _draft_shape(shape: ModelShape) -> ModelShape:
    """One MTP layer: a decoder layer of the model's last kind, no lm_head of its own."""
    moe = 1 if shape.moe_layers else 0
    return evolve(shape, layers=1, dense_layers=1 - moe, moe_layers=moe, vocab=0)


def prefill_bound(shape: ModelShape, chip: ChipFigures, s: Setup) -> PrefillBound:
    """Prompts of `s.context` tokens: FLOPs per token (matmuls and causal attention over
    half the prompt on average) against every device's cube throughput, and the
    collectives' bytes per token against the link. Weights and KV reads are not counted:
    a prefill chunk reuses each weight across its tokens."""
    linear = 2 * shape.per_token_params
    attention = s.context / 2 * shape.attention_flops_prefill * shape.layers
    rate = chip.cube_int8_ops.value if s.int8_compute else chip.cube_bf16_flops.value
    seconds_per_token = linear / (rate * s.devices) + attention / (
        chip.cube_bf16_flops.value * s.devices
    )
    tp_bytes, moe_bytes = _link_bytes(shape, s, 1.0)
    link_s, _ = _link_time(chip, s, tp_bytes, moe_bytes)
    # A DP group's ranks each send these bytes for each token the group prefills.
    link_tps = 1 / link_s if link_s else math.inf
    return PrefillBound(
        flops_per_token=linear + attention,
        link_bytes_per_token=tp_bytes + moe_bytes,
        compute_tokens_per_s=1 / seconds_per_token,
        link_tokens_per_s=link_tps * s.dp,
    )
