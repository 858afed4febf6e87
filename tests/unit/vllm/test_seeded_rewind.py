"""The runner's seeded rewind on a generator without offsets (the host's CPU generator):
a discarded sample leaves the request's stream where it was, as vLLM's offset rewind does
on CUDA, and vLLM's own loop never reaches set_offset for it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from adapters.vllm.worker.seeded_rewind import SeededRewindMixin, uses_offset


class _VllmRunner:
    """vLLM's two steps as they touch generators: sample draws, bookkeeping rewinds."""

    def __init__(self, generators: dict[int, torch.Generator], discard: list[bool]) -> None:
        self.input_batch = SimpleNamespace(generators=generators, num_reqs=len(discard))
        self.discard_request_mask = SimpleNamespace(np=np.array(discard))

    def _sample(self, logits: Any, spec: Any) -> list[float]:
        return [
            torch.rand(1, generator=self.input_batch.generators[i]).item()
            for i in sorted(self.input_batch.generators)
        ]

    def _bookkeeping_sync(self) -> str:
        for i in np.nonzero(self.discard_request_mask.np[: self.input_batch.num_reqs])[0]:
            gen = self.input_batch.generators.get(int(i))
            if gen is not None:
                gen.set_offset(gen.get_offset() - 4)  # raises on a CPU generator
        return "done"


class _Runner(SeededRewindMixin, _VllmRunner):
    pass


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_cpu_generators_have_no_offset() -> None:
    assert not uses_offset(torch.Generator())


def test_vllm_rewind_alone_fails_on_a_cpu_generator() -> None:
    runner = _VllmRunner({0: _seeded(1)}, [True])
    runner._sample(None, None)
    try:
        runner._bookkeeping_sync()
    except RuntimeError as error:
        assert "offset" in str(error)
    else:
        raise AssertionError("the CPU generator took an offset; the rewind is not needed")


def test_discarded_sample_is_undone_and_kept_ones_advance() -> None:
    generators = {0: _seeded(1), 1: _seeded(2)}
    runner = _Runner(generators, [True, False])  # request 0 is mid-prefill
    first = runner._sample(None, None)
    assert runner._bookkeeping_sync() == "done"
    assert set(runner.input_batch.generators) == {0, 1}  # both back after bookkeeping
    second = runner._sample(None, None)
    assert second[0] == first[0]  # the discarded draw is drawn again
    assert second[1] != first[1]  # the kept one moved on
    assert second[0] == torch.rand(1, generator=_seeded(1)).item()


def test_no_discard_leaves_streams_alone() -> None:
    runner = _Runner({0: _seeded(3)}, [False])
    first = runner._sample(None, None)
    runner._bookkeeping_sync()
    assert runner._sample(None, None) != first
