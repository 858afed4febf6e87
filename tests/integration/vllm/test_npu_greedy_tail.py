"""Which batches take the FULL graph's greedy ids instead of vLLM's sampler: those whose
sampler would give the argmax of the raw logits, judged on vLLM's own SamplingMetadata
and its built-in logits processors (no engine)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm.v1.sample.logits_processor.builtin import (
    LogitBiasLogitsProcessor,
    MinPLogitsProcessor,
    MinTokensLogitsProcessor,
)
from vllm.v1.sample.logits_processor.state import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata

from adapters.vllm.worker.npu_model_runner import greedy_sample_served


def _processors(biases: Any = None, min_toks: Any = None) -> LogitsProcessors:
    """vLLM's built-in processors as a runner installs them, in the state of a batch
    (made without their device buffers: only their per-request state is read)."""
    bias = LogitBiasLogitsProcessor.__new__(LogitBiasLogitsProcessor)
    bias.biases = biases or {}
    tokens = MinTokensLogitsProcessor.__new__(MinTokensLogitsProcessor)
    tokens.min_toks = min_toks or {}
    min_p = MinPLogitsProcessor.__new__(MinPLogitsProcessor)  # argmax-invariant
    return LogitsProcessors([bias, tokens, min_p])


class _Custom:
    """A logits processor of a user's: its state unknown here, so never judged idle."""

    def is_argmax_invariant(self) -> bool:
        return False


def _metadata(**changes: Any) -> SamplingMetadata:
    fields: dict[str, Any] = {
        "temperature": None,
        "all_greedy": True,
        "all_random": False,
        "top_p": None,
        "top_k": None,
        "generators": {},
        "max_num_logprobs": None,
        "no_penalties": True,
        "prompt_token_ids": None,
        "frequency_penalties": torch.tensor([]),
        "presence_penalties": torch.tensor([]),
        "repetition_penalties": torch.tensor([]),
        "output_token_ids": [],
        "allowed_token_ids_mask": None,
        "bad_words_token_ids": {},
        "logitsprocs": _processors(),
    }
    fields.update(changes)
    return SamplingMetadata(**fields)


def test_a_plain_greedy_batch_takes_the_graphs_ids() -> None:
    assert greedy_sample_served(_metadata())


@pytest.mark.parametrize(
    "changes",
    [
        {"all_greedy": False},  # a sampled request in the batch
        {"max_num_logprobs": 0},
        {"logprob_token_ids": {0: [1]}},
        {"no_penalties": False},
        {"allowed_token_ids_mask": torch.zeros(1, 8, dtype=torch.bool)},
        {"bad_words_token_ids": {0: [[1]]}},
        {"logitsprocs": _processors(biases={0: {1: 5.0}})},
        {"logitsprocs": _processors(min_toks={0: (4, [], {2})})},
        {"logitsprocs": LogitsProcessors([_Custom()])},  # one we do not know
    ],
    ids=["sampled", "logprobs", "logprob-ids", "penalties", "allowed", "bad-words",
         "logit-bias", "min-tokens", "custom-processor"],
)
def test_a_batch_whose_sampler_moves_the_argmax_keeps_the_sampler(changes) -> None:
    assert not greedy_sample_served(_metadata(**changes))
