"""The torch rejection ops (adapters/torch/rejection.py) on the emulated `npu` device: the
host's results, with no device-to-host
read in the verification step (the device counts every read back). One fresh process,
since the device is registered once per process.

The random sampler's law: 20,000 requests of 2 drafts each over a vocabulary of 5, all
draws made on the device from a seeded generator (with a draft model's probabilities, and
as n-gram proposals without them). At each draft position, over the rows that reach it,
the output tokens follow the target distribution. The bound: Pearson's chi-square
statistic against the target, 4 degrees of freedom, must stay under the 1e-4 critical
value (23.51; for 4 degrees of freedom the survival function is exp(-x/2) (1 + x/2)), so
a correct sampler fails one check with probability 1e-4 at a random seed (4 checks: under
4e-4); the seed is fixed, so the test itself is deterministic. The same seed repeats the
outputs exactly, and the host's ops give the same outputs from the same draws.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("rejection_device_run.py")
SIGNIFICANCE = 1e-4


def _chi2_sf_4(x: float) -> float:
    """P(X > x) for a chi-square variable with 4 degrees of freedom."""
    return math.exp(-x / 2) * (1 + x / 2)


def _critical_4(alpha: float) -> float:
    """The x where _chi2_sf_4(x) = alpha (bisection; sf decreases in x)."""
    lo, hi = 0.0, 200.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf_4(mid) > alpha else (lo, mid)
    return lo


@pytest.fixture(scope="module")
def result() -> dict[str, object]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(RUN)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    parsed: dict[str, object] = json.loads(lines[-1].removeprefix("RESULT "))
    return parsed


def test_npu_rejection_ops_equal_the_hosts_without_a_host_read(result) -> None:  # type: ignore[no-untyped-def]
    assert result["devices"] == ["npu"]
    assert all(result["equal"].values()), result["equal"]
    assert result["syncs"] == 0


def test_the_critical_value_is_the_stated_one() -> None:
    assert round(_critical_4(SIGNIFICANCE), 2) == 23.51


@pytest.mark.parametrize("mode", ["draft_probs", "ngram"])
def test_random_outputs_follow_the_target_at_each_position(result, mode: str) -> None:  # type: ignore[no-untyped-def]
    stats = result["statistics"][mode]
    target = result["target"]
    critical = _critical_4(SIGNIFICANCE)
    for position, counts in enumerate(stats["counts"]):
        n = sum(counts)
        assert n > 1000, (position, counts)  # enough rows reach each position
        chi2 = sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, target, strict=True))
        assert chi2 < critical, (mode, position, counts, chi2)


@pytest.mark.parametrize("mode", ["draft_probs", "ngram"])
def test_random_verification_repeats_matches_the_host_and_reads_nothing_back(  # type: ignore[no-untyped-def]
    result, mode: str
) -> None:
    stats = result["statistics"][mode]
    assert stats["repeats"] and stats["host_equal"]
    assert stats["syncs"] == 0
