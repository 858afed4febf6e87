"""The workers: vLLM's GPU worker with device setup and KV-cache sizing through the runtime port."""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import torch
from vllm.config import set_current_vllm_config
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from adapters.container import container
from adapters.vllm.engine.device_classes import DEVICE_CLASSES
from adapters.vllm.engine.startup_errors import stop_on_our_errors
from adapters.vllm.worker.kv_cache_bytes import kv_cache_budget
from adapters.vllm.worker.profiling import vllm_profiler_check_skipped, worker_profiler
from ascend_core.memory_budget import format_bytes
from ascend_core.plan import WorkerKind
from ports.cluster import RayCluster
from ports.device import DeviceKind
from ports.runtime import DeviceRuntime, MemoryInfo
from ports.sleep import SleepMemory, SleepOutcome, SleepTag

logger = logging.getLogger("vllm.plugins.ascend")

# Sleep mode's tags by the names vLLM passes (sleep/wake_up/discard, its memory pools).
TAGS = {tag.value: tag for tag in SleepTag}


class DeviceWorker(Worker):
    """No CuMem pool; device, memory and seeds from the container's runtime port.

    The device kinds differ only in what is wired: the runtime (and ops) the container
    gives, and the model runner class named by `runner_path`; the worker of each kind is
    this class under the name the core's WorkerKind maps to.
    """

    runtime: DeviceRuntime
    runner_path: ClassVar[str]  # on vLLM's V1 runner
    runner_v2_path: ClassVar[str | None] = None  # on vLLM's V2 runner (the plan's choice)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        with vllm_profiler_check_skipped(vllm_config):
            super().__init__(*args, **kwargs)
        if self.use_v2_model_runner and self.runner_v2_path is None:
            # The platform's configure makes vLLM believe the plan's runner.
            raise RuntimeError(
                "vLLM's config says model runner V2 in this worker, but it builds V1 "
                f"({self.runner_path}): the engine and the worker would disagree. The "
                "platform's check_and_update_config sets VLLM_USE_V2_MODEL_RUNNER=0 for "
                "this device; was the config built without it?"
            )
        ports = container()
        self.runtime = ports.runtime()
        # Resolved when first asked (the NPU's sleep pool builds its allocator then; Ray
        # only on a Ray cluster): the providers, once, here.
        self._sleep_memory: Callable[[], SleepMemory] = ports.sleep_memory
        self._ray_cluster: Callable[[], RayCluster] = ports.ray_cluster
        # Sleep mode's state: graphs dropped by a sleep (captured again on waking), and a
        # KV cache taken from a KV connector by `discard` (given back on waking).
        self._graphs_dropped = False
        self._kv_unregistered = False
        from vllm.platforms import current_platform

        # This process may not have built the config; the deployment's patches apply here.
        current_platform.apply_deployment_patches(self.vllm_config)
        # vLLM's profile() (/start_profile, /stop_profile) drives this one: the device's.
        self.profiler_config = self.vllm_config.profiler_config
        self.profiler = worker_profiler(
            self.vllm_config,
            getattr(current_platform, "device_kind", DeviceKind.CPU),
            ports.profiler(),
        )

    def device_index(self) -> int:
        """The device this worker computes on: its local rank past the devices of the DP
        ranks before it on this node (vLLM's get_local_gpu_index, as its GPU worker maps
        it), or, on a Ray cluster, the device Ray reserved for it
        (ascend_core.ray_placement)."""
        if not self.parallel_config.use_ray:
            return int(self.parallel_config.get_local_gpu_index(self.local_rank))
        import os

        from vllm.platforms import current_platform

        from ascend_core.ray_placement import ray_worker_device_index

        reserved = self._ray_cluster().reserved(current_platform.ray_device_key)
        variable = getattr(current_platform, "device_control_env_var", "")
        with stop_on_our_errors(self.parallel_config):
            index = ray_worker_device_index(reserved, os.environ.get(variable), self.local_rank)
        logger.info(
            "Ray worker rank %d (local rank %d): reserved %s %s, %s=%s, device index %d",
            self.rank, self.local_rank, current_platform.ray_device_key, list(reserved),
            variable, os.environ.get(variable), index,
        )
        return index

    def init_device(self) -> None:
        from vllm.platforms import current_platform
        from vllm.utils.torch_utils import set_random_seed

        index = self.device_index()
        self.device = self.runtime.device(index)
        self.runtime.set_device(index)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        # vLLM's runner takes scratch from its workspace manager and locks it before graph
        # capture (so a captured graph never sees it move): one per worker, on its device.
        from vllm.v1.worker.workspace import init_workspace_manager

        init_workspace_manager(self.device, 2 if self.parallel_config.enable_dbo else 1)
        path = self.runner_v2_path if self.use_v2_model_runner else self.runner_path
        assert path is not None  # __init__ refused V2 without a V2 runner
        module, _, name = path.partition(":")
        runner = getattr(importlib.import_module(module), name)
        with stop_on_our_errors(self.parallel_config):
            self.model_runner = runner(self.vllm_config, self.device, self.runtime)
        if self.model_config.enable_sleep_mode and _loads_weights_in_pool(self.model_runner):
            # V2's load_model also builds the runner's batch and sampling state on the
            # device: only the model's loading goes in the weights' pool, else a level-2
            # sleep would discard that state with the weights (and wake it as zeros).
            memory = self._sleep_memory
            self.model_runner.weights_pool = lambda: memory().allocation_pool(SleepTag.WEIGHTS)

    def _maybe_get_memory_pool_context(self, tag: str) -> contextlib.AbstractContextManager[None]:
        """vLLM's CuMem pool, ours: with sleep mode, the weights and the KV cache come from
        the sleep-memory port's pool (the NPU's keeps their addresses through a sleep;
        elsewhere none); other tags ("workspace", "runtime") stay with the device's
        allocator."""
        if not self.model_config.enable_sleep_mode or tag not in TAGS:
            return contextlib.nullcontext()
        if TAGS[tag] is SleepTag.WEIGHTS and _loads_weights_in_pool(self.model_runner):
            return contextlib.nullcontext()  # the runner puts the model's loading there
        memory = self._sleep_memory()
        return memory.allocation_pool(TAGS[tag])

    @torch.inference_mode()
    def determine_available_memory(self) -> int:
        """The KV-cache bytes, sized after a profiling pass as vLLM's GPU worker does, so the
        memory the process holds includes the activation peak of the largest batch."""
        memory = self._profile_memory()
        graph_bytes = self._graph_memory_estimate()
        if graph_bytes:
            # The graphs captured after the KV cache is allocated need their pool too.
            memory = attrs.evolve(memory, free_bytes=max(0, memory.free_bytes - graph_bytes))
        with stop_on_our_errors(self.parallel_config):
            budget = kv_cache_budget(
                memory,
                self.cache_config.gpu_memory_utilization,
                self.cache_config.kv_cache_memory_bytes,
                self._one_sequence_bytes(),
                self.model_config.max_model_len,
                self.cache_config.block_size,
                host_workers=self._host_workers(),
                max_num_seqs=self.scheduler_config.max_num_seqs,
            )
        if budget.warning is not None:
            logger.warning("%s", budget.warning)
        logger.info("%s", budget.reason)
        return budget.kv_cache_bytes

    def _graph_memory_estimate(self) -> int:
        """Bytes the graphs the plan captures will hold, measured as vLLM's GPU worker
        measures CUDA graphs (a few throwaway captures in a pool of their own); 0 on a
        device without graphs or when none are captured."""
        from vllm.config import CUDAGraphMode

        mode = self.compilation_config.cudagraph_mode
        if (
            self.model_config.enforce_eager
            or mode in (None, CUDAGraphMode.NONE)
            or self.runtime.graphs() is None
        ):
            return 0
        with set_current_vllm_config(self.vllm_config):
            estimate = int(self.model_runner.profile_cudagraph_memory())
        fixed = self.cache_config.kv_cache_memory_bytes is not None
        logger.info(
            "%s graphs are estimated to hold %s; %s.",
            mode.name,
            format_bytes(estimate),
            "--kv-cache-memory-bytes fixes the KV cache, the graphs come on top"
            if fixed
            else "the KV cache budget leaves it free",
        )
        return estimate

    def _host_workers(self) -> int | None:
        """On the host device, the workers on this machine that share its RAM; else None."""
        from vllm.platforms import current_platform

        if getattr(current_platform, "device_kind", None) is not DeviceKind.CPU:
            return None
        pc = self.parallel_config
        return max(1, pc.local_world_size * max(1, pc.data_parallel_size_local))

    def _profile_memory(self) -> MemoryInfo:
        """Device memory after vLLM's profile_run (a dummy batch of max_num_batched_tokens,
        then the sampler), with the peak of that pass, read through the runtime port.

        Run with --kv-cache-memory-bytes too, as vLLM does: an activation peak that does
        not fit then fails at start instead of at the first full batch. Graph memory is
        estimated apart (_graph_memory_estimate).
        """
        gc.collect()
        self.runtime.empty_cache()
        self.runtime.reset_peak_memory()
        self._announce_compile()
        start = time.perf_counter()
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.profile_run(randomize_inputs=self.randomize_dummy_inputs)
        self.runtime.synchronize()
        # Freed activations go back to the device before free memory is read, so only
        # what the process keeps counts as not free.
        gc.collect()
        self.runtime.empty_cache()
        memory = self.runtime.memory_info()
        logger.info(
            "Profiling pass of %d tokens took %.2f s; peak held by this process %s, free %s of %s.",
            self.scheduler_config.max_num_batched_tokens,
            time.perf_counter() - start,
            format_bytes(memory.peak_allocated_bytes),
            format_bytes(memory.free_bytes),
            format_bytes(memory.total_bytes),
        )
        return memory

    def _announce_compile(self) -> None:
        """Once, before the profiling pass: its first forward compiles the model, the
        longest silent step of a first start."""
        from vllm.config import CompilationMode

        if self.compilation_config.mode == CompilationMode.NONE or self.local_rank != 0:
            return
        if self._host_workers() is not None:
            logger.info(
                "Compiling the model with Dynamo and Inductor in the first forward of the "
                "profiling pass: about 30 s for a small model on 2 cores on a first start, "
                "longer for larger models; later starts reuse the compile caches "
                "(--enforce-eager runs eagerly and skips it)."
            )
        else:
            logger.info(
                "Tracing the model with Dynamo in the first forward of the profiling pass: "
                "seconds to a minute on a first start (--enforce-eager skips it)."
            )

    def _one_sequence_bytes(self) -> int:
        specs = self.model_runner.get_kv_cache_spec()
        return sum(spec.max_memory_usage_bytes(self.vllm_config) for spec in specs.values())

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """vLLM captures the plan's graphs here (the NPU: through the platform's graph
        wrapper); the compiled model was already built by the profiling pass."""
        from vllm.config import CUDAGraphMode
        from vllm.utils.torch_utils import set_random_seed

        mode = self.compilation_config.cudagraph_mode
        if not self.model_config.enforce_eager and mode not in (None, CUDAGraphMode.NONE):
            start = time.perf_counter()
            with set_current_vllm_config(self.vllm_config):
                graph_bytes = self.model_runner.capture_model()
            logger.info(
                "Captured %s graphs for sizes %s in %.2f s; graph memory %s.",
                mode.name,
                self.compilation_config.cudagraph_capture_sizes,
                time.perf_counter() - start,
                format_bytes(int(graph_bytes or 0)),
            )
        set_random_seed(self.model_config.seed)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )

    def sleep(self, level: int = 1) -> None:
        """Release the KV cache and the weights through the sleep-memory port (level 1:
        the weights kept in host memory; level 2: discarded, reloaded by the caller).

        Captured graphs address the released memory: where the port maps it back at the
        same addresses (the NPU's pool) they stay; where it comes back elsewhere they are
        dropped here and captured again once everything is awake."""
        if level not in (1, 2):
            raise ValueError(f"sleep level {level} is not served by this worker; use 1 or 2")
        memory = self._sleep_memory()
        model = self.model_runner.model
        self.runtime.synchronize()
        before = self.runtime.allocated_bytes()
        if level == 2 and self.model_config.sleep_preserve_parameter_names:
            raise ValueError(
                "sleep_preserve_parameter_names is not served by this worker: level 2 "
                "discards every weight; drop it and reload the weights after waking"
            )
        if level == 2:
            # Buffers (rotary caches and the like) are not in a checkpoint: kept, as vLLM does.
            self._sleep_saved_buffers = {
                name: buffer.cpu().clone() for name, buffer in model.named_buffers()
            }
        self._track(memory, set(SleepTag))
        self._drop_graphs_if_moved(memory.addresses_kept)
        offload = {SleepTag.WEIGHTS} if level == 1 else set()
        outcome = memory.sleep(offload)
        self._log_release(f"Sleep level {level}", outcome, before)

    def discard(self, tags: tuple[str, ...]) -> None:
        """vLLM's `release_kv_cache_memory` (and `discard`): release the memory of `tags`
        without keeping their contents, through the sleep-memory port; `wake_up(tags)`
        gives it back (zeros). vLLM's own discard would take its CUDA allocator's path."""
        unknown = sorted(set(tags) - set(TAGS))
        if unknown:
            raise ValueError(f"discard tags {unknown} are unknown; use {sorted(TAGS)}")
        chosen = {TAGS[t] for t in tags}
        memory = self._sleep_memory()
        self.runtime.synchronize()
        before = self.runtime.allocated_bytes()
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

        if SleepTag.KV_CACHE in chosen and has_kv_transfer_group():
            get_kv_transfer_group().unregister_kv_caches()
            self._kv_unregistered = True
        self._track(memory, chosen)
        self._drop_graphs_if_moved(memory.addresses_kept)
        outcome = memory.sleep(offload=(), tags=chosen)
        self._log_release(f"Discarding {sorted(tags)}", outcome, before)

    def _track(self, memory: SleepMemory, tags: set[SleepTag]) -> None:
        """Give the sleep-memory port the tensors of each of `tags` (the weights with the
        model's buffers, the KV cache)."""
        if SleepTag.WEIGHTS in tags:
            model = self.model_runner.model
            memory.track(SleepTag.WEIGHTS, [*model.parameters(), *model.buffers()])
        if SleepTag.KV_CACHE in tags:
            memory.track(SleepTag.KV_CACHE, self._kv_cache_tensors())

    def _drop_graphs_if_moved(self, addresses_kept: bool) -> None:
        """Captured graphs address the memory about to be released; when it comes back
        elsewhere they are dropped now and captured again once everything is awake."""
        dropped = self._graphs_captured() and not addresses_kept
        self._graphs_dropped = self._graphs_dropped or dropped
        if dropped:
            from vllm.compilation.cuda_graph import CUDAGraphWrapper

            CUDAGraphWrapper.clear_all_graphs()
            # V2 keeps its FULL graphs in its own graph manager, not in the wrappers: its
            # release_graphs drops them and keeps what to capture (vLLM's elastic EP drops
            # them so), so the capture on waking records them over the new addresses.
            manager = getattr(self.model_runner, "cudagraph_manager", None)
            if self.use_v2_model_runner and manager is not None:
                manager.release_graphs()
            gc.collect()

    def _log_release(self, what: str, outcome: SleepOutcome, before: int | None) -> None:
        after = self.runtime.allocated_bytes()
        logger.info(
            "%s released %s (%s kept in host memory)%s; allocated %s -> %s.",
            what,
            format_bytes(outcome.released_bytes),
            format_bytes(outcome.offloaded_bytes),
            "; graphs dropped, captured again on waking" if self._graphs_dropped else "",
            "?" if before is None else format_bytes(before),
            "?" if after is None else format_bytes(after),
        )

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Give the tagged memory back (all when `tags` is None); once nothing sleeps,
        capture the graphs dropped by `sleep` (if any) again, over the new addresses."""
        memory = self._sleep_memory()
        unknown = sorted(set(tags or ()) - set(TAGS) - {"scheduling"})
        if unknown:
            raise ValueError(f"wake_up tags {unknown} are unknown; use {sorted(TAGS)}")
        chosen = None if tags is None else [TAGS[t] for t in tags if t in TAGS]
        memory.wake_up(chosen)
        if self._kv_unregistered and SleepTag.KV_CACHE not in memory.asleep():
            from vllm.distributed.kv_transfer import get_kv_transfer_group

            get_kv_transfer_group().restore_kv_caches()  # unregistered by `discard`
            self._kv_unregistered = False
        if (chosen is None or SleepTag.WEIGHTS in chosen) and self._sleep_saved_buffers:
            model = self.model_runner.model
            for name, buffer in model.named_buffers():
                if name in self._sleep_saved_buffers:
                    buffer.data.copy_(self._sleep_saved_buffers[name].data)
            self._sleep_saved_buffers = {}
        self.runtime.synchronize()
        if memory.asleep() or not self._graphs_dropped:
            return
        start = time.perf_counter()
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.capture_model()
        self._graphs_dropped = False
        logger.info("Woken; graphs captured again in %.2f s.", time.perf_counter() - start)

    def _graphs_captured(self) -> bool:
        from vllm.config import CUDAGraphMode

        mode = self.compilation_config.cudagraph_mode
        return (
            not self.model_config.enforce_eager
            and mode not in (None, CUDAGraphMode.NONE)
            and self.runtime.graphs() is not None
        )

    def _kv_cache_tensors(self) -> list[torch.Tensor]:
        """The runner's KV cache tensors (one or more per layer)."""
        found: list[torch.Tensor] = []

        def collect(value: Any) -> None:
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    collect(item)

        collect(self.model_runner.kv_caches)
        return found


def _loads_weights_in_pool(runner: object) -> bool:
    """Whether the runner allocates the model's weights in sleep mode's pool itself
    (NpuModelRunnerV2.weights_pool), around the model's loading alone."""
    return hasattr(runner, "weights_pool")


class HostWorker(DeviceWorker):
    """WorkerKind.HOST: the host device (adapters.cpu), vLLM's CPU runner."""

    runner_path = DEVICE_CLASSES[WorkerKind.HOST].runner


class NpuWorker(DeviceWorker):
    """WorkerKind.NPU: adapters.npu's runtime on torch_npu, vLLM's GPU runner on it."""

    runner_path = DEVICE_CLASSES[WorkerKind.NPU].runner
    runner_v2_path = DEVICE_CLASSES[WorkerKind.NPU].runner_v2
