"""The host mirror of V2's block tables (v2_host_block_tables.py) and the decode step the
greedy tail makes from it (v2_decode_tail.py): the block-table rows and slots a step of
one token a request writes on the host are the ones V2's `_gather_block_tables_kernel` and
`_compute_slot_mappings_kernel` give (rendered here from the kernels' text, per program),
they go in the tail's one copy, and the graph's input-ids gather takes the last sampled
token only where the host says so. On the host device (the arena's copy and the recorded
ops are the same calls on any device); no engine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from adapters.vllm.worker.v2_decode_tail import LAST, SLOT, V2DecodeTail
from adapters.vllm.worker.v2_host_block_tables import PAD_SLOT, HostBlockTables, refusal

MAX_REQS, MAX_BLOCKS, MAX_TOKENS, ROWS = 8, 6, 16, 8
BLOCK_SIZES = (4, 8)


def _gather_reference(table: np.ndarray, num_blocks: np.ndarray, slots: np.ndarray,
                      out: np.ndarray, num_rows: int) -> None:  # fmt: skip
    """_gather_block_tables_kernel, one program a row (no sliding window): a batch row
    copies its request's first num_blocks entries; a row past the batch is zeroed."""
    for row in range(num_rows):
        if row >= len(slots):
            out[row] = 0
            continue
        count = num_blocks[slots[row]]
        out[row, :count] = table[slots[row], :count]


def _slots_reference(table: np.ndarray, block_size: int, enabled: bool, slots: np.ndarray,
                     positions: np.ndarray, out: np.ndarray) -> None:  # fmt: skip
    """_compute_slot_mappings_kernel at one token a request (CP 1): token i's slot from
    its request's row; the last program pads from the batch's tokens to the row's end."""
    n = len(slots)
    for i in range(n):
        p = int(positions[i])
        block = p // block_size if enabled else 0
        slot = int(table[slots[i], block]) * block_size + p % block_size
        out[i] = slot if enabled else PAD_SLOT
    out[n:] = PAD_SLOT


class _Tables:
    """What V2's BlockTables holds that the mirror and the tail touch: its per-request
    tables' shapes and staged writes, its block counts, the forward pass's buffers."""

    def __init__(self, enabled: tuple[bool, ...] = (True, True)) -> None:
        self.block_sizes = list(BLOCK_SIZES)
        self._slot_mapping_enabled = list(enabled)
        self.num_kv_cache_groups = len(BLOCK_SIZES)
        self.cp_size = 1
        self.has_sliding_window_groups = False
        self.block_tables = [SimpleNamespace(gpu=torch.zeros(MAX_REQS, MAX_BLOCKS))
                             for _ in BLOCK_SIZES]  # fmt: skip
        self.num_blocks = SimpleNamespace(np=np.zeros((len(BLOCK_SIZES), MAX_REQS), np.int32))
        self.input_block_tables = [torch.full((MAX_REQS, MAX_BLOCKS), 7, dtype=torch.int32)
                                   for _ in BLOCK_SIZES]  # fmt: skip
        self.slot_mappings = torch.full((len(BLOCK_SIZES), MAX_TOKENS), 5, dtype=torch.int64)
        self.input_block_table_ptrs = None

    @staticmethod
    def _make_ptr_tensor(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)


def _filled(rng: np.random.Generator, enabled: tuple[bool, ...] = (True, True)) -> tuple[
        HostBlockTables, _Tables]:  # fmt: skip
    """A mirror fed as V2 feeds its tables: each request's blocks staged in pieces (a new
    request's from 0, later ones appended), with V2's block counts beside them."""
    tables = _Tables(enabled)
    host = HostBlockTables([(MAX_REQS, MAX_BLOCKS)] * 2, BLOCK_SIZES, enabled)
    for g in range(2):
        for req in range(MAX_REQS):
            count = int(rng.integers(1, MAX_BLOCKS + 1))
            ids = rng.integers(1, 1000, size=count)
            first = int(rng.integers(0, count + 1))
            host.record(g, req, 0, ids[:first].tolist())
            host.record(g, req, first, iter(ids[first:].tolist()))  # an iterable, as V2's
            tables.num_blocks.np[g, req] = count
    return host, tables


def _positions(rng: np.random.Generator, slots: np.ndarray, tables: _Tables) -> np.ndarray:
    """Each request's one position, inside the blocks it holds in every group."""
    reach = [tables.num_blocks.np[g, slots] * BLOCK_SIZES[g] for g in range(2)]
    return rng.integers(0, np.minimum(*reach)).astype(np.int64)


def test_a_decode_steps_rows_and_slots_are_the_kernels() -> None:
    rng = np.random.default_rng(0)
    host, tables = _filled(rng)
    outs = [np.zeros((MAX_REQS, MAX_BLOCKS), np.int32) for _ in range(2)]  # as bound
    slots_out = np.zeros((2, MAX_TOKENS), np.int64)
    HostBlockTables.prime(slots_out)
    want = [np.zeros((MAX_REQS, MAX_BLOCKS), np.int32) for _ in range(2)]
    want_slots = np.full((2, MAX_TOKENS), PAD_SLOT, np.int64)
    # A batch of 6, then 3 (the rows and tokens the larger one left are cleared), then 5.
    for n in (6, 3, 5):
        slots = rng.permutation(MAX_REQS)[:n]
        positions = _positions(rng, slots, tables)
        host.write_step(slots, positions, tables.num_blocks.np, outs, slots_out)
        for g in range(2):
            _gather_reference(host.tables[g], tables.num_blocks.np[g], slots, want[g], MAX_REQS)
            _slots_reference(host.tables[g], BLOCK_SIZES[g], True, slots, positions,
                             want_slots[g])  # fmt: skip
            counts = tables.num_blocks.np[g, slots]
            live = np.arange(MAX_BLOCKS)[None, :] < counts[:, None]
            # The entries a request holds are the kernel's; past them (never read) zero.
            assert np.array_equal(np.where(live, outs[g][:n], -1), np.where(live, want[g][:n], -1))
            assert not outs[g][:n][~live].any()
            assert not outs[g][n:].any() and not want[g][n:].any()
        assert np.array_equal(slots_out, want_slots), n
    assert host.steps == 3


def test_a_group_without_slot_mapping_gets_padding_slots() -> None:
    rng = np.random.default_rng(1)
    host, tables = _filled(rng, enabled=(True, False))
    slots = np.array([4, 1])
    positions = _positions(rng, slots, tables)
    outs = [np.zeros((MAX_REQS, MAX_BLOCKS), np.int32) for _ in range(2)]
    slots_out = np.zeros((2, MAX_TOKENS), np.int64)
    HostBlockTables.prime(slots_out)
    host.write_step(slots, positions, tables.num_blocks.np, outs, slots_out)
    assert set(slots_out[1].tolist()) == {PAD_SLOT}
    table = host.tables[0]
    assert slots_out[0, :2].tolist() == [
        int(table[s, p // 4]) * 4 + int(p) % 4 for s, p in zip(slots, positions, strict=True)
    ]


def test_a_request_slot_reused_overwrites_its_mirror_row() -> None:
    host = HostBlockTables([(MAX_REQS, MAX_BLOCKS)], (4,), (True,))
    host.record(0, 2, 0, [11, 12, 13])
    host.record(0, 2, 0, [21])  # a new request in slot 2 (V2's overwrite=True)
    outs = [np.zeros((MAX_REQS, MAX_BLOCKS), np.int32)]
    slots_out = np.zeros((1, MAX_TOKENS), np.int64)
    HostBlockTables.prime(slots_out)
    host.write_step(np.array([2]), np.array([3]), np.array([[0, 0, 1] + [0] * 5]), outs,
                    slots_out)  # fmt: skip
    # Only the request's one block: the old request's 12 and 13 are not its.
    assert outs[0][0].tolist() == [21, 0, 0, 0, 0, 0]
    assert slots_out[0, :2].tolist() == [21 * 4 + 3, PAD_SLOT]


def test_what_keeps_v2s_kernels_is_named() -> None:
    tables = _Tables()
    assert refusal(tables, None) is None
    assert "context parallelism" in (refusal(tables, object()) or "")
    tables.has_sliding_window_groups = True
    assert "sliding-window" in (refusal(tables, None) or "")
    tables.has_sliding_window_groups, tables.cp_size = False, 2
    assert "decode context parallelism" in (refusal(tables, None) or "")


def _inputs() -> SimpleNamespace:
    return SimpleNamespace(
        query_start_loc=torch.zeros(MAX_REQS + 1, dtype=torch.int32),
        seq_lens=torch.zeros(MAX_REQS, dtype=torch.int32),
        positions=torch.zeros(MAX_TOKENS, dtype=torch.int64),
        input_ids=torch.arange(MAX_TOKENS, dtype=torch.int32) + 500,
    )


def _states() -> SimpleNamespace:
    return SimpleNamespace(last_sampled_tokens=torch.arange(MAX_REQS).view(-1, 1) * 10 + 3)


def test_the_tails_copy_sends_the_steps_block_tables_and_slots() -> None:
    rng = np.random.default_rng(2)
    host, tables = _filled(rng)
    inputs = _inputs()
    tail = V2DecodeTail(ROWS, _states(), None, torch.device("cpu"), False, inputs, tables, host)
    base, end = tail.arena.device.data_ptr(), tail.arena.device.data_ptr() + tail.arena.nbytes
    bound = [*tables.input_block_tables, tables.slot_mappings]
    # Arena slices (the graphs read them there), their values kept, before the positions,
    # and the gather kernel's pointers renewed.
    assert all(base <= t.data_ptr() < end for t in bound)
    assert all(t.data_ptr() < inputs.positions.data_ptr() for t in bound)
    assert {int(t.unique()) for t in tables.input_block_tables} == {7}
    assert set(tables.slot_mappings.flatten().tolist()) == {5}
    assert tables.input_block_table_ptrs.tolist() == [t.data_ptr() for t in
                                                      tables.input_block_tables]  # fmt: skip

    slots = np.array([3, 0, 6])
    positions = _positions(rng, slots, tables)
    tail.stage(slots, None, positions.astype(np.int32), np.array([1, 0, 1]))
    assert tail.host_inputs and tail.host_tables and tail.host_ids
    for g in range(2):
        row = tables.slot_mappings[g].tolist()
        want = np.full(MAX_TOKENS, PAD_SLOT)
        _slots_reference(host.tables[g], BLOCK_SIZES[g], True, slots, positions, want)
        assert row == want.tolist()
        got = tables.input_block_tables[g]
        for i, s in enumerate(slots):
            count = tables.num_blocks.np[g, s]
            assert got[i, :count].tolist() == host.tables[g][s, :count].tolist()
        assert not got[3:].any()  # the rows past the batch zeroed (V2's padding rows)
    assert tail.device[LAST, :4].tolist() == [1, 0, 1, 0]

    # A step V2's kernels make: only the tail's rows go, the forward buffers are theirs.
    tables.slot_mappings.fill_(-7)
    tail.stage(np.array([1]), None)
    assert not (tail.host_tables or tail.host_ids)
    assert set(tables.slot_mappings.flatten().tolist()) == {-7}
    assert tail.device[LAST].abs().sum() == 0


def test_the_graphs_input_ids_are_the_last_sampled_tokens_where_flagged() -> None:
    """record_inputs' ops (recorded in a FULL decode graph; run eagerly here): each row
    flagged takes its request's last sampled token, the others keep theirs."""
    inputs, states = _inputs(), _states()
    tail = V2DecodeTail(ROWS, states, None, torch.device("cpu"), False, inputs)
    slots = np.array([5, 2, 7])
    tail.stage(slots, None, np.array([9, 1, 4], dtype=np.int32), np.array([1, 0, 1]))
    assert tail.device[SLOT, :3].tolist() == [5, 2, 7]
    before = inputs.input_ids.clone()
    tail.record_inputs("desc", 4, vocab=32)
    assert "desc" in tail.ids_recorded
    ids = inputs.input_ids.tolist()
    assert ids[:4] == [53, before[1].item(), 73, before[3].item()]  # padding row kept
    assert ids[4:] == before[4:].tolist() and inputs.input_ids.dtype == torch.int32
    # A replay no step staged (a dummy run) gathers nothing: its flags are zeroed.
    tail.before_replay()  # the staged step's
    tail.before_replay()
    assert tail.device[LAST].abs().sum() == 0


@pytest.mark.parametrize("rows", [ROWS + 1])
def test_a_graph_the_tail_cannot_hold_gathers_nothing(rows: int) -> None:
    inputs = _inputs()
    tail = V2DecodeTail(ROWS, _states(), None, torch.device("cpu"), False, inputs)
    tail.record_inputs("big", rows, vocab=32)
    assert not tail.ids_recorded


class _Builder:
    """An attention metadata builder as the tail binds it (metadata.py's use_arena): its
    staged indices an arena slice, V2's slots taken as its own."""

    def __init__(self) -> None:
        self.kv_cache_spec = SimpleNamespace(block_size=BLOCK_SIZES[0])
        self._staging = torch.zeros(4, dtype=torch.int64)
        self._slots = torch.zeros(MAX_TOKENS, dtype=torch.int64)
        self.host_padding_slots = False
        self._arena = None
        self.staging_host = torch.zeros(0)

    def use_arena(self, arena, slots) -> None:  # type: ignore[no-untyped-def]
        self._arena = arena
        self.staging_host, self._staging = arena.twin(self._staging)
        if slots is not None and slots.shape[0] >= self._slots.shape[0]:
            self._slots, self.host_padding_slots = slots, True

    def _writable_slots(self, slots: torch.Tensor) -> torch.Tensor:
        return slots


def test_a_deferred_step_sends_the_builders_staging_in_its_one_copy_before_the_replay() -> None:
    rng = np.random.default_rng(3)
    host, tables = _filled(rng)
    tables.num_kv_cache_groups = 1  # the builders take the group's slots
    tables.block_sizes = tables.block_sizes[:1]
    tables.input_block_tables = tables.input_block_tables[:1]
    tables.slot_mappings = tables.slot_mappings[:1]
    host = HostBlockTables([(MAX_REQS, MAX_BLOCKS)], BLOCK_SIZES[:1], (True,))
    host.tables[0][:] = rng.integers(1, 1000, size=(MAX_REQS, MAX_BLOCKS))
    builder = _Builder()
    tail = V2DecodeTail(ROWS, _states(), None, torch.device("cpu"), False, _inputs(), tables,
                        host, [builder], 4)  # fmt: skip
    assert tail.defers and builder._slots.data_ptr() == tables.slot_mappings.data_ptr()
    assert builder._staging.data_ptr() < tail.arena.device.data_ptr() + tail.arena.used
    slots = np.array([2, 5])
    positions = np.array([1, 3], dtype=np.int32)
    tail.stage(slots, None, positions, np.array([1, 1]), padded=4, defer=True)
    assert tail.arena.deferred and tail.deferred_steps == 1
    builder.staging_host.copy_(torch.tensor([9, 8, 7, 6]))  # the plan, built on the host
    assert tables.slot_mappings[0, 0].item() == 5  # nothing sent yet
    tail.before_replay()
    assert not tail.arena.deferred
    size = BLOCK_SIZES[0]
    table = host.tables[0]
    want = [int(table[s, p // size]) * size + p % size
            for s, p in zip(slots, positions, strict=True)]  # fmt: skip
    # The padding tokens up to the padded count: the null block's slots; past it -1.
    assert tables.slot_mappings[0, :5].tolist() == [*want, 2 % size, 3 % size, PAD_SLOT]
    assert builder._staging.tolist() == [9, 8, 7, 6]
    # A step that may not defer (a prompt's chunk in it) copies at once, -1 padding.
    tail.stage(slots, None, positions, np.array([1, 1]), padded=4, defer=False)
    assert not tail.arena.deferred
    assert tables.slot_mappings[0, :4].tolist() == [*want, PAD_SLOT, PAD_SLOT]
