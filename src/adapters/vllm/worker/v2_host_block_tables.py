"""A host mirror of V2's block tables: a decode step's block tables and slots made on the host.

vLLM's V2 runner keeps each request's block table on the device only (`BlockTables`,
vllm/v1/worker/gpu/block_table.py: `StagedWriteTensor`s written from staged host lists by
`_apply_write_kernel`), and a step gathers its rows into the forward pass's tables
(`_gather_block_tables_kernel`) and computes the slot of each token from them
(`_compute_slot_mappings_kernel`): two Triton launches every step, before a FULL decode
graph's replay. The host knows every value they read: the block ids the scheduler gave
each request (the staged writes), the block counts (`num_blocks`, V2's own host array) and
the step's positions. So the NPU's V2 runner keeps a copy of every staged write here
(`record`, called beside V2's `stage_write`), and for a step of one token a request it
writes the step's rows and slots on the host (`write_step`) into the host halves of V2's
forward-pass buffers (slices of the greedy tail's staging arena, v2_decode_tail.py), which
the tail's one copy sends.

What the kernels give, for such a step (`n` requests, each at position p = its computed
tokens, padded to a captured size):
- block-table row i: request slot s_i's row, its first `num_blocks` entries (the rest
  are never read: the attention reads a request's blocks up to its length; written 0
  here), and the rows past the batch 0 (the kernel zeroes them, and the rows a larger
  batch left);
- slot of token i, group g: `table[s_i, p // block_size] * block_size + p % block_size`,
  and every slot past the batch's tokens vLLM's padding slot (-1), as the kernel pads the
  whole row; a group whose slot mapping is disabled gets -1 everywhere.

Context parallelism and sliding-window groups (whose leading entries the gather nulls)
keep V2's kernels (`refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

# vLLM's PAD_SLOT_ID (vllm/v1/attention/backends/utils.py): a slot nothing reads or writes.
PAD_SLOT = -1


class HostBlockTables:
    """Every request's block table on the host, kept beside V2's device ones, and a decode
    step's forward-pass rows and slots written from it."""

    def __init__(
        self, shapes: Sequence[tuple[int, int]], block_sizes: Sequence[int],
        slot_mapping_enabled: Sequence[bool],
    ) -> None:  # fmt: skip
        """`shapes`: each group's [max requests, max blocks] (V2's `block_tables[g]`)."""
        assert len(shapes) == len(block_sizes) == len(slot_mapping_enabled)
        self.tables = [np.zeros(shape, dtype=np.int32) for shape in shapes]
        self.block_sizes = [int(b) for b in block_sizes]
        self.enabled = [bool(e) for e in slot_mapping_enabled]
        # The rows and tokens the last host-written step filled: past them the host halves
        # hold zeros (block tables) and the padding slot (slots).
        self._rows = 0
        self._tokens = 0
        self.steps = 0

    def record(self, group: int, index: int, start: int, values: Iterable[int]) -> None:
        """A write V2 staged into request `index`'s row of `group` at `start`."""
        ids = np.fromiter(values, dtype=np.int64)
        self.tables[group][index, start : start + len(ids)] = ids

    def write_step(
        self, slots: np.ndarray, positions: np.ndarray, num_blocks: np.ndarray,
        tables_out: Sequence[np.ndarray], slots_out: np.ndarray,
        null_padding: tuple[int, int] | None = None,
    ) -> None:  # fmt: skip
        """The forward-pass block tables (`tables_out[g]`, [max requests, max blocks]) and
        slots (`slots_out`, [groups, max tokens]) of a step of one token a request: request
        slot `slots[i]` at position `positions[i]`; `num_blocks` [groups, max requests],
        V2's host block counts. Writes only what changed since the last step; the host
        halves start zeroed (tables) and all padding slots (`prime`). `null_padding`
        (padded tokens, block size): group 0's padding tokens up to the padded count take
        slots of the null block (token i slot i % block size: what the attention
        builder's own padding gives, adapters/vllm/attention/metadata.py), not -1."""
        n = len(slots)
        rows = max(n, self._rows)
        for g, table in enumerate(self.tables):
            out = tables_out[g]
            counts = num_blocks[g, slots]
            cols = np.arange(table.shape[1])
            out[:n] = np.where(cols[None, :] < counts[:, None], table[slots], 0)
            out[n:rows] = 0
            row = slots_out[g]
            if self.enabled[g]:
                size = self.block_sizes[g]
                blocks = table[slots, positions // size].astype(np.int64)
                row[:n] = blocks * size + positions % size
            else:
                row[:n] = PAD_SLOT
            row[n : max(n, self._tokens)] = PAD_SLOT
        tokens = n
        if null_padding is not None:
            padded, size = null_padding
            slots_out[0, n:padded] = np.arange(n, padded) % size
            tokens = max(n, padded)
        self._rows = n
        self._tokens = tokens
        self.steps += 1

    @staticmethod
    def prime(slots_out: np.ndarray) -> None:
        """The host slots before any step: all padding."""
        slots_out[:] = PAD_SLOT


def refusal(block_tables: Any, pcp_manager: Any) -> str | None:
    """Why V2's `BlockTables` keep their kernels for every step, or None."""
    if pcp_manager is not None:
        return "prefill context parallelism prepares the step's attention itself"
    if block_tables.num_kv_cache_groups == 0:
        return "no KV cache groups"
    if block_tables.cp_size != 1:
        return "decode context parallelism (interleaved block columns)"
    if block_tables.has_sliding_window_groups:
        return "sliding-window groups (the gather nulls blocks behind the window)"
    return None


def mirror(block_tables: Any) -> HostBlockTables:
    """A HostBlockTables of V2's `block_tables`, fed every write V2 stages from now on."""
    host = HostBlockTables(
        [tuple(t.gpu.shape) for t in block_tables.block_tables],
        block_tables.block_sizes,
        block_tables._slot_mapping_enabled,
    )
    for group, table in enumerate(block_tables.block_tables):
        table.stage_write = _recording(table.stage_write, host, group)
        table.stage_write_elem = _recording_elem(table.stage_write_elem, host, group)
    return host


def _recording(stage_write: Any, host: HostBlockTables, group: int) -> Any:
    def stage(index: int, start: int, x: Iterable[int]) -> None:
        values = list(x)
        stage_write(index, start, values)
        host.record(group, index, start, values)

    return stage


def _recording_elem(stage_write_elem: Any, host: HostBlockTables, group: int) -> Any:
    def stage(index: int, x: int) -> None:
        stage_write_elem(index, x)
        host.record(group, index, 0, [x])

    return stage
