"""The NPU model runner on vLLM's Model Runner V2 (vllm/v1/worker/gpu/model_runner.py).

Chosen when the plan's runner decision says V2 (VLLM_USE_V2_MODEL_RUNNER=1 on the NPU,
ascend_core.plan.model_runner). V2 keeps the batch state on the device and prepares
inputs, samples and counts with Triton kernels (ascend_core.v2_kernels lists them): on an
NPU host triton-ascend compiles them; on the emulated NPU Triton's interpreter runs them
(TRITON_INTERPRET=1). What differs from a GPU is bound here, inside the runtime's
`runner_scope` (torch.cuda's stream, event, sync and graph names on the device's API):

- V2's staging buffers are UVA views of pinned host memory (a vLLM CUDA op); an NPU has
  no such view, so V2's own explicit-copy buffers (NonUvaBuffer) serve instead, each
  request-state one re-sent only when its values changed (v2_staged_copies.py).
- V2's graph manager is NpuCudaGraphManager (npu_graphs_v2.py): FULL graphs through the
  runtime port's graphs, captured updatable, each replay given the step's attention
  lengths (read from the metadata this runner's model state last prepared). PIECEWISE
  graphs are the compiled model's pieces in the platform's NpuGraphWrapper, as on V1.
- A FULL decode graph records its rows' logits (npu_graphs_v2.py); a step that replayed
  one and whose rows are exactly its requests (one token each, no drafts) samples from
  those (`sample`): no gather of the rows and no LM head matmul after the replay.
- The graph also records the greedy tail (v2_decode_tail.py): a plain greedy step of one
  token a request (`_tail_serves`) takes its ids from the replay and V2's post-step
  update ran in it, so neither V2's sampler nor `post_update` runs after the replay; the
  step's request slots and which rows sample go in one copy (`prepare_inputs`, for V2's
  own copy of the slots), and the count of sampled tokens the output reads back is the
  host's (no device read for it).
- In a FULL decode step of one token a request and no drafts (`_host_inputs_serve`) the
  query offsets, sequence lengths and positions are made on the host and go in that same
  copy (V2's buffers for them are slices of the tail's arena): no copy of the offsets
  and no `_prepare_pos_seq_lens_kernel` launch. So are the step's block-table rows and
  slots, from a host mirror of V2's block tables (v2_host_block_tables.py; `prepare_attn`
  hands V2's forward-pass buffers the copy filled: no `_gather_block_tables_kernel`, no
  `_compute_slot_mappings_kernel`), and the graph gathers the input ids from the last
  sampled tokens before its model (no `_combine_sampled_and_draft_tokens_kernel`). The
  attention builders stage their indices in the same arena: where no device op reads the
  step's buffers before the replay (no prompt chunk in the step) the one copy is made
  just before the replay, the builders' indices in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import numpy as np
import torch
from vllm.logger import init_logger
from vllm.utils.torch_utils import PIN_MEMORY
from vllm.v1.worker.gpu import buffer_utils
from vllm.v1.worker.gpu import model_runner as v2_model_runner
from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUModelRunnerV2
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.sample.sampler import Sampler

from adapters.vllm.attention.metadata import staging_size
from adapters.vllm.worker.host_decode_inputs import ARENA_BUILDERS
from adapters.vllm.worker.npu_graphs_v2 import manager_on
from adapters.vllm.worker.v2_decode_tail import V2DecodeTail, greedy_rows_served
from adapters.vllm.worker.v2_host_block_tables import mirror as mirror_block_tables
from adapters.vllm.worker.v2_host_block_tables import refusal as host_tables_refusal
from adapters.vllm.worker.v2_prepare_inputs import DeviceConstants, envs_without_padding_fill
from adapters.vllm.worker.v2_staged_copies import copy_to_uva_if_changed

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime

logger = init_logger(__name__)


def _no_uva() -> bool:
    """An NPU maps no pinned host memory into the device's address space."""
    return False


def _in_scope(name: str) -> Callable[..., Any]:
    """GPUModelRunnerV2.<name>, called inside the runner's scope."""

    def call(self: NpuModelRunnerV2, *args: Any, **kwargs: Any) -> Any:
        with self._scope():
            return getattr(GPUModelRunnerV2, name)(self, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = f"vLLM's V2 GPUModelRunner.{name} inside the NPU runner's scope."
    return call


class NpuModelRunnerV2(GPUModelRunnerV2):
    """vLLM's V2 GPUModelRunner on an NPU: its math, buffers and kernels unchanged; the
    entry points that touch torch.cuda or build staging buffers run in `_scope`."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        self._runtime = runtime
        self._step_metadata: Any = None
        self.graph_logits_steps = 0  # steps sampled from a FULL graph's logits
        self._tail: V2DecodeTail | None = None
        # This step's rows when the graph's greedy tail serves it: (rows, each row's
        # sampled count on the host); set by prepare_inputs, taken by sample.
        self._tail_step: tuple[int, np.ndarray] | None = None
        self._tail_sampled = False  # sample took the tail's ids: post_update ran in it
        self._constants: DeviceConstants | None = None
        # This step's requests when the tail's copy sent its block-table rows and slots
        # (made on the host); set by prepare_inputs, taken by prepare_attn.
        self._host_tables_rows: int | None = None
        # (tokens, padded tokens) the padding mask holds, from the last real step's
        # prepare_inputs; None after anything else wrote it (a dummy run, a capture).
        self._padding_written: tuple[int, int] | None = None
        with self._scope():
            super().__init__(vllm_config, device)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """torch.cuda's names on the device's API, V2's buffers without UVA, and their
        values re-sent only where they changed (v2_staged_copies.py)."""
        with (
            self._runtime.runner_scope(),
            patch.object(buffer_utils, "is_uva_available", _no_uva),
            patch.object(buffer_utils.UvaBackedTensor, "copy_to_uva", copy_to_uva_if_changed),
        ):
            yield

    # Sleep mode's weights pool (the worker's, when sleep mode is on): V2's load_model
    # builds its model state and sampler on the device after the model, so only the model
    # loader's call runs in it (`_model_loads_in`); None: no pool.
    weights_pool: Callable[[], AbstractContextManager[None]] | None = None

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """V2's load_model; the attention metadata its model state prepares for a step is
        kept for the FULL graph's replay (V2 replays with no forward context)."""
        with self._scope(), self._model_loads_in(self.weights_pool):
            GPUModelRunnerV2.load_model(self, *args, **kwargs)
        prepare = self.model_state.prepare_attn

        def prepare_attn(*a: Any, **kw: Any) -> Any:
            self._step_metadata = prepare(*a, **kw)
            return self._step_metadata

        self.model_state.prepare_attn = prepare_attn  # type: ignore[method-assign]

    @staticmethod
    @contextmanager
    def _model_loads_in(pool: Callable[[], AbstractContextManager[None]] | None) -> Iterator[None]:
        """V2's model loader's load_model inside `pool` (the model's weights there, the
        runner's own state outside: a level-2 sleep discards the pool's memory)."""
        if pool is None:
            yield
            return
        get_loader = v2_model_runner.get_model_loader

        def loader_in_pool(*args: Any, **kwargs: Any) -> Any:
            loader = get_loader(*args, **kwargs)
            load = loader.load_model

            def load_in_pool(*a: Any, **kw: Any) -> Any:
                with pool():
                    return load(*a, **kw)

            loader.load_model = load_in_pool
            return loader

        with patch.object(v2_model_runner, "get_model_loader", loader_in_pool):
            yield

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """V2's initialize_kv_cache, its graph manager on the runtime port's graphs."""
        graphs = self._runtime.graphs()
        with ExitStack() as stack:
            stack.enter_context(self._scope())
            if graphs is not None:  # a device without graphs serves eager only
                manager = manager_on(graphs, lambda: self._step_metadata)
                stack.enter_context(patch.object(v2_model_runner, "ModelCudaGraphManager", manager))
            GPUModelRunnerV2.initialize_kv_cache(self, *args, **kwargs)
        self._constants = DeviceConstants(self.max_num_reqs, self.device)
        self._bind_tail()

    def _bind_tail(self) -> None:
        """The greedy tail the FULL decode graphs record (before they are captured), where
        V2's own sampler and update would run after the replay: a last pipeline rank that
        samples, with no speculation, no pipeline or context parallel handler, no
        batch-sharded sampling, and a model state whose post-step update is V2's."""
        manager = getattr(self, "cudagraph_manager", None)
        sizes = self.compilation_config.cudagraph_capture_sizes
        if not (
            manager is not None
            and hasattr(manager, "tail")
            and sizes
            and type(self.sampler) is Sampler
            and self.is_last_pp_rank
            and self.speculator is None
            and self.num_speculative_steps == 0
            and self.pp_handler is None
            and self.pcp_manager is None
            and self.batch_sharder is None
            and type(self.model_state).postprocess_state is ModelState.postprocess_state
        ):
            return
        # V2's query offsets, lengths and positions join the tail's copy (made on the host
        # for a plain decode step) where no adaptive verification holds the offsets.
        verifies = getattr(self, "adaptive_verification", None) is not None
        inputs = None if verifies else self.input_buffers
        # V2's block tables mirrored on the host: such a step's block-table rows and slots
        # are made there and join the copy (v2_host_block_tables.py), unless V2's tables
        # need what only its kernels do.
        tables = None
        why = host_tables_refusal(self.block_tables, self.pcp_manager)
        if why is not None:
            logger.info("NPU V2 runner: the block tables and slots stay V2's kernels: %s", why)
        elif inputs is not None:
            tables = mirror_block_tables(self.block_tables)
        # Recorded after each copy of the tail's pinned arena; a step waits for it before
        # writing the arena (staging_arena.py: async scheduling prepares a step while the
        # last one runs). Blocking, as vLLM's own input event: the host sleeps, not spins.
        with self._runtime.runner_scope():
            sent = torch.cuda.Event(blocking=True)
        self._tail = V2DecodeTail(
            max(sizes), self.req_states, self.sampler.penalties_state.output_bin_counts,
            self.device, PIN_MEMORY, inputs, self.block_tables, tables,
            self._arena_builders(), staging_size(self.vllm_config), sent,
        )  # fmt: skip
        if tables is not None and not self._tail.defers:
            logger.info(
                "NPU V2 runner: a decode step's attention plan keeps its own copy (its "
                "metadata builders do not all stage in the runner's arena)"
            )
        manager.tail = self._tail

    def _arena_builders(self) -> list[Any]:
        """The attention metadata builders of the one KV cache group, where every one can
        stage its indices in the tail's arena (`use_arena`), at most ARENA_BUILDERS (more
        are micro-batches'); else none (each keeps its own staging copy)."""
        groups = getattr(self, "attn_groups", None) or []
        if len(groups) != 1:
            return []
        builders = [b for group in groups[0] for b in group.metadata_builders]
        if not builders or len(builders) > ARENA_BUILDERS:
            return []
        return builders if all(hasattr(b, "use_arena") for b in builders) else []

    def prepare_inputs(
        self, scheduler_output: Any, batch_req_state: Any, batch_desc: Any,
        num_active_loras: int,
    ) -> Any:  # fmt: skip
        """V2's prepare_inputs with fewer launches for what a decode step repeats
        (v2_prepare_inputs.py: its constant aranges and zeros, a padding mask already
        filled) and, before a FULL replay whose graph holds the greedy tail, the request
        slots sent with the tail's counts in one copy (V2's own copy of the slots), after
        the last step's ids left for the host (the replay rewrites them)."""
        self._tail_step = None
        self._host_tables_rows = None
        if self._tail is not None:  # a step deferred its copy and did not replay: sent now
            self._tail.flush()
        num_tokens = batch_req_state.num_tokens
        padding = (num_tokens, max(num_tokens, batch_desc.num_tokens))
        with ExitStack() as stack:
            if padding == self._padding_written and self.pcp_manager is None:
                # the mask holds these ranges already
                stack.enter_context(
                    patch.object(v2_model_runner, "envs", envs_without_padding_fill())
                )
            if self._constants is not None:
                stack.enter_context(patch.object(v2_model_runner, "torch", self._constants))
            tail = self._tail
            if tail is not None and batch_desc in tail.recorded:
                stack.enter_context(
                    self._staging_tail(tail, scheduler_output, batch_req_state, batch_desc)
                )
            batch = GPUModelRunnerV2.prepare_inputs(
                self, scheduler_output, batch_req_state, batch_desc, num_active_loras
            )
        self._padding_written = padding
        return batch

    def prepare_attn(self, input_batch: Any) -> Any:
        """V2's prepare_attn; for a step whose block-table rows and slots the tail's copy
        sent (made on the host from the mirror of V2's block tables), those buffers, with
        no gather and no slot-mapping kernel."""
        rows, self._host_tables_rows = self._host_tables_rows, None
        if rows is None or rows != input_batch.num_reqs:
            return GPUModelRunnerV2.prepare_attn(self, input_batch)
        tables = self.block_tables
        tables._num_dirty_rows = rows  # past these rows the sent tables are zero
        padded = input_batch.num_reqs_after_padding
        block_tables = tuple(t[:padded] for t in tables.input_block_tables)
        return block_tables, tables.slot_mappings[:, : input_batch.num_tokens_after_padding]

    @contextmanager
    def _staging_tail(
        self, tail: V2DecodeTail, scheduler_output: Any, batch_req_state: Any, batch_desc: Any
    ) -> Iterator[None]:
        """V2's copy of the step's request slots replaced by the tail's one copy (slots
        and counts: zero counts where the tail does not serve the step)."""
        slots = batch_req_state.idx_mapping_np
        states = self.req_states
        samples = None
        if self._tail_serves(scheduler_output, batch_req_state):
            # V2's get_num_sampled_and_rejected: a row whose one token is not past its
            # prefill (a prompt's chunk) samples nothing.
            seq_lens = states.num_computed_tokens_np[slots] + batch_req_state.num_scheduled_tokens
            samples = (seq_lens >= states.prefill_len.np[slots]).astype(np.int32)
            self._tail_step = (len(slots), samples)
        computed = last = None
        if self._host_inputs_serve(scheduler_output, batch_req_state):
            computed = states.num_computed_tokens_np[slots]
            if batch_desc in tail.ids_recorded:
                # V2's _combine_sampled_and_draft_tokens_kernel at one token a row: the
                # row's id is its last sampled token where its position is past the
                # prompt; a prompt's one-token chunk keeps the id V2's prefill kernel wrote.
                last = (computed >= states.prefill_len.np[slots]).astype(np.int64)
        torch.cuda.current_stream().wait_stream(self.output_copy_stream)
        h2d = v2_model_runner.async_tensor_h2d
        pos_seq_lens = v2_model_runner.prepare_pos_seq_lens
        combine = v2_model_runner.combine_sampled_and_draft_tokens
        buffers = self.input_buffers

        # The step's copy may wait for the attention plan's staging (made before the
        # replay) where no device op reads the step's buffers before then: no prompt's
        # chunk (V2's prefill kernel), no fast prefill or R-SWA prompt lengths.
        defer = not (
            batch_req_state.has_prefill
            or getattr(self, "fast_prefill", None) is not None
            or getattr(self.model_config, "rswa_window", None) is not None
        )

        def slots_with_counts(data: Any, *args: Any, **kwargs: Any) -> Any:
            if data is slots:
                staged = tail.stage(slots, samples, computed, last, batch_desc.num_tokens, defer)
                if tail.host_tables:
                    self._host_tables_rows = len(slots)
                return staged
            if (
                tail.host_inputs
                and tail.inputs is not None
                and kwargs.get("out") is buffers.query_start_loc
                and np.array_equal(data, tail.inputs[0].numpy())
            ):  # the query offsets the tail's copy sent
                return buffers.query_start_loc
            return h2d(data, *args, **kwargs)

        def made_on_host(idx_mapping: Any, query_start_loc: Any, num_computed: Any,
                         pos: Any, seq_lens: Any) -> None:  # fmt: skip
            if tail.host_inputs and pos is buffers.positions and seq_lens is buffers.seq_lens:
                return  # the tail's copy sent them
            pos_seq_lens(idx_mapping, query_start_loc, num_computed, pos, seq_lens)

        def ids_in_graph(input_ids: Any, idx_mapping: Any, *args: Any, **kwargs: Any) -> Any:
            num_logits = args[6] if len(args) > 6 else kwargs["num_logits"]
            if tail.host_ids and input_ids is buffers.input_ids and num_logits == len(slots):
                # The replay gathers the ids (record_inputs); each row's one logit is its
                # one token's (query end - 1 = the row).
                return tail.logits_rows[:num_logits]
            return combine(input_ids, idx_mapping, *args, **kwargs)

        with (
            patch.object(v2_model_runner, "async_tensor_h2d", slots_with_counts),
            patch.object(v2_model_runner, "prepare_pos_seq_lens", made_on_host),
            patch.object(v2_model_runner, "combine_sampled_and_draft_tokens", ids_in_graph),
        ):
            yield
        tail.host_inputs = tail.host_ids = False

    def _host_inputs_serve(self, scheduler_output: Any, batch_req_state: Any) -> bool:
        """Whether this step's query offsets, lengths and positions are made on the host
        (v2_decode_tail.py: the tail's copy sends them): inputs bound to the tail, one
        token a request, no drafts (the host's computed tokens are then the device's)."""
        tail = self._tail
        tokens = batch_req_state.num_scheduled_tokens
        return bool(
            tail is not None
            and tail.inputs is not None
            and batch_req_state.num_tokens == len(batch_req_state.idx_mapping_np)
            and np.all(tokens == 1)
            and not scheduler_output.scheduled_spec_decode_tokens
            and self.model_state.num_new_sampled_tokens_per_step == 1
            and self.speculator is None
        )

    def _tail_serves(self, scheduler_output: Any, batch_req_state: Any) -> bool:
        """Whether V2's sampler would give this step the graph's greedy ids and V2's
        update the tail's writes: one token a request and no drafts, no grammar, and
        rows greedy_rows_served says are plain greedy ones."""
        slots = batch_req_state.idx_mapping_np
        return bool(
            batch_req_state.num_tokens == len(slots)
            and not scheduler_output.scheduled_spec_decode_tokens
            and not scheduler_output.has_structured_output_requests
            and self.model_state.num_new_sampled_tokens_per_step == 1
            and greedy_rows_served(self.sampler, slots, self.sampler.sampling_states.vocab_size)
        )

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        """V2's execute_model inside the scope; a FULL replay's logits are this step's only."""
        manager = getattr(self, "cudagraph_manager", None)
        if manager is not None and hasattr(manager, "last_logits"):
            manager.last_logits = None
        self._tail_step = None
        if kwargs.get("dummy_run", False) or (len(args) > 2 and args[2]):
            self._padding_written = None  # a dummy batch fills the padding mask itself
            # Its replay (a data-parallel rank's idle step) rewrites the graph's sampled ids
            # too: only after the last step's copy of them to the host has read them.
            torch.cuda.current_stream().wait_stream(self.output_copy_stream)
        with self._scope():
            return GPUModelRunnerV2.execute_model(self, *args, **kwargs)

    def capture_model(self, *args: Any, **kwargs: Any) -> Any:
        """V2's capture_model inside the scope (its captures fill the padding mask)."""
        self._padding_written = None
        with self._scope():
            return GPUModelRunnerV2.capture_model(self, *args, **kwargs)

    def profile_cudagraph_memory(self, *args: Any, **kwargs: Any) -> Any:
        """V2's profile_cudagraph_memory inside the scope (it captures: the padding mask
        is filled there)."""
        self._padding_written = None
        with self._scope():
            return GPUModelRunnerV2.profile_cudagraph_memory(self, *args, **kwargs)

    def sample(self, hidden_states: Any, input_batch: Any, grammar_output: Any) -> Any:
        """V2's sample; from the logits the FULL decode graph recorded where they are the
        ones V2 would compute (`_graph_logits`), with no gather and no matmul."""
        logits = self._graph_logits(hidden_states, input_batch)
        step, self._tail_step = self._tail_step, None
        if step is not None:  # the replay's tail sampled and updated the requests
            if logits is None or grammar_output is not None:
                raise RuntimeError(
                    "the FULL decode graph's greedy tail updated this step's requests, but "
                    "the step has no logits from it or a grammar to apply "
                    "(adapters/vllm/worker/npu_model_runner_v2.py: _tail_serves admits "
                    "only steps whose sampling the tail gives)"
                )
            return self._tail_sample(logits[: step[0]], step[1], input_batch)
        if logits is None:
            return GPUModelRunnerV2.sample(self, hidden_states, input_batch, grammar_output)
        rows = input_batch.num_reqs
        self.graph_logits_steps += 1
        with patch.object(self.model, "compute_logits", lambda _rows: logits[:rows]):
            return GPUModelRunnerV2.sample(self, _GraphRows(), input_batch, grammar_output)

    def _tail_sample(self, logits: Any, samples: np.ndarray, input_batch: Any) -> Any:
        """V2's Sampler.__call__ for a plain greedy batch, its ids the graph's: logprobs
        (of the raw logits, which are the processed ones here), the NaN count where asked,
        and the counts of sampled and rejected tokens on the host (the output reads them
        there; the device's counts the graph's update used)."""
        from vllm.v1.worker.gpu.metrics.logits import get_num_nans
        from vllm.v1.worker.gpu.sample.logprob import compute_topk_scores
        from vllm.v1.worker.gpu.sample.output import SamplerOutput

        sampler = self.sampler
        assert self._tail is not None and sampler is not None
        rows = logits.shape[0]
        sampled = self._tail.sampled[:rows]
        num_nans = get_num_nans(logits) if sampler.compute_nans else None
        logprobs = None
        dims = sampler.get_logprobs_dims(input_batch.idx_mapping_np)
        if dims is not None:
            logprobs = compute_topk_scores(
                logits, dims[0], sampled,
                logprob_token_ids_state=sampler.logprob_token_ids_state,
                expanded_idx_mapping=input_batch.expanded_idx_mapping,
                max_per_req_token_ids=dims[1],
                logits_mode=sampler.logprobs_mode in ("raw_logits", "processed_logits"),
            )  # fmt: skip
        num_sampled = torch.from_numpy(samples.copy())
        num_rejected = torch.zeros(rows, dtype=torch.int32)
        output = SamplerOutput(
            sampled_token_ids=sampled.view(-1, 1), logprobs_tensors=logprobs,
            num_nans=num_nans, num_sampled=num_sampled, num_rejected=num_rejected,
        )  # fmt: skip
        self.graph_logits_steps += 1
        self._tail.served_steps += 1
        self._tail_sampled = True
        return output, num_sampled, num_rejected

    def postprocess_sampled(self, idx_mapping: Any, *args: Any, **kwargs: Any) -> None:
        """V2's post-step update, unless the graph's tail made it this step (its model
        state's own update is V2's no-op then: _bind_tail)."""
        if self._tail_sampled:
            self._tail_sampled = False
            return
        GPUModelRunnerV2.postprocess_sampled(self, idx_mapping, *args, **kwargs)

    def _graph_logits(self, hidden_states: Any, input_batch: Any) -> Any:
        """The logits this step's FULL replay recorded, where V2's rows to sample are the
        graph's first rows: one token a request (its logits indices are 0..n-1), no
        drafts, the hidden states the replay's, no batch-sharded sampling."""
        manager = getattr(self, "cudagraph_manager", None)
        logits = getattr(manager, "last_logits", None)
        if (
            logits is None
            or self.batch_sharder is not None
            or self.pcp_manager is not None
            or input_batch.num_draft_tokens != 0
            or input_batch.num_tokens != input_batch.num_reqs
            or input_batch.num_reqs > logits.shape[0]
            or hidden_states.data_ptr() != manager.hidden_states.data_ptr()
        ):
            return None
        return logits

    profile_run = _in_scope("profile_run")
    sample_tokens = _in_scope("sample_tokens")


class _GraphRows:
    """Stands for V2's hidden states in `sample` when the graph's logits serve: V2 picks
    its rows (`hidden_states[logits_indices]`) only to hand them to compute_logits."""

    def __getitem__(self, _index: Any) -> _GraphRows:
        return self
