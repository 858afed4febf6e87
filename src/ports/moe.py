"""MoE ops: route tokens to experts, run the experts as one grouped computation, combine.

Shapes: T tokens, H hidden, E experts (global), k experts per token, I expert
intermediate size, N = rows of a permutation (at most T*k): the first sum(group_sizes)
are the local experts' rows, any after them padding (a device whose shapes may not depend
on the routing, as in an NPU graph, keeps all T*k).
"""

from __future__ import annotations

import abc
import enum
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


class Scoring(enum.Enum):
    """How router logits become expert scores."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"


@frozen
class Routing:
    """One MoE layer's routing rule, as the model's config states it.

    Grouped top-k (DeepSeek-V3): experts are split into `num_expert_group` equal
    groups; a group's score is the sum of its two best scores when a correction bias
    is given, else its best score; only the `topk_group` best groups compete.
    The correction bias changes which experts win, never their weights.
    Weights are renormalised over the k chosen when `renormalize`, then multiplied by
    `routed_scaling_factor`.
    """

    top_k: int
    scoring: Scoring = Scoring.SOFTMAX
    renormalize: bool = False
    num_expert_group: int | None = None
    topk_group: int | None = None
    routed_scaling_factor: float = 1.0

    @property
    def grouped(self) -> bool:
        return bool(self.num_expert_group and self.num_expert_group > 1 and self.topk_group)


class GateKind(enum.Enum):
    """How an expert's gate/up projection becomes its down projection's input."""

    SILU = "silu"  # silu(gate) * up; w13's gate rows first, then up
    # gpt-oss (vLLM's "swigluoai"): gate/up rows interleaved (gate0, up0, gate1, ...);
    # gate clamped above at `limit`, up to [-limit, limit]; (up + 1) * gate * sigmoid(alpha * gate).
    SWIGLU_OAI = "swigluoai"
    # DeepSeek-V4 (config.swiglu_limit): gate rows first, then up, as SILU; gate clamped
    # above at `limit`, up to [-limit, limit]; silu(gate) * up.
    SILU_CLAMPED = "silu_clamped"


@frozen
class ExpertMlp:
    """One MoE layer's expert MLP: its gate activation and whether its two projections
    carry biases ([E_local, 2I] after the gate/up matmul, [E_local, H] after the down)."""

    gate: GateKind = GateKind.SILU
    alpha: float = 1.702  # SWIGLU_OAI only (vLLM's and transformers' defaults)
    limit: float = 7.0  # SWIGLU_OAI and SILU_CLAMPED
    biased: bool = False


SILU_MLP = ExpertMlp()


@frozen
class Permutation:
    """Token rows sorted by local expert, and how to put them back.

    source_rows: [N] int64 index into the flattened [T*k] (token, slot) pairs of each row;
        undefined for the padding rows past sum(group_sizes).
    group_sizes: [E_local] number of rows per local expert, in expert order (int64).
    num_tokens: T; top_k: k.
    """

    source_rows: torch.Tensor
    group_sizes: torch.Tensor
    num_tokens: int
    top_k: int


class MoeOps(abc.ABC):
    """The MoE role of a device adapter."""

    def check(  # noqa: B027
        self, routing: Routing, num_experts: int, dtype_name: str, mlp: ExpertMlp = SILU_MLP
    ) -> None:
        """Raise UnsupportedFeatureError (with the limit) for what this device's MoE ops
        cannot run; called when a layer is loaded, before any request. Default: all."""

    @abc.abstractmethod
    def route(
        self,
        router_logits: torch.Tensor,
        routing: Routing,
        correction_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [T, k] float32, expert ids [T, k] int32) from logits [T, E]."""

    @abc.abstractmethod
    def permute(
        self, hidden: torch.Tensor, local_ids: torch.Tensor, num_local_experts: int
    ) -> tuple[torch.Tensor, Permutation]:
        """Rows of hidden [T, H] for each (token, slot), sorted by local expert.

        local_ids: [T, k] local expert of each slot, -1 for an expert on another rank
        (expert parallel): those slots are left out. Returns [N, H] and the permutation;
        rows past sum(group_sizes) are padding, of undefined content.
        """

    @abc.abstractmethod
    def grouped_mlp(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        mlp: ExpertMlp = SILU_MLP,
        biases: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Each group of rows through its expert: silu(x W1^T) * (x W3^T), then W2^T.

        rows [N, H] in expert order; w13 [E_local, 2I, H] (gate rows first, then up);
        w2 [E_local, H, I]. Returns [N, H] in the rows' dtype; rows past sum(group_sizes)
        are padding (undefined in, undefined out).
        mlp: another gate (GateKind; gpt-oss's interleaved, clamped SwiGLU) and, with
        mlp.biased, `biases` = (b13 [E_local, 2I], b2 [E_local, H]), each added to its
        projection's output (rounded to the rows' dtype) before the next step.
        """

    @abc.abstractmethod
    def unpermute(
        self, rows: torch.Tensor, permutation: Permutation, weights: torch.Tensor
    ) -> torch.Tensor:
        """[T, H]: each token's sum of its rows times their routing weights [T, k]
        (slots left out by permute add nothing, padding rows are never read); in the
        rows' dtype."""

    def experts(
        self,
        hidden: torch.Tensor,
        local_ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        mlp: ExpertMlp = SILU_MLP,
        biases: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """[T, H]: the unquantized experts end to end: permute, grouped_mlp, unpermute.

        A device with one kernel for the three overrides this, with their contract
        (their roundings; the order of a GEMM's sums is the kernel's own).
        """
        rows, permutation = self.permute(hidden, local_ids, w13.shape[0])
        out_rows = self.grouped_mlp(
            rows, permutation.group_sizes, w13, w2, mlp=mlp, biases=biases
        )
        return self.unpermute(out_rows, permutation, weights)

    def traces_in_graph(self, w13: torch.Tensor, w2: torch.Tensor) -> bool:
        """Whether a compiled graph can trace `route` and `experts` over these weights:
        ops with shape functions only, nothing read back to the host. Default False:
        the MoE layer stays one opaque op that the graph calls."""
        return False
