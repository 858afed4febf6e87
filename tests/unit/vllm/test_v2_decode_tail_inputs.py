"""V2's decode inputs made on the host (v2_decode_tail.py): the query offsets, sequence
lengths and positions of a step of one token a request are the values V2's own copy and
`_prepare_pos_seq_lens_kernel` give, and they go in the tail's one copy (on the host
device here: the arena's copy is the same op on any device)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from adapters.vllm.worker.staging_arena import ALIGN
from adapters.vllm.worker.v2_decode_tail import REAL, SAMPLES, SLOT, STEP_ROWS, V2DecodeTail

MAX_REQS, MAX_TOKENS, ROWS = 8, 32, 8


def _buffers() -> SimpleNamespace:
    """V2's InputBuffers as the tail sees them, with values a bind must keep."""
    return SimpleNamespace(
        query_start_loc=torch.arange(MAX_REQS + 1, dtype=torch.int32) * 3,
        seq_lens=torch.full((MAX_REQS,), 9, dtype=torch.int32),
        positions=torch.arange(MAX_TOKENS, dtype=torch.int64) + 100,
    )


def _v2_reference(computed: np.ndarray, buffers: SimpleNamespace) -> tuple[list, list, list]:
    """V2's prepare_inputs (query offsets, padded with the token count) and its
    _prepare_pos_seq_lens_kernel (lengths, padding rows 0; one position a row, the rest
    of the positions left as they were) at one token a request."""
    n = len(computed)
    offsets = np.empty(MAX_REQS + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(np.ones(n, dtype=np.int32), out=offsets[1 : n + 1])
    offsets[n + 1 :] = n
    lengths = np.zeros(MAX_REQS, dtype=np.int32)
    lengths[:n] = computed + 1
    positions = buffers.positions.clone()
    positions[:n] = torch.from_numpy(computed.astype(np.int64))
    return offsets.tolist(), lengths.tolist(), positions.tolist()


def test_bound_inputs_keep_their_values_as_arena_slices() -> None:
    buffers = _buffers()
    before = {k: v.clone() for k, v in vars(buffers).items()}
    tail = V2DecodeTail(ROWS, None, None, torch.device("cpu"), False, buffers)
    base = tail.arena.device.data_ptr()
    for name, value in before.items():
        bound = getattr(buffers, name)
        assert bound.tolist() == value.tolist(), name
        assert bound.dtype == value.dtype and bound.shape == value.shape, name
        # A slice of the device arena, aligned (the graphs read it at this address).
        assert base <= bound.data_ptr() < base + tail.arena.nbytes, name
        assert (bound.data_ptr() - base) % ALIGN == 0, name
    assert tail.device.data_ptr() == base  # the tail's rows first
    others = (buffers.query_start_loc, buffers.seq_lens, tail.device)
    assert all(buffers.positions.data_ptr() > t.data_ptr() for t in others)  # positions last


def test_a_decode_step_sends_v2s_offsets_lengths_and_positions_in_the_one_copy() -> None:
    buffers = _buffers()
    tail = V2DecodeTail(ROWS, None, None, torch.device("cpu"), False, buffers)
    slots = np.array([5, 2, 7])
    computed = np.array([11, 40, 3], dtype=np.int32)
    want = _v2_reference(computed, buffers)
    idx = tail.stage(slots, np.array([1, 1, 0]), computed)
    assert tail.host_inputs and tail.host_input_steps == 1
    assert idx.tolist() == [5, 2, 7]
    assert tail.device[SAMPLES, :3].tolist() == [1, 1, 0]
    assert tail.device[REAL, :3].tolist() == [1, 1, 1]
    got = (buffers.query_start_loc.tolist(), buffers.seq_lens.tolist(),
           buffers.positions.tolist())  # fmt: skip
    assert got == want


def test_a_step_without_host_inputs_sends_the_tail_rows_only() -> None:
    buffers = _buffers()
    tail = V2DecodeTail(ROWS, None, None, torch.device("cpu"), False, buffers)
    tail.stage(np.array([1, 2]), None, np.array([7, 8], dtype=np.int32))
    # V2's own copy and kernel write the device slices themselves on the next step.
    buffers.query_start_loc.fill_(-1)
    buffers.seq_lens.fill_(-2)
    buffers.positions.fill_(-3)
    idx = tail.stage(np.array([4]), None)
    assert not tail.host_inputs and tail.host_input_steps == 1
    assert idx.tolist() == [4] and tail.device[SLOT].tolist() == [4] + [0] * (ROWS - 1)
    assert tail.device[SAMPLES:].abs().sum() == 0
    assert set(buffers.query_start_loc.tolist()) == {-1}
    assert set(buffers.seq_lens.tolist()) == {-2}
    assert set(buffers.positions.tolist()) == {-3}


def test_without_bound_inputs_the_tail_makes_none() -> None:
    tail = V2DecodeTail(ROWS, None, None, torch.device("cpu"), False)
    tail.stage(np.array([3]), np.array([1]), np.array([5], dtype=np.int32))
    assert tail.inputs is None and not tail.host_inputs
    assert tail.arena.nbytes == tail.arena.used == STEP_ROWS * ROWS * 8
