"""The FULL graph's sampled tail gives vLLM's sampler's ids (no engine).

vLLM's own Sampler (the torch-native top-k/top-p path an out-of-tree platform takes, with
the `seeded-counter-noise` patch applied and the step's counters named, as the
NPU runner samples) against `sampled_tail` on the same logits, each row's parameters
from a SamplingStage as the runner stages them: greedy, temperature-only, top-k, top-p
and top-k + top-p rows, every random row seeded. Then the patch's promise: a seeded row's
token is the same in any batch, and another counter gives another stream.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from vllm.v1.sample.ops import topk_topp_sampler
from vllm.v1.sample.sampler import Sampler

from adapters.cpu.sampling import CpuSamplingOps
from adapters.vllm.patches import seeded_noise
from adapters.vllm.worker.sampled_tail import SamplingStage, sampled_tail, sampled_tail_serves
from ascend_core.patches import REGISTRY
from integration.vllm.test_npu_greedy_tail import _metadata, _processors

VOCAB = 512
# (temperature, top_k, top_p, seed) a row; temperature 0 is greedy.
ROWS = [(0.0, VOCAB, 1.0, None), (0.8, VOCAB, 1.0, 11), (1.0, 20, 1.0, 12),
        (0.7, VOCAB, 0.9, 13), (1.3, 50, 0.8, 14), (0.0, VOCAB, 1.0, None),
        (0.5, 5, 0.95, 2**40 + 15), (2.0, VOCAB, 0.5, 16)]  # fmt: skip
COUNTERS = np.array([9, 130, 4, 57, 57, 1, 300, 12], dtype=np.int64)


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's random_sample as the NPU patches it (restored after the test)."""
    monkeypatch.setattr(topk_topp_sampler, "random_sample", topk_topp_sampler.random_sample)
    spec = next(s for s in REGISTRY.entries if s.id == "seeded-counter-noise")
    seeded_noise.use_counter_noise_for_seeds(spec)


def _idle_processors() -> Any:
    """vLLM's built-in processors with no request asking for any (min-p's count 0)."""
    processors = _processors()
    processors.argmax_invariant[0].min_p_count = 0
    return processors


def _batch(rows: list[tuple[float, int, float, int | None]]) -> Any:
    generators = {}
    for i, (_, _, _, seed) in enumerate(rows):
        if seed is not None:
            generators[i] = torch.Generator().manual_seed(seed)
    return SimpleNamespace(
        temperature_cpu=np.array([r[0] for r in rows], dtype=np.float32),
        top_k_cpu=np.array([r[1] for r in rows], dtype=np.int32),
        top_p_cpu=np.array([r[2] for r in rows], dtype=np.float32),
        generators=generators,
    )


def _vllm_ids(logits: torch.Tensor, rows: list[Any], counters: np.ndarray) -> torch.Tensor:
    batch = _batch(rows)
    temperature = torch.tensor(batch.temperature_cpu)
    metadata = _metadata(
        temperature=temperature,
        all_greedy=False,
        all_random=bool((temperature >= 1e-5).all()),
        top_k=torch.tensor(batch.top_k_cpu),
        top_p=torch.tensor(batch.top_p_cpu),
        generators=batch.generators,
        logitsprocs=_idle_processors(),
    )
    sampler = Sampler()
    sampler.topk_topp_sampler.forward = sampler.topk_topp_sampler.forward_native
    with seeded_noise.sample_counters(counters):
        return sampler(logits.clone(), metadata).sampled_token_ids.view(-1)


def _tail_ids(logits: torch.Tensor, rows: list[Any], counters: np.ndarray) -> torch.Tensor:
    arena = torch.zeros(4096, dtype=torch.uint8)
    used = [0]

    def take(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        size = n * torch.empty((), dtype=dtype).element_size()
        start = -(-used[0] // 64) * 64
        used[0] = start + size
        part = arena[start : start + size].view(dtype)
        return part, part  # host and device one memory here

    padded = len(rows) + 2  # a graph's padding rows
    stage = SamplingStage(take, padded, VOCAB, seed=0)
    stage.write(_batch(rows), len(rows))
    seq_lens = torch.zeros(padded, dtype=torch.int32)
    seq_lens[: len(rows)] = torch.from_numpy(counters)
    input_ids = torch.zeros(padded, dtype=torch.int32)
    model = SimpleNamespace(compute_logits=lambda hidden: hidden)
    tail = sampled_tail(model, input_ids, stage, seq_lens, CpuSamplingOps().exponential_noise)
    hidden = torch.cat([logits, torch.zeros(2, VOCAB)])
    out = tail(hidden)
    assert out is not None
    raw, ids = out
    assert raw is hidden  # the raw logits, untouched: a batch the tail does not serve
    assert torch.equal(input_ids, ids)  # the next step's input ids
    return ids[: len(rows)].to(torch.int64)


def test_the_tail_gives_vllms_sampler_ids_for_every_kind_of_row(patched: None) -> None:
    generator = torch.Generator().manual_seed(0)
    for trial in range(5):
        logits = torch.randn(len(ROWS), VOCAB, generator=generator) * (1 + trial)
        want = _vllm_ids(logits, ROWS, COUNTERS)
        got = _tail_ids(logits, ROWS, COUNTERS)
        assert torch.equal(got, want), (trial, got, want)
        assert got[0] == logits[0].argmax() and got[5] == logits[5].argmax()


def test_a_seeded_row_samples_the_same_token_in_any_batch(patched: None) -> None:
    logits = torch.randn(len(ROWS), VOCAB, generator=torch.Generator().manual_seed(1))
    batch = _vllm_ids(logits, ROWS, COUNTERS)
    for row in (1, 3, 6):
        alone = _vllm_ids(logits[row : row + 1], [ROWS[row]], COUNTERS[row : row + 1])
        assert alone.item() == batch[row].item()
    # Another position, another draw: over 64 positions a flat row takes many tokens.
    flat = torch.zeros(1, VOCAB)
    seen = {
        _vllm_ids(flat, [ROWS[1]], np.array([c], dtype=np.int64)).item() for c in range(64)
    }
    assert len(seen) > 50


def test_which_batches_the_sampled_tail_serves() -> None:
    sampled = {"all_greedy": False, "temperature": torch.tensor([0.8])}
    assert sampled_tail_serves(_metadata(**sampled))
    assert not sampled_tail_serves(_metadata())  # all greedy: the greedy tail's
    assert not sampled_tail_serves(_metadata(**sampled, max_num_logprobs=1))
    assert not sampled_tail_serves(_metadata(**sampled, no_penalties=False))
    min_p = _idle_processors()
    min_p.argmax_invariant[0].min_p_count = 1  # a request asked for min-p
    assert not sampled_tail_serves(_metadata(**sampled, logitsprocs=min_p))
