"""Which sequence lengths the attention builders hand the fused op's host-side lists.

vLLM's runner keeps a CPU copy of the step's sequence lengths that is exact except for
speculative decoding under async scheduling (there it assumes every draft accepted) and a
draft model's own passes (vLLM's padded draft batch lowers only the device lengths by the
rejected drafts); n-gram runs without async scheduling and without a draft forward, so its
1 + k-token decodes take the CPU copy, no read back.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from adapters.vllm.attention.metadata import host_lens_exact, host_seq_lens


def _spec(method: str) -> SimpleNamespace:
    """What host_lens_exact asks of vLLM's SpeculativeConfig."""
    return SimpleNamespace(
        use_eagle=lambda: method in ("eagle", "eagle3", "mtp"),
        uses_draft_model=lambda: method == "draft_model",
    )


def _config(spec: str | None, async_scheduling: bool) -> SimpleNamespace:
    return SimpleNamespace(
        speculative_config=None if spec is None else _spec(spec),
        scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
    )


@pytest.mark.parametrize(
    ("spec", "async_scheduling", "exact"),
    [
        (None, True, True),
        (None, False, True),
        ("ngram", False, True),
        ("eagle", True, False),
        ("mtp", False, False),
        ("draft_model", False, False),
    ],
)
def test_host_lengths_are_exact_unless_speculative_under_async_scheduling_or_drafting(
    spec: str | None, async_scheduling: bool, exact: bool
) -> None:
    assert host_lens_exact(_config(spec, async_scheduling)) is exact  # type: ignore[arg-type]


def test_exact_lengths_come_from_the_cpu_copy_else_from_the_device_tensor() -> None:
    # Request 1 verified 1 + 3 tokens last step and 2 drafts were rejected: the optimistic
    # CPU copy says 12, the device's seq_lens 10.
    cm = SimpleNamespace(
        num_reqs=2,
        seq_lens_cpu_upper_bound=torch.tensor([5, 12, 0]),
        seq_lens=torch.tensor([5, 10, 0]),
    )
    assert host_seq_lens(cm, exact=True).tolist() == [5, 12]  # type: ignore[arg-type]
    assert host_seq_lens(cm, exact=False).tolist() == [5, 10]  # type: ignore[arg-type]
