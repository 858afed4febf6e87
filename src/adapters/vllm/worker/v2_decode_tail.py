"""V2's greedy sampling and post-step update, recorded in its FULL decode graphs.

After a FULL decode replay vLLM's V2 runner samples (`Sampler.__call__`: the rows'
positions and ids gathered, `gumbel_sample`'s kernel, an argmax and a gather, a fill and
`get_num_sampled_and_rejected`'s kernel) and updates the requests' device state
(`postprocess_sampled`: `post_update`'s kernel): a dozen host calls a step around one
replay. For a plain greedy batch every one of those values is known in the graph or on
the host, so each FULL decode graph that records its logits (npu_graphs_v2.py) records
this tail after them:

- the rows' greedy ids (V2's greedy: the argmax of the logits, first index on a tie),
  into `sampled`;
- `post_update`'s writes, for the rows the host says sample (`num_sampled`, 1 or 0 for a
  one-token chunk of a prompt) and are real (`computed`): the last sampled token, the
  token appended to the request's ids and its output count, the total length and the
  computed tokens. Each as an `index_add_` of (new - old) masked by those counts: a
  padding row (request slot 0, counts 0) adds nothing, so it never races a real row.

The rows' request slots, both counts and the input-ids flag are one pinned host buffer and
one device buffer ([4, rows], int64), the first slice of a staging arena
(staging_arena.py): the step writes them on the host and sends them in one copy, which
stands for V2's own copy of its request slots (`idx_mapping` is the first row's view).
With V2's input buffers bound to the arena (`bind_inputs`: its query offsets, sequence
lengths and positions become the arena's next slices), a decode step of one token a
request and no drafts writes those on the host too and the same copy sends them: V2's copy
of the query offsets and its `_prepare_pos_seq_lens_kernel` launch are left out (the
runner's `_staging_tail`). A step the tail does not serve (a FULL replay that samples
otherwise) sends zero counts, and a replay no step staged (a dummy run) finds them zeroed,
so the tail writes nothing there and V2's own sampler and update run as before. With V2's
block tables bound too (`tables`: a host mirror of them, v2_host_block_tables.py, and the
forward pass's block tables and slots as the arena's slices before the positions), such a
step's block-table rows and slots are written on the host and go in the same copy: no
`_gather_block_tables_kernel` and no `_compute_slot_mappings_kernel`. Its input ids are
the last sampled tokens of its requests (V2's `_combine_sampled_and_draft_tokens_kernel`
reads them on the device: with async scheduling the host has not seen them yet), so the
graph records that gather before the model (`record_inputs`): `input_ids[i] =
last_sampled_tokens[slot_i]` where the host says the row's token is the last sampled one
(`LAST`: a row past its prompt; a prompt's one-token chunk keeps the id V2's prefill
kernel wrote), nothing elsewhere. The graph reads only buffers whose addresses hold for
the runner's life (V2's request state and these), so a replay never reads a stale captured
argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from adapters.vllm.worker.staging_arena import ALIGN, StagingArena
from adapters.vllm.worker.v2_host_block_tables import HostBlockTables

# Rows of the step buffer: the request slot of each row, whether it samples, whether it
# is a real row (its computed tokens grow by its one token), whether its input id is its
# request's last sampled token (gathered in the graph, before the model).
SLOT, SAMPLES, REAL, LAST = 0, 1, 2, 3
STEP_ROWS = 4


class V2DecodeTail:
    """The greedy ids and V2's post-step update of a FULL decode graph's rows."""

    def __init__(
        self, rows: int, req_states: Any, output_bin_counts: torch.Tensor | None,
        device: torch.device, pin_memory: bool, inputs: Any = None,
        block_tables: Any = None, tables: HostBlockTables | None = None,
        builders: Sequence[Any] = (), staging_numel: int = 0, event: Any = None,
    ) -> None:  # fmt: skip
        """`inputs`: V2's InputBuffers, whose query offsets, sequence lengths and positions
        become slices of the arena after the tail's rows (their values kept; made before
        any graph is captured, which reads them at these addresses), positions last so
        a step's copy ends at its rows; None: the tail's rows alone. `block_tables` (V2's
        BlockTables) with `tables` (its host mirror), where inputs are bound: the forward
        pass's block tables and slots become slices too, before the positions, and the
        attention metadata `builders`' staged indices (`staging_numel` int64 each) after
        them (their `use_arena`): a step may then send everything in one copy, made just
        before its replay (`defers`). `event`: a device event recorded after each copy,
        which a step waits for before it writes the arena (staging_arena.py)."""
        self.rows = rows
        self.req_states = req_states
        self.output_bin_counts = output_bin_counts
        self.defers = False  # a host step's copy may wait for the builders' (_bind_builders)
        self._null_block: int | None = None  # the block size of host-written padding slots
        names = ("query_start_loc", "seq_lens", "positions")
        bound = [getattr(inputs, name) for name in names] if inputs is not None else []
        if inputs is None or tables is None:
            block_tables = tables = None
        forward = [*block_tables.input_block_tables, block_tables.slot_mappings] if (
            block_tables is not None) else []  # fmt: skip
        builders = list(builders) if block_tables is not None else []
        nbytes = _aligned(STEP_ROWS * rows * 8) + sum(
            _aligned(t.numel() * t.element_size()) for t in (*bound, *forward)
        )
        nbytes += len(builders) * _aligned(staging_numel * 8)
        arena = StagingArena(nbytes, device, pin_memory, event)
        self.arena = arena
        host, dev = arena.take(STEP_ROWS * rows, torch.int64)
        self.host, self.device = host.view(STEP_ROWS, rows), dev.view(STEP_ROWS, rows)
        self._span = arena.used  # the bytes a step's copy sends (the tail's rows)
        # The host halves of V2's query offsets, sequence lengths and positions.
        self.inputs: list[torch.Tensor] | None = None
        self.input_ids: torch.Tensor | None = None  # V2's, the graph's gather writes them
        self._positions_at = 0  # the byte offset of the positions' slice
        # The host mirror of V2's block tables and the host halves of the forward pass's
        # block tables and slots (None: V2's kernels make them every step).
        self.tables = tables
        self._block_tables = block_tables
        self._host_tables: list[np.ndarray] = []
        self._host_slots: np.ndarray | None = None
        if inputs is not None:
            twins = [arena.twin(bound[0]), arena.twin(bound[1])]
            inputs.query_start_loc, inputs.seq_lens = twins[0][1], twins[1][1]
            if block_tables is not None:
                self._bind_tables(arena, block_tables)
                self._bind_builders(arena, block_tables, builders)
            self._positions_at = _aligned(arena.used)
            twins.append(arena.twin(bound[2]))
            inputs.positions = twins[2][1]
            self.inputs = [h for h, _ in twins]
            self.input_ids = getattr(inputs, "input_ids", None)
        self.host_tables = False  # this step's block tables and slots were made on the host
        self._pending: int | None = None  # the bytes a deferred step's copy sends
        self.deferred_steps = 0
        self.host_ids = False  # this step's graph gathers its input ids (LAST sent)
        # int64 0..rows-1 on the device: a decode step's logits rows (V2's logits_indices).
        self.logits_rows = torch.arange(rows, dtype=torch.int64, device=device)
        self.ids_recorded: set[Any] = set()  # the graphs gathering their input ids
        self.host_inputs = False  # this step's inputs were made on the host and sent
        self.host_input_steps = 0
        self.sampled = torch.zeros(rows, dtype=torch.int64, device=device)
        self.recorded: set[Any] = set()  # the graphs (descriptors) holding the tail
        self._staged = False  # the next replay's counts were sent by a step
        self._live = False  # the device counts may be non-zero
        self.served_steps = 0

    def _bind_tables(self, arena: StagingArena, block_tables: Any) -> None:
        """V2's forward-pass block tables and slots as arena slices (their device values
        kept), the gather kernel's pointers to them renewed; the host halves a host step
        sends whole: its tables zero and its slots padding past its rows."""
        twins = [arena.twin(t) for t in block_tables.input_block_tables]
        block_tables.input_block_tables = [d for _, d in twins]
        block_tables.input_block_table_ptrs = block_tables._make_ptr_tensor(
            block_tables.input_block_tables
        )
        self._host_tables = [h.numpy() for h, _ in twins]
        for table in self._host_tables:  # past a host step's rows its tables are zero
            table[:] = 0
        host_slots, block_tables.slot_mappings = arena.twin(block_tables.slot_mappings)
        self._host_slots = host_slots.numpy()
        HostBlockTables.prime(self._host_slots)

    def _bind_builders(self, arena: StagingArena, block_tables: Any, builders: list[Any]) -> None:
        """The builders' staged indices as arena slices (their `use_arena`; a paged
        builder takes V2's slots of a single KV cache group as its own); whether a step
        may defer its copy past their build (`defers`): each builder's staging is here
        and none reads the step's slots on the device while it builds (a paged builder
        that takes the slots finds its padding written on the host: the null block's)."""
        if not builders:
            return
        slots = block_tables.slot_mappings[0] if block_tables.num_kv_cache_groups == 1 else None
        for builder in builders:
            builder.use_arena(arena, slots)
        takes = {bool(getattr(b, "host_padding_slots", False)) for b in builders}
        if takes == {True}:
            self._null_block = int(builders[0].kv_cache_spec.block_size)
        else:  # a builder reads vLLM's -1s: none takes the host's padding
            for builder in builders:
                if hasattr(builder, "host_padding_slots"):
                    builder.host_padding_slots = False
        slot_readers = any(hasattr(b, "_writable_slots") for b in builders)
        self.defers = all(getattr(b, "_arena", None) is arena for b in builders) and (
            self._null_block is not None or not slot_readers
        )

    def flush(self) -> None:
        """A deferred step's one copy (before its replay), and the arena no longer
        deferred: builders of later steps send their own staging."""
        if self._pending is not None:
            span, self._pending = self._pending, None
            self.arena.send(span)
        self.arena.deferred = False

    def fits(self, rows: int, vocab: int) -> bool:
        """Whether a FULL decode graph of `rows` rows and `vocab` logits can hold the tail
        (else its steps keep V2's sampler and input preparation)."""
        counts = self.output_bin_counts
        return rows <= self.rows and (counts is None or counts.shape[1] == vocab)

    def record_inputs(self, desc: Any, rows: int, vocab: int) -> None:
        """Record, before the model (inside the capture), the gather of the rows' input
        ids: `input_ids[i] = last_sampled_tokens[slot_i]` where `LAST` says so (an
        `index_add_` of the difference, so a row whose flag is 0 keeps its id)."""
        ids = self.input_ids
        if ids is None or self.req_states is None or not self.fits(rows, vocab):
            return
        slots = self.device[SLOT, :rows]
        last = self.req_states.last_sampled_tokens.view(-1).index_select(0, slots)
        now = ids[:rows]
        flags = self.device[LAST, :rows].to(ids.dtype)
        now.add_((last.to(ids.dtype) - now) * flags)
        self.ids_recorded.add(desc)

    def record(self, desc: Any, logits: torch.Tensor) -> bool:
        """Record the tail after the graph's logits (inside its capture); False where the
        graph's rows exceed the buffers (its steps keep V2's sampler)."""
        rows = logits.shape[0]
        counts = self.output_bin_counts
        if not self.fits(rows, logits.shape[1]):
            return False
        state = self.req_states
        sampled = self.sampled[:rows]
        sampled.copy_(logits.argmax(dim=-1))
        slots = self.device[SLOT, :rows]
        samples = self.device[SAMPLES, :rows]
        samples32 = samples.to(torch.int32)
        # last_sampled_tokens[slot] = id, where the row samples.
        last = state.last_sampled_tokens.view(-1)
        last.index_add_(0, slots, (sampled - last.index_select(0, slots)) * samples)
        # all_token_ids[slot, total_len[slot]] = id, then total_len[slot] += 1 (the
        # position clamped into the row for the rows that write nothing).
        total = state.total_len.gpu
        ids = state.all_token_ids.gpu
        width = ids.shape[1]
        at = slots * width + total.index_select(0, slots).clamp(max=width - 1)
        flat = ids.view(-1)
        flat.index_add_(0, at, (sampled.to(ids.dtype) - flat.index_select(0, at)) * samples32)
        if counts is not None:  # the output counts penalties read
            bins = counts.view(-1)
            bins.index_add_(0, slots * counts.shape[1] + sampled, samples32.to(counts.dtype))
        total.index_add_(0, slots, samples32.to(total.dtype))
        computed = state.num_computed_tokens.gpu
        computed.index_add_(0, slots, self.device[REAL, :rows].to(computed.dtype))
        self.recorded.add(desc)
        return True

    def stage(
        self, slots: np.ndarray, samples: np.ndarray | None, computed: np.ndarray | None = None,
        last: np.ndarray | None = None, padded: int | None = None, defer: bool = False,
    ) -> torch.Tensor:  # fmt: skip
        """This step's rows into the device buffer (one copy): their request slots and,
        where the tail serves the step, which rows sample (None: it does not, counts 0);
        with `computed` (the rows' computed tokens, a step of one token a request and no
        drafts, inputs bound) V2's query offsets, lengths and positions of the step too,
        and, with V2's block tables bound, the step's block-table rows and slots; with
        `last` too (each row's flag: its input id is its last sampled token; a graph that
        records the gather) the graph makes the input ids. With `defer` (no device op
        reads these buffers before the replay) and `defers`, the copy waits for the
        attention builders' staged indices and is made before the replay (`flush`;
        `padded`: the step's padded tokens, whose slots are then the null block's).
        Returns the request slots on the device (V2's idx_mapping). The host writes the
        arena only after the last step's copy of it ran (`writable`: under async
        scheduling that step may still be running)."""
        self.flush()
        self.arena.writable()
        n = len(slots)
        host = self.host.numpy()
        host[SLOT, :n] = slots
        host[:, n:] = 0
        host[SAMPLES:, :n] = 0
        if samples is not None:
            host[SAMPLES, :n] = samples
            host[REAL, :n] = 1
        span = self._span
        self.host_inputs = computed is not None and self.inputs is not None
        self.host_tables = self.host_inputs and self.tables is not None
        self.host_ids = self.host_inputs and last is not None and self.input_ids is not None
        if self.host_ids:
            assert last is not None
            host[LAST, :n] = last
        deferring = self.host_tables and self.host_ids and defer and self.defers
        if self.host_tables:
            assert self.tables is not None and computed is not None
            assert self._host_slots is not None
            null = None
            if deferring and self._null_block is not None and padded is not None:
                null = (padded, self._null_block)
            self.tables.write_step(
                slots, computed.astype(np.int64), self._block_tables.num_blocks.np,
                self._host_tables, self._host_slots, null,
            )  # fmt: skip
        if self.host_inputs:
            assert self.inputs is not None and computed is not None
            offsets, lengths, positions = (t.numpy() for t in self.inputs)
            # V2's prepare_inputs and _prepare_pos_seq_lens_kernel at one token a row:
            # offsets 0..n, then n for the padding rows; lengths computed + 1, padding
            # rows 0; each row's one position its computed tokens.
            offsets[: n + 1] = np.arange(n + 1)
            offsets[n + 1 :] = n
            lengths[:n] = computed + 1
            lengths[n:] = 0
            positions[:n] = computed
            span = self._positions_at + n * positions.itemsize
            self.host_input_steps += 1
        if deferring:  # sent with the builders' staging, before the replay
            self._pending = span
            self.arena.deferred = True
            self.deferred_steps += 1
        else:
            self.arena.send(span)
        self._staged = True
        self._live = samples is not None or self.host_ids
        return self.device[SLOT, :n]

    def before_replay(self) -> None:
        """A deferred step's copy, then the replay; a replay no step staged (a dummy run)
        writes nothing: its counts are zeroed."""
        self.flush()
        if self._staged:
            self._staged = False
            return
        if self._live:
            self.device[SAMPLES:].zero_()
            self._live = False


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def greedy_rows_served(sampler: Any, slots: np.ndarray, vocab: int) -> bool:
    """Whether V2's sampler would give these request slots the argmax of their logits and
    nothing else from them: every row greedy (temperature 0), none with a logits processor,
    penalty, bias, bad words or thinking budget to apply, no top-k/top-p, and a sampler
    with no trace replay or sampling mask to return."""
    states = sampler.sampling_states
    return bool(
        sampler.trace_replay_state is None
        and not sampler.return_sampling_mask
        and np.all(states.temperature.np[slots] == 0.0)
        and not np.any(sampler.needs_logits_processing[slots])
        and np.all(states.top_k.np[slots] == vocab)
        and np.all(states.top_p.np[slots] == 1.0)
    )
