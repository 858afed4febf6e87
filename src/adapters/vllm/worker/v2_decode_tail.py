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

The rows' request slots and both counts are one pinned host buffer and one device buffer
([3, rows], int64), the first slice of a staging arena (staging_arena.py): the step writes
them on the host and sends them in one copy, which stands for V2's own copy of its request
slots (`idx_mapping` is the first row's view). With V2's input buffers bound to the arena
(`bind_inputs`: its query offsets, sequence lengths and positions become the arena's
next slices), a decode step of one token a request and no drafts writes those on the
host too and the same copy sends them: V2's copy of the query offsets and its
`_prepare_pos_seq_lens_kernel` launch are left out (the runner's `_staging_tail`). A
step the tail does not serve (a FULL replay that samples otherwise) sends zero counts, and
a replay no step staged (a dummy run) finds them zeroed, so the tail writes nothing there
and V2's own sampler and update run as before. The graph reads only buffers whose
addresses hold for the runner's life (V2's request state and these), so a replay never
reads a stale captured argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from adapters.vllm.worker.staging_arena import ALIGN, StagingArena

# Rows of the step buffer: the request slot of each row, whether it samples, whether it
# is a real row (its computed tokens grow by its one token).
SLOT, SAMPLES, REAL = 0, 1, 2


class V2DecodeTail:
    """The greedy ids and V2's post-step update of a FULL decode graph's rows."""

    def __init__(
        self, rows: int, req_states: Any, output_bin_counts: torch.Tensor | None,
        device: torch.device, pin_memory: bool, inputs: Any = None,
    ) -> None:  # fmt: skip
        """`inputs`: V2's InputBuffers, whose query offsets, sequence lengths and positions
        become slices of the arena after the tail's rows (their values kept; made before
        any graph is captured, which reads them at these addresses), positions last so
        a step's copy ends at its rows; None: the tail's rows alone."""
        self.rows = rows
        self.req_states = req_states
        self.output_bin_counts = output_bin_counts
        names = ("query_start_loc", "seq_lens", "positions")
        bound = [getattr(inputs, name) for name in names] if inputs is not None else []
        nbytes = _aligned(3 * rows * 8) + sum(_aligned(t.numel() * t.element_size()) for t in bound)
        arena = StagingArena(nbytes, device, pin_memory)
        self.arena = arena
        host, dev = arena.take(3 * rows, torch.int64)
        self.host, self.device = host.view(3, rows), dev.view(3, rows)
        self._span = arena.used  # the bytes a step's copy sends (the tail's rows)
        # The host halves of V2's query offsets, sequence lengths and positions.
        self.inputs: list[torch.Tensor] | None = None
        self._positions_at = 0  # the byte offset of the positions' slice
        if inputs is not None:
            twins = []
            for name, tensor in zip(names, bound, strict=True):
                self._positions_at = _aligned(arena.used)
                twins.append(arena.twin(tensor))
                setattr(inputs, name, twins[-1][1])
            self.inputs = [h for h, _ in twins]
        self.host_inputs = False  # this step's inputs were made on the host and sent
        self.host_input_steps = 0
        self.sampled = torch.zeros(rows, dtype=torch.int64, device=device)
        self.recorded: set[Any] = set()  # the graphs (descriptors) holding the tail
        self._staged = False  # the next replay's counts were sent by a step
        self._live = False  # the device counts may be non-zero
        self.served_steps = 0

    def record(self, desc: Any, logits: torch.Tensor) -> bool:
        """Record the tail after the graph's logits (inside its capture); False where the
        graph's rows exceed the buffers (its steps keep V2's sampler)."""
        rows = logits.shape[0]
        counts = self.output_bin_counts
        if rows > self.rows or (counts is not None and counts.shape[1] != logits.shape[1]):
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
        self, slots: np.ndarray, samples: np.ndarray | None, computed: np.ndarray | None = None
    ) -> torch.Tensor:
        """This step's rows into the device buffer (one copy): their request slots and,
        where the tail serves the step, which rows sample (None: it does not, counts 0);
        with `computed` (the rows' computed tokens, a step of one token a request and no
        drafts, inputs bound) V2's query offsets, lengths and positions of the step too.
        Returns the request slots on the device (V2's idx_mapping)."""
        n = len(slots)
        host = self.host.numpy()
        host[SLOT, :n] = slots
        host[:, n:] = 0
        if samples is None:
            host[SAMPLES:, :n] = 0
        else:
            host[SAMPLES, :n] = samples
            host[REAL, :n] = 1
        span = self._span
        self.host_inputs = computed is not None and self.inputs is not None
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
        self.arena.device[:span].copy_(self.arena.host[:span], non_blocking=True)
        self._staged = True
        self._live = samples is not None
        return self.device[SLOT, :n]

    def before_replay(self) -> None:
        """A replay no step staged (a dummy run) writes nothing: its counts are zeroed."""
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
