"""Ops: the math a model layer or attention backend asks of the device.

Every device adapter implements the same semantics; the host adapter's is the
reference. Shapes use T for tokens, H for heads, D for head size, B for
sequences in the batch.
"""

from __future__ import annotations

import abc
import enum
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import frozen

if TYPE_CHECKING:
    import torch


class IndexDtype(enum.Enum):
    """An integer tensor type, by its torch name."""

    INT32 = "int32"  # vLLM's block tables; what torch_npu's attention takes
    INT64 = "int64"  # what the host's native kernels take


@frozen
class AttentionPlanNeeds:
    """What a device's attention ops read from an AttentionPlan beyond its common fields.

    block_table_dtype: the integer type of every block table in the plan.
    token_rows: whether the plan carries every new token as a row of its own
        (token_block_table, token_seq_lens).
    """

    block_table_dtype: IndexDtype = IndexDtype.INT32
    token_rows: bool = False


@frozen
class AttentionPart:
    """The decode sequences (one new token each) or the prefill sequences (more; with
    vLLM's MLA split also one-token requests past its boundary) of a step, laid out as
    one padded [b, S] query, S = max_query_len. Sequences with no new token are in
    neither part.

    seqs: [b] int64, their rows of the batch (of block_table, seq_lens).
    actual_query_lens / actual_seq_lens: their new tokens and context lengths as host ints
        (torch_npu's attention takes its lengths as host lists).
    query_start_loc: [b + 1] int64 offsets of their tokens among the part's own.
    query_lens / seq_lens: [b] int64, the same lengths as tensors.
    block_table: [b, max_blocks] their block-table rows (AttentionPlanNeeds' dtype).
    tokens: [n] int64, the batch token of each of their n tokens, in order.
    padded_rows: [n] int64, the row (i * S + s) of each of those tokens in [b * S].
    gather: [b * S] int64, the batch token each padded row takes; padding rows take
        num_actual_tokens (one past the last token: a zero row the adapter appends).
    in_order: the part is the whole batch of a uniform step (every sequence S tokens, a
        padding one S padding tokens): row i * S + s is batch token i * S + s, so tokens,
        padded_rows and gather are the identity over b * S, and an adapter may take the
        query and write the output as they are, without them.
    """

    seqs: torch.Tensor
    actual_query_lens: tuple[int, ...]
    actual_seq_lens: tuple[int, ...]
    max_query_len: int
    query_start_loc: torch.Tensor
    query_lens: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    tokens: torch.Tensor
    padded_rows: torch.Tensor
    gather: torch.Tensor
    in_order: bool = False

    @property
    def num_seqs(self) -> int:
        return len(self.actual_query_lens)

    @property
    def is_decode(self) -> bool:
        return self.max_query_len == 1


@frozen
class AttentionPlan:
    """The batch layout of one step's attention calls over a paged KV cache, built once
    per step (adapters/torch/attention_plan.py) from the runner's host copies and shared by
    every layer. Every tensor is on the device (the derived indices moved there in one
    copy a step); the host-side lengths are tuples of ints.

    query_start_loc: [B + 1] cumulative query-token offsets of each sequence.
    seq_lens: [B] context length of each sequence, counting this step's tokens.
    block_table: [B, max_blocks] cache block ids of each sequence (needs' dtype).
    slot_mapping: [num_actual_tokens] flat cache slot of each new token (vLLM's, cut at
        num_actual_tokens); None where the caller writes the cache itself.
    max_query_len / max_seq_len / num_actual_tokens: host-side, so adapters need no sync.
    query_start_loc_host / seq_lens_host: the offsets and lengths as host ints.
    decode / prefill: the two parts (None: no such sequence this step).
    token_block_table / token_seq_lens: with AttentionPlanNeeds.token_rows, every new
        token as a decode row: its sequence's block-table row [T, max_blocks], and its
        context length [T] int64 (the cache before the step, and the new tokens up to
        itself); else None.

    With fixed maximum sizes, every tensor here can live in a persistent buffer written
    in place each step (graph mode). A uniform decode batch padded to a captured size
    (num_actual_tokens == B) has every sequence in the decode part: a padding sequence
    with context length 0 and the padding token at its row; the backend gives padding
    tokens a slot that no request owns (vLLM's null block), never -1. A speculative
    verify step (every request 1 + k tokens, num_actual_tokens == B * (1 + k)) is one
    part over all B sequences likewise, a padding one with 1 + k padding tokens.
    """

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor | None
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc_host: tuple[int, ...]
    seq_lens_host: tuple[int, ...]
    decode: AttentionPart | None
    prefill: AttentionPart | None
    token_block_table: torch.Tensor | None = None
    token_seq_lens: torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def parts(self) -> tuple[AttentionPart, ...]:
        """The decode part, then the prefill part, those that exist."""
        return tuple(part for part in (self.decode, self.prefill) if part is not None)


class Ops(abc.ABC):
    """Device ops with one meaning across devices."""

    #: What this device's paged_attention reads from the step's AttentionPlan.
    plan_needs: ClassVar[AttentionPlanNeeds] = AttentionPlanNeeds()

    @abc.abstractmethod
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x * rsqrt(mean(x^2) + eps) * weight over the last dimension."""

    @abc.abstractmethod
    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""

    @abc.abstractmethod
    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """silu(x[..., :d]) * x[..., d:] for a last dimension of 2d."""

    @abc.abstractmethod
    def rotary_embedding(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate query [T, Hq*D] and key [T, Hk*D] by the cache rows at `positions`.

        cos_sin_cache is [max_position, rotary_dim] with cos in the first half.
        """

    @abc.abstractmethod
    def mrope(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        mrope_section: tuple[int, int, int],
        interleaved: bool,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Multimodal rotary embedding (M-RoPE): rotary_embedding with 3-D positions.

        positions is [3, T]: the temporal, height and width position of each token (equal
        rows for text tokens). The rotary_dim / 2 frequencies split into mrope_section
        (t, h, w; summing to rotary_dim / 2): frequency j takes its cos/sin row from the
        position of its section. Chunked (interleaved False, Qwen2-VL/Qwen2.5-VL): the
        first t frequencies from the temporal row, the next h from height, the last w
        from width. Interleaved (Qwen3-VL): frequency j from height when j % 3 == 1 and
        j < 3h, from width when j % 3 == 2 and j < 3w, else temporal.
        """

    @abc.abstractmethod
    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Store key/value [T, Hk, D] at flat slots (block * block_size + offset).

        Rows past len(slot_mapping) are padding. Every slot given must be a cache slot,
        each at most once: vLLM pads with -1, which the backend cuts at
        num_actual_tokens or (a batch padded to a captured graph size) sends to slots of
        vLLM's null block (the host adapter also skips -1; a device adapter need not check).
        """

    @abc.abstractmethod
    def paged_attention(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        plan: AttentionPlan,
        scale: float,
        out: torch.Tensor,
        *,
        window: int | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal attention of query [T, Hq, D] over each sequence's cached context.

        Caches are [num_blocks, block_size, Hk, D]. A query token at index i of a
        sequence with q_len new tokens and context seq_len sees cache positions
        0 .. p, p = seq_len - q_len + i. Covers prefill, decode and chunked prefill.
        Writes [T, Hq, D] into `out` and returns it.

        window: a sliding window of that many positions, the token's own included: it
            sees p - window + 1 .. p only (vLLM's and transformers' convention). Block
            table entries wholly before every query's window may be vLLM's null block:
            they are never read.
        sinks: [Hq] learned sink logits (gpt-oss): one more logit per head in each
            softmax's denominator, with no value row: out = sum_j e^s_j v_j /
            (e^sink + sum_j e^s_j), computed in float32.
        """

    @abc.abstractmethod
    def encoder_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        seq_lens: tuple[int, ...],
        scale: float,
    ) -> torch.Tensor:
        """Bidirectional attention without a cache, within each of consecutive sequences
        (a vision tower's images, or the windows of one): query [T, Hq, D], key and value
        [T, Hk, D] (Hq a multiple of Hk), T = sum(seq_lens); a token sees every token of
        its own sequence and no other. Zero lengths are allowed (vLLM pads its offsets).
        Returns a new [T, Hq, D] tensor in query's dtype.

        seq_lens are host ints: torch_npu's attention takes its lengths as host lists.
        """

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        """The host-side arguments of the ops `paged_attention` launches for `plan`, one
        dict per launch in launch order, keyed by the op's parameter names: what a
        captured graph's updatable ops must be given before they run again
        (DeviceGraphs.update). Empty on a device whose ops read all of the plan from
        device memory."""
        return []
