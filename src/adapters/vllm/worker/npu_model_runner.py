"""The NPU model runner: vLLM's GPU model runner with torch.cuda's calls on torch_npu.

The pattern of vLLM's own XPU runner: the GPU runner unchanged in its math and buffers
(device tensors with pinned host staging and non-blocking copies), constructed and run
inside the runtime's `runner_scope`, which binds the torch.cuda stream, event and graph
names it calls to the device's API and restores them on exit. NpuGraphWrapper is the
static graph wrapper the platform names (and the one the runner's FULL graphs go
through): vLLM's capture/replay decisions, carried out through the runtime port's graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from vllm.compilation.counter import compilation_counter
from vllm.compilation.cuda_graph import CUDAGraphEntry, CUDAGraphOptions, CUDAGraphWrapper
from vllm.compilation.monitor import validate_cudagraph_capturing_enabled
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.logger import init_logger
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from adapters.container import container
from adapters.vllm.worker.host_decode_inputs import HostDecodeInputsMixin
from adapters.vllm.worker.sampled_tail import (
    greedy_sample_served,
    sampled_tail,
    sampled_tail_serves,
)
from adapters.vllm.worker.seeded_rewind import SampleCountersMixin, SeededRewindMixin

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from ports.runtime import DeviceGraphs, DeviceRuntime

logger = init_logger(__name__)


def _in_scope(name: str) -> Any:
    """GPUModelRunner.<name>, called inside the runtime's runner_scope."""

    def call(self: NpuModelRunner, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return getattr(GPUModelRunner, name)(self, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = f"GPUModelRunner.{name} with torch.cuda bound to the device's API."
    return call


class NpuModelRunner(SampleCountersMixin, SeededRewindMixin, HostDecodeInputsMixin):
    """GPUModelRunner on an NPU; only the entry points that issue torch.cuda calls are wrapped,
    and a uniform decode step's inputs are made on the host (HostDecodeInputsMixin)."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        self._runtime = runtime
        with runtime.runner_scope():
            super().__init__(vllm_config, device)

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """GPUModelRunner.initialize_kv_cache; then the decode step's buffers become
        slices of the staging arena (its builders made, no graph captured yet)."""
        with self._runtime.runner_scope():
            GPUModelRunner.initialize_kv_cache(self, *args, **kwargs)
            self._bind_staging_arena()
        self._bind_sampled_tail()

    def _bind_sampled_tail(self) -> None:
        """With the greedy tail and the arena's sampling stage: the sampled tail too, so
        each FULL graph is also captured for batches that sample (sampled_tail.py)."""
        model, stage = self.model, self._sampling_stage
        if not isinstance(model, NpuGraphWrapper) or model.sample_tail is None:
            return
        reason = None
        if stage is None:
            reason = "no staging arena holds their parameters"
        elif self.sampler.use_fp64_gumbel:
            reason = "use_fp64_gumbel: vLLM draws float64 noise"
        if reason:
            logger.info("NPU graphs: batches that sample do so outside the graph: %s", reason)
            return
        noise = container().sampling_ops().exponential_noise
        model.sampled_tail = sampled_tail(
            model.runnable, self.input_ids.gpu, stage, self.seq_lens, noise
        )

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """GPUModelRunner.load_model; the whole-model FULL graph wrapper it makes is vLLM's
        CUDAGraphWrapper (not the platform's), so it is remade as NpuGraphWrapper: the
        graphs are captured through the runtime port and the attention op's host-side
        lengths updated at each replay."""
        super().load_model(*args, **kwargs)
        model = self.model
        if type(model) is CUDAGraphWrapper:
            self.model = NpuGraphWrapper(
                model.runnable, self.vllm_config, model.runtime_mode, model.cudagraph_options,
                runtime=self._runtime,
            )
            if greedy_tail_serves(self):
                self.model.sample_tail = _greedy_tail(model.runnable, self.input_ids.gpu)

    def _model_forward(self, *args: Any, **kwargs: Any) -> Any:
        """The model's forward, after the one copy of a decode step's staged inputs
        (HostDecodeInputsMixin); with the greedy tail, after the last step's copy of its
        sampled ids to the host: they are the graph's output the next replay rewrites
        (vLLM's own ids are fresh each step), so the replay's stream waits for that copy
        (its own stream) first."""
        arena = self._arena
        if isinstance(self.model, NpuGraphWrapper):  # the sampled tail's graph, or not
            self.model.want_sampled = bool(arena is not None and arena.deferred
                                           and self._sampled_step)  # fmt: skip
        if arena is not None:  # this step's inputs, written on the host: one copy
            arena.flush()
        stream = self.async_output_copy_stream
        if stream is not None and getattr(self.model, "sample_tail", None) is not None:
            import torch

            torch.cuda.current_stream().wait_stream(stream)
        return super()._model_forward(*args, **kwargs)

    def _prepare_input_ids(
        self, scheduler_output: Any, num_reqs: int, total_num_scheduled_tokens: int,
        cu_num_tokens: Any,
    ) -> None:
        """vLLM's input ids; none to move when the last step's were the FULL graph's greedy
        ids and this step decodes the same requests in the same rows: the graph wrote
        them into the input ids already (vLLM would copy them there on the device)."""
        prev = self.input_batch.prev_sampled_token_ids
        tail = getattr(self.model, "last_served_ids", None)
        if (
            prev is not None
            and tail is not None
            and prev.data_ptr() == tail.data_ptr()
            and total_num_scheduled_tokens == num_reqs
            and not scheduler_output.scheduled_spec_decode_tokens
            and self._pp_recv_work is None
            and not self.enable_prompt_embeds
            and num_reqs <= tail.shape[0]
            and bool((self.prev_positions.np[:num_reqs] == self.arange_np[:num_reqs]).all())
        ):
            return
        super()._prepare_input_ids(
            scheduler_output, num_reqs, total_num_scheduled_tokens, cu_num_tokens
        )

    def sample_tokens(self, grammar_output: Any) -> Any:
        """GPUModelRunner.sample_tokens with torch.cuda bound to the device's API; a step
        with a grammar's bitmask samples from the masked logits (never the graph's ids)."""
        self._grammar_step = grammar_output is not None
        with self._runtime.runner_scope():
            return GPUModelRunner.sample_tokens(self, grammar_output)

    def _sample(self, logits: Any, spec_decode_metadata: Any) -> Any:
        """vLLM's sampler, or the ids the FULL graph just computed from these very logits
        when its tail serves the batch: the greedy tail for plain greedy batches
        (greedy_sample_served), the sampled one for the plain batches it was replayed
        for (sampled_tail_serves). vLLM's sampler runs with the step's counters, which
        key seeded rows' noise (SampleCountersMixin)."""
        tail = getattr(self.model, "last_tail", None)
        metadata = self.input_batch.sampling_metadata
        if (
            tail is not None
            and spec_decode_metadata is None
            and logits is not None
            and not getattr(self, "_grammar_step", False)
            and logits.data_ptr() == tail[1].data_ptr()
            and (
                sampled_tail_serves(metadata)
                if getattr(self.model, "last_tail_sampled", False)
                else greedy_sample_served(metadata)
            )
        ):
            from vllm.v1.outputs import SamplerOutput

            self.input_batch.update_async_output_token_ids()
            ids = tail[2][: logits.shape[0]].unsqueeze(-1)
            self.model.last_served_ids = tail[2]
            return SamplerOutput(sampled_token_ids=ids, logprobs_tensors=None)
        return super()._sample(logits, spec_decode_metadata)

    # Each of these creates or waits on streams and events (the async output copy, the
    # transfer event of the sampled ids, the dummy and profiling batches, graph capture).
    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zero newly allocated attention blocks (vLLM asks for it with hybrid models, so a
        partly written block holds no stale state). vLLM's way is a Triton kernel over raw
        device addresses; here one index_fill_ per distinct cache tensor, on the device."""
        import torch
        from vllm.v1.kv_cache_interface import FullAttentionSpec

        if not block_ids:
            return
        seen: set[int] = set()
        ids: torch.Tensor | None = None
        for group in self.kv_cache_config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, FullAttentionSpec):
                continue
            for name in group.layer_names:
                layer = self.compilation_config.static_forward_context.get(name)
                kv = getattr(layer, "kv_cache", None)
                if not isinstance(kv, torch.Tensor) or kv.data_ptr() in seen:
                    continue
                seen.add(kv.data_ptr())
                if ids is None:
                    ids = torch.tensor(block_ids, dtype=torch.int64).to(kv.device)
                kv.index_fill_(0, ids, 0)

    execute_model = _in_scope("execute_model")
    profile_run = _in_scope("profile_run")
    capture_model = _in_scope("capture_model")
    profile_cudagraph_memory = _in_scope("profile_cudagraph_memory")


def greedy_tail_serves(runner: Any) -> bool:
    """Whether the FULL graphs of this runner record the logits matmul and the greedy
    argmax after the model: a last pipeline rank of a generating model without
    speculative decoding (its steps sample from other rows)."""
    from vllm.distributed import get_pp_group

    return bool(
        not runner.is_pooling_model
        and runner.speculative_config is None
        and not runner.broadcast_pp_output
        and get_pp_group().is_last_rank
        and hasattr(runner.model, "compute_logits")
    )


def _greedy_tail(model: Any, input_ids: Any) -> Callable[[Any], tuple[Any, Any] | None]:
    """The logits of the graph's rows and their greedy ids, the ids also written into
    the runner's input ids (the model has read them): the next step's tokens where its
    requests are this step's, in the same rows (NpuModelRunner._prepare_input_ids)."""

    def tail(hidden_states: Any) -> tuple[Any, Any] | None:
        import torch

        logits = model.compute_logits(hidden_states)
        if logits is None:  # a rank the logits are gathered away from: its sampler's way
            return None
        # vLLM's greedy sampler: argmax of the float32 logits (a widening of bf16, so
        # the same maximum and the same first index), as int32.
        ids = logits.argmax(dim=-1).to(torch.int32)
        input_ids[: ids.shape[0]].copy_(ids)
        return logits, ids

    return tail


class NpuGraphWrapper(CUDAGraphWrapper):
    """vLLM's static graph wrapper on the runtime port's graphs (the platform names it).

    vLLM's CUDAGraphWrapper decides when to capture and when to replay (the forward
    context's runtime mode and batch descriptor); this one captures and replays through
    `DeviceGraphs` (torch_npu's NPUGraph on an NPU) instead of torch.cuda, on the
    process's capture stream, and keeps weak references to the captured outputs through
    the port (torch_npu._C._weak_ref_tensor) rather than vLLM's compiled `_C` op.

    The runner hands it its runtime; vLLM's piecewise backend constructs it by the
    platform's name with its own arguments only, and there the runtime is resolved.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        vllm_config: VllmConfig,
        runtime_mode: CUDAGraphMode,
        cudagraph_options: CUDAGraphOptions | None = None,
        *,
        runtime: DeviceRuntime | None = None,
    ) -> None:
        graphs = (runtime if runtime is not None else container().runtime()).graphs()
        if graphs is None:
            raise RuntimeError(
                f"{runtime_mode.name} graphs were asked of a device that captures none "
                "(the runtime port has no graphs); run with enforce_eager or "
                "-cc.cudagraph_mode=NONE"
            )
        self._graphs: DeviceGraphs = graphs
        self._layers: frozenset[str] | None = None  # _attention_layers, found at first use
        # The step's tail captured after the model in a FULL graph (set by the runner):
        # hidden states -> (logits, greedy ids); per graph, its outputs; the last call's.
        self.sample_tail: Callable[[Any], tuple[Any, Any] | None] | None = None
        self._tails: dict[Any, tuple[Any, Any]] = {}
        self.last_tail: tuple[Any, Any, Any] | None = None  # (hidden, logits, ids)
        self.last_served_ids: Any = None  # ids the runner last sampled from a replay
        # The sampled tail (sampled_tail.py): each FULL graph captured a second time with
        # it; per key (graph, output, tail outputs). The runner sets want_sampled for a
        # step whose batch it serves; last_tail_sampled says which tail last_tail is.
        self.sampled_tail: Callable[[Any], tuple[Any, Any] | None] | None = None
        self._sampled: dict[Any, tuple[Any, Any, tuple[Any, Any]]] = {}
        self.want_sampled = False
        self.last_tail_sampled = False
        super().__init__(runnable, vllm_config, runtime_mode, cudagraph_options)

    def _weak(self, output: Any) -> Any:
        def one(t: Any) -> Any:
            import torch

            if isinstance(t, torch.Tensor) and t.numel() > 0:
                return self._graphs.weak_ref(t)
            return t

        if isinstance(output, (list, tuple)):
            return type(output)(one(t) for t in output)
        if hasattr(output, "tensors"):  # IntermediateTensors (pipeline parallel)
            return type(output)({k: one(v) for k, v in output.tensors.items()})
        return one(output)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # This call's tail only: the graphs share one pool, so another run's output (a
        # piece's, an eager step's) may sit where an earlier replay's did.
        self.last_tail = None
        self.last_tail_sampled = False
        if not is_forward_context_available():
            return self.runnable(*args, **kwargs)
        context = get_forward_context()
        mode = context.cudagraph_runtime_mode
        if mode == CUDAGraphMode.NONE or mode != self.runtime_mode:
            return self.runnable(*args, **kwargs)
        key = context.batch_descriptor
        assert key is not None
        entry = self.concrete_cudagraph_entries.get(key)
        if entry is None:
            entry = self.concrete_cudagraph_entries[key] = CUDAGraphEntry(batch_descriptor=key)
        full = self.runtime_mode == CUDAGraphMode.FULL
        if entry.cudagraph is not None:
            # PIECEWISE: attention runs eagerly between the pieces. FULL: the attention
            # op inside reads its lengths from host lists captured with it, which the
            # update gives this step's (the replay waits for it at each such op).
            sampled = self._sampled.get(key) if full and self.want_sampled else None
            graph, output = (sampled[0], sampled[1]) if sampled else (entry.cudagraph, entry.output)
            self._graphs.replay(graph)
            if full:
                arguments = graph_update_arguments(context.attn_metadata, self._attention_layers())
                self._graphs.update(graph, arguments)
                if sampled is not None:
                    self.last_tail = (output, *sampled[2])
                    self.last_tail_sampled = True
                elif key in self._tails:
                    self.last_tail = (output, *self._tails[key])
            return output
        validate_cudagraph_capturing_enabled()
        # The logits matmul and the greedy argmax, recorded with the model: a decode step
        # whose sampling they serve launches neither (the runner's _sample takes the ids;
        # any other step samples from these logits).
        greedy = self.sample_tail if full else None
        graph, output, tail = self._capture(greedy, args, kwargs)
        entry.output = self._weak(output)
        if tail is not None:
            self._tails[key] = self._weak(tail)
            self.last_tail = (entry.output, *self._tails[key])
        entry.cudagraph = graph
        compilation_counter.num_cudagraph_captured += 1
        if tail is not None and self.sampled_tail is not None:
            # The same step again with the sampled tail: a sampling batch's graph.
            graph, sampled_output, sampled = self._capture(self.sampled_tail, args, kwargs)
            if sampled is not None:  # vLLM's counter counts one graph a batch descriptor
                self._sampled[key] = (graph, self._weak(sampled_output), self._weak(sampled))
        return output

    def _capture(
        self, tail_of: Callable[[Any], tuple[Any, Any] | None] | None, args: Any, kwargs: Any
    ) -> tuple[Any, Any, tuple[Any, Any] | None]:
        """One graph of the runnable (and `tail_of` its output, when given and the output
        is a tensor): (graph, output, tail outputs or None)."""
        graph = self._graphs.new_graph()
        stream = self._graphs.capture_stream()
        with ExitStack() as stack:
            if self.cudagraph_options.gc_disable:
                # Piecewise capture takes one graph per layer: gc once, for the first.
                stack.enter_context(patch("gc.collect", lambda *a, **k: None))
                stack.enter_context(patch("torch.accelerator.empty_cache", lambda *a, **k: None))
            full = self.runtime_mode == CUDAGraphMode.FULL
            stack.enter_context(
                self._graphs.capture(graph, self.graph_pool, stream, updatable=full)
            )
            output = self.runnable(*args, **kwargs)
            tail = tail_of(output) if tail_of is not None and _is_tensor(output) else None
            if self.cudagraph_options.weak_ref_output:
                output = self._weak(output)
        return graph, output, tail

    def compute_logits(self, hidden_states: Any) -> Any:
        """The model's logits; those of the FULL graph just replayed (no launch) when
        `hidden_states` are its output's first rows (a decode step samples each request's
        one token: vLLM's sampled rows are a view of the replay's output)."""
        tail = self.last_tail
        if tail is not None:
            output, logits, _ = tail
            if (
                hidden_states.data_ptr() == output.data_ptr()
                and hidden_states.shape[1:] == output.shape[1:]
                and hidden_states.stride() == output.stride()
                and hidden_states.shape[0] <= output.shape[0]
            ):
                return logits[: hidden_states.shape[0]]
        return self.runnable.compute_logits(hidden_states)

    def _attention_layers(self) -> frozenset[str]:
        """The names of the attention layers inside the wrapped model: the step's metadata
        also holds a drafter's (MTP, EAGLE), whose layers share the KV cache group but run
        outside this graph."""
        if self._layers is None:
            modules = getattr(self.runnable, "modules", lambda: ())()
            self._layers = frozenset(
                name for m in modules if isinstance(name := getattr(m, "layer_name", None), str)
            )
        return self._layers


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def graph_update_arguments(attn_metadata: Any, layers: frozenset[str]) -> list[dict[str, Any]]:
    """The host-side arguments of the attention ops of one step, in the order the layers
    launched them at capture (the forward context's layer order), for the graph's own
    `layers` (a drafter's in the same metadata run outside it): each layer's metadata
    says what its launches take (asking the ops port its builder was handed), once per
    metadata (the layers of a KV cache group share one, and its plan)."""
    from adapters.vllm.attention.metadata import GraphUpdatableMetadata, not_updatable

    if not isinstance(attn_metadata, dict):
        raise RuntimeError(
            "a FULL NPU graph replays with one attention metadata dict per step; got "
            f"{type(attn_metadata).__name__} (micro-batching is not served with NPU graphs)"
        )
    by_metadata: dict[int, list[dict[str, Any]]] = {}
    arguments: list[dict[str, Any]] = []
    for name, metadata in attn_metadata.items():
        if layers and name not in layers:  # none known: every layer is the graph's
            continue
        key = id(metadata)
        if key not in by_metadata:  # a layer of a metadata not seen yet this step
            if not isinstance(metadata, GraphUpdatableMetadata):
                raise not_updatable(metadata)
            by_metadata[key] = metadata.graph_host_arguments()
        arguments += by_metadata[key]
    return arguments
