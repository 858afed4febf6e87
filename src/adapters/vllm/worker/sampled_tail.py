"""A FULL decode graph's sampled tail: temperature, top-k/top-p and seeded noise, replayed.

A greedy batch's argmax is recorded after the model in each FULL decode graph
(npu_model_runner._greedy_tail). A batch that samples would leave the graph for vLLM's
sampler: a dozen launches and, per seeded request, a draw from its own generator. Each
FULL graph is therefore captured a second time with this tail after the model: vLLM's
sampler's arithmetic on the step's logits, every row's parameters read from slices of
the staging arena (written on the host with the step's other inputs, sent in its one
copy), and each row's noise keyed by (seed, the position it samples), as the
`seeded-counter-noise` patch keys a seeded row in an eager step. A row without a seed
gets a key drawn on the host for the step.

`sampled_tail_serves` says which batches the tail answers exactly as vLLM's sampler
(with that patch) would: greedy, temperature, top-k and top-p rows, nothing that reads
more than the logits. The others sample outside the graph from its raw logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from adapters.torch.counter_noise import row_keys

# vLLM's sampler's threshold below which a temperature means greedy.
SAMPLING_EPS = 1e-5

# The logits processors vLLM always installs that change an argmax, each idle while none
# of the batch's requests asked for it (its per-request state is empty).
IDLE_WHEN_EMPTY = {"LogitBiasLogitsProcessor": "biases", "MinTokensLogitsProcessor": "min_toks"}
# The argmax-invariant ones (they reshape a random row's distribution): idle likewise.
IDLE_INVARIANT = {"MinPLogitsProcessor": "min_p_count"}


def _idle(processors: Any, idle: dict[str, str]) -> bool:
    for processor in processors:
        state = idle.get(type(processor).__name__)
        if state is None or getattr(processor, state, None):
            return False
    return True


def plain_batch(metadata: Any) -> bool:
    """Whether the batch asks nothing of the sampler beyond each row's logits and its
    temperature, top-k and top-p: no logprobs, penalties, allowed or bad words, active
    logits processors or thinking budget."""
    if metadata.max_num_logprobs is not None or metadata.logprob_token_ids:
        return False
    if not metadata.no_penalties:
        return False
    if metadata.allowed_token_ids_mask is not None or metadata.bad_words_token_ids:
        return False
    if not _idle(metadata.logitsprocs.non_argmax_invariant, IDLE_WHEN_EMPTY):
        return False
    holder = getattr(metadata, "thinking_budget_state_holder", None)
    return holder is None or not holder.has_tracked_requests()


def greedy_sample_served(metadata: Any) -> bool:
    """Whether vLLM's sampler would give this batch the argmax of its raw logits."""
    return bool(metadata.all_greedy) and plain_batch(metadata)


def sampled_tail_serves(metadata: Any) -> bool:
    """Whether the sampled tail gives this batch vLLM's sampler's ids (with seeded rows'
    noise by counter): a plain batch with at least one random row and no active
    argmax-invariant processor (min-p)."""
    if metadata.all_greedy or not plain_batch(metadata):
        return False
    return _idle(metadata.logitsprocs.argmax_invariant, IDLE_INVARIANT)


class SamplingStage:
    """Each row's temperature, top-k, top-p and noise seed: host slices written for a
    step, device slices the graph reads (both in the staging arena)."""

    FIELDS = (("temperature", torch.float32), ("top_k", torch.int32),
              ("top_p", torch.float32), ("seed", torch.int64))  # fmt: skip

    def __init__(self, take: Callable[[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]],
                 rows: int, vocab: int, seed: int) -> None:  # fmt: skip
        self.rows = rows
        self.vocab = vocab
        self.host: dict[str, torch.Tensor] = {}
        self.device: dict[str, torch.Tensor] = {}
        for name, dtype in self.FIELDS:
            self.host[name], self.device[name] = take(rows, dtype)
        self._rng = np.random.default_rng(seed)
        self.clear()
        for name, _ in self.FIELDS:  # a capture reads them before any step is sent
            self.device[name].copy_(self.host[name])

    @staticmethod
    def nbytes(rows: int) -> int:
        return rows * sum(torch.empty((), dtype=d).element_size() for _, d in SamplingStage.FIELDS)

    def clear(self) -> None:
        """Every row greedy (a padding row's parameters)."""
        self.host["temperature"].zero_()
        self.host["top_k"].fill_(self.vocab)
        self.host["top_p"].fill_(1.0)
        self.host["seed"].zero_()

    def write(self, batch: Any, num_reqs: int) -> None:
        """The batch's rows (vLLM's input batch: its host sampling arrays and generators);
        rows past it greedy. A row without a seed gets a fresh key for this step."""
        n = num_reqs
        self.host["temperature"].numpy()[:n] = batch.temperature_cpu[:n]
        self.host["top_k"].numpy()[:n] = batch.top_k_cpu[:n]
        self.host["top_p"].numpy()[:n] = batch.top_p_cpu[:n]
        seeds = self.host["seed"].numpy()
        seeds[:n] = self._rng.integers(0, 1 << 62, size=n, dtype=np.int64)
        for row, generator in batch.generators.items():
            if row < n:
                seeds[row] = generator.initial_seed()
        self.host["temperature"][n:].zero_()
        self.host["top_k"][n:].fill_(self.vocab)
        self.host["top_p"][n:].fill_(1.0)


def sampled_tail(
    model: Any, input_ids: torch.Tensor, stage: SamplingStage, seq_lens: torch.Tensor,
    noise: Callable[[torch.Tensor, int], torch.Tensor],
) -> Callable[[Any], tuple[Any, Any] | None]:  # fmt: skip
    """hidden states -> (raw logits, sampled ids), the ids written into the runner's input
    ids (as the greedy tail's): vLLM's Sampler.sample for a plain batch, step by step
    (float32 logits, greedy ids, temperature, top-k/top-p through vLLM's function as the
    NPU patches it, softmax, Exp(1) noise, the greedy rows' ids where temperature < eps).
    Row b's noise is keyed by (its seed, seq_lens[b]): the position its token takes."""

    def tail(hidden_states: Any) -> tuple[Any, Any] | None:
        from vllm.v1.sample.ops import topk_topp_sampler

        logits = model.compute_logits(hidden_states)
        if logits is None:
            return None
        rows = logits.shape[0]
        scores = logits.to(torch.float32)
        greedy = scores.argmax(dim=-1)
        temperature = stage.device["temperature"][:rows]
        is_greedy = temperature < SAMPLING_EPS
        scores = scores.div(torch.where(is_greedy, 1.0, temperature).unsqueeze(1))
        scores = topk_topp_sampler.apply_top_k_top_p(
            scores, stage.device["top_k"][:rows], stage.device["top_p"][:rows]
        )
        probs = scores.softmax(dim=-1, dtype=torch.float32)
        keys = row_keys(stage.device["seed"][:rows], seq_lens[:rows])
        q = noise(keys, probs.shape[1])
        sampled = probs.div_(q).argmax(dim=-1)
        ids = torch.where(is_greedy, greedy, sampled).to(torch.int32)
        input_ids[:rows].copy_(ids)
        return logits, ids

    return tail
