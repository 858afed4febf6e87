"""vLLM's Platform for Ascend: one base with the hooks, one subclass per device kind.

Each hook translates vLLM's question for the core or a port and the answer back;
the decisions live in ascend_core.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import torch
from vllm.platforms.interface import Platform, PlatformEnum

from adapters.container import container
from adapters.vllm.engine.startup_errors import stop_on_our_errors
from ascend_core.errors import ConfigError
from ascend_core.op_limits import ATTENTION_DTYPES
from ascend_core.ray_placement import RAY_RESOURCES
from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE
from ports.device import ChipFamily, DeviceKind

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    from adapters.vllm.engine.configure import ConfigPorts
    from ports.runtime import DeviceRuntime

logger = logging.getLogger("vllm.plugins.ascend")

# The configuration use case (adapters.vllm.engine.configure: the translation to the
# core, the core's plan and the deployment and config schema they import) is imported by
# the hooks that use it, not here: every vLLM process imports this module when it
# resolves current_platform, and only the process that builds the config and the
# workers plan (about 90 ms of imports, scripts/bench_startup.py).


class AscendPlatformBase(Platform):
    """The hooks both device kinds share; class attributes come from the subclasses."""

    _enum = PlatformEnum.OOT
    device_kind: DeviceKind

    @classmethod
    def chip_family(cls) -> ChipFamily:
        return ChipFamily.HOST

    @classmethod
    def runtime(cls) -> DeviceRuntime:
        return container().runtime()  # type: ignore[no-any-return]

    @classmethod
    def tensors_on_host(cls) -> bool:
        """Whether this device kind keeps tensors in host memory (the host device)."""
        return cls.device_kind is DeviceKind.CPU

    @classmethod
    def current_stream(cls) -> Any:
        """vLLM's current_stream() asks the platform on devices other than CUDA/ROCm/CPU."""
        return cls.runtime().current_stream()

    # -- configuration (adapters.vllm.engine.configure) -----------------------------

    @classmethod
    def config_ports(cls) -> ConfigPorts:
        """What the configuration use case reads beyond VllmConfig, from the container."""
        from adapters.vllm.engine.configure import ConfigPorts

        c = container()
        return ConfigPorts(
            c.environment(), c.model_files, c.host_cpus(), c.local_files(), c.upstream(),
            c.env_settings().log_plan,
        )

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config: VllmConfig) -> None:
        """Called by vLLM before it resolves unset compilation settings: remember them as
        given, so the plan sees what the operator asked for (as `ascend-doctor plan` does)."""
        from adapters.vllm.engine import configure

        configure.remember_given(vllm_config)

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        """Translate, plan, apply, patch: the configuration use case (configure.py).

        The plan's errors stop the start with their messages alone (StartupError).
        """
        from adapters.vllm.engine import configure

        configure.configure(vllm_config, cls.device_kind, cls.chip_family(), cls.config_ports())

    @classmethod
    def apply_deployment_patches(cls, vllm_config: VllmConfig) -> None:
        """The deployment's patch plan, applied in a worker's process (the worker calls it)."""
        from adapters.vllm.engine import configure

        configure.apply_patches(vllm_config, cls.device_kind, cls.chip_family(), cls.config_ports)

    @classmethod
    def pre_register_and_update(cls, parser: Any = None) -> None:
        """`ascend` among vLLM's quantization methods (and the CLI's choices, if any).

        Called with no parser first thing in EngineArgs.create_engine_config: there the
        variables vLLM reads while it builds the config are set (configure.before_config)
        and the arguments vLLM would fail on with a traceback are refused first
        (startup_errors.py)."""
        from adapters.vllm.engine import configure, startup_errors
        from adapters.vllm.engine.registration import register_quantization
        from adapters.vllm.quantization.config import METHOD_NAME

        register_quantization()
        if parser is None:
            ports = container()
            engine_args = startup_errors.engine_args_calling()
            model = getattr(engine_args, "model", None)
            features = None
            if configure.features_matter(cls.device_kind):
                files = ports.model_files(model) if isinstance(model, str) and model else None
                features = configure.runner_features(engine_args, files)
            configure.before_config(cls.device_kind, features=features)
            startup_errors.refuse_before_start(engine_args, ports.model_files, ports.upstream())
            from adapters.vllm.engine import eplb_hold

            eplb_hold.hold(engine_args)
        action = None if parser is None else parser._option_string_actions.get("--quantization")
        if action is not None and action.choices is not None and METHOD_NAME not in action.choices:
            action.choices = [*action.choices, METHOD_NAME]

    @classmethod
    def update_block_size_for_backend(cls, vllm_config: VllmConfig) -> None:
        """Keep the block size the plan chose; vLLM would reset it to its own default."""
        cache = vllm_config.cache_config
        model = vllm_config.model_config
        if model is None or model.is_hybrid or not cache.block_size:
            super().update_block_size_for_backend(vllm_config)
            return
        backends = cls._find_non_ssm_backends(vllm_config)
        if not all(b.supports_block_size(cache.block_size) for b in backends):
            super().update_block_size_for_backend(vllm_config)

    @classmethod
    def validate_environ(cls, hard_fail: bool) -> None:
        """vLLM's unknown-variable check, with VLLM_ASCEND_* left to the core's env registry."""

        from vllm import envs

        from ascend_core.env_registry import unknown_variables

        for unknown in unknown_variables(container().environment()):
            logger.warning("%s Fix: %s", unknown.what, unknown.hint)
        for name in os.environ:
            if (
                name.startswith("VLLM_")
                and not name.startswith("VLLM_ASCEND_")
                and name not in envs.environment_variables
            ):
                if hard_fail:
                    raise ValueError(f"Unknown vLLM environment variable detected: {name}")
                logger.warning("Unknown vLLM environment variable detected: %s", name)

    # -- attention -----------------------------------------------------------------

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum,
        attn_selector_config: AttentionSelectorConfig,
        num_heads: int | None = None,
    ) -> str:
        from vllm.config import get_current_vllm_config

        from adapters.vllm.attention.selection import backend_path
        from adapters.vllm.engine import translate
        from ascend_core.attention import batch_invariant_requested

        vllm_config = get_current_vllm_config()
        c = container()
        with stop_on_our_errors(vllm_config.parallel_config):
            return backend_path(
                attn_selector_config,
                cls.device_kind,
                cls.chip_family(),
                batch_invariant=batch_invariant_requested(c.environment(), c.env_settings()),
                model=translate.model_facts(vllm_config),
            )

    @classmethod
    def get_mla_prefill_backend_cls(cls, mla_selector_config: Any) -> type:
        """vLLM's MLA layer asks for a prefill kernel when built; ours is in the MLA impl."""
        from adapters.vllm.attention.mla import MlaPrefillQuery

        return MlaPrefillQuery

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        # vLLM calls this in each worker before any kernel launch; the kernel overrides
        # are patches of the core's registry, applied here if register_general has not.
        from adapters.vllm.patches import apply_plan, device_patch_plan

        apply_plan(device_patch_plan(cls.device_kind, cls.chip_family()))

    @classmethod
    def import_kernels(cls) -> None:
        """vLLM's compiled ops target CUDA/CPU builds; our ops come through the ops port."""

    # -- device --------------------------------------------------------------------

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return str(cls.runtime().device_name(device_id))

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return int(cls.runtime().memory_info().total_bytes)

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        """The device allocator's live bytes (vLLM's "Model loading took" is the change
        across the load); where the device cannot tell, memory in use on the device."""
        allocated = cls.runtime().allocated_bytes()
        if allocated is not None:
            return float(allocated)
        info = cls.runtime().memory_info()
        return float(info.total_bytes - info.free_bytes)

    @classmethod
    def set_device(cls, device: torch.device | int) -> None:
        # KV connectors (vLLM's MooncakeConnector) pass torch.accelerator's bare index.
        cls.runtime().set_device(device if isinstance(device, int) else device.index or 0)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        cls.runtime().seed(seed)

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        return None

    @classmethod
    def is_sleep_mode_available(cls) -> bool:
        """Both devices serve sleep mode: the worker releases and restores the weights and
        KV cache through the sleep-memory port (ports/sleep.py)."""
        return True

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        # Pinning host memory needs an accelerator runtime; host tensors need none.
        return not cls.tensors_on_host()

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        # vLLM's hybrid KV-cache manager: hybrid models keep their mamba/GDN state in
        # its own cache group (one state page per request) next to the paged attention.
        return True

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        return None

    @classmethod
    def get_punica_wrapper(cls) -> str:
        """vLLM's LoRA layers' shrink/expand, on the serving device's LoRA port."""
        return "adapters.vllm.layers.punica.AscendPunicaWrapper"


class AscendHostPlatform(AscendPlatformBase):
    """No NPU: the host serves through adapters.cpu (asked for with VLLM_ASCEND_DEVICE=cpu)."""

    device_kind = DeviceKind.CPU
    device_name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    # Ray has no accelerator for the host device: each worker holds one Ray CPU (vLLM's
    # Ray executor needs the two declared patches `host-ray-*` for that key).
    ray_device_key = RAY_RESOURCES[DeviceKind.CPU]
    dist_backend = "gloo"
    simple_compile_backend = "inductor"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def opaque_attention_op(cls) -> bool:
        """Attention as vLLM's one opaque op, so the compiled host model (the plan's
        DYNAMO_TRACE_ONCE) traces around our backend, whose metadata is data-dependent."""
        return True


class AscendNpuPlatform(AscendPlatformBase):
    """Ascend NPUs through adapters.npu (torch_npu, HCCL)."""

    device_kind = DeviceKind.NPU
    device_name = "npu"
    device_type = "npu"
    dispatch_key = "PrivateUse1"
    # Ray's NPU accelerator resource: Ray counts a node's NPUs and sets
    # ASCEND_RT_VISIBLE_DEVICES in each worker to the one it reserved (the worker then
    # uses that device, ascend_core.ray_placement.ray_worker_device_index).
    ray_device_key = RAY_RESOURCES[DeviceKind.NPU]
    device_control_env_var = VISIBLE_DEVICES_VARIABLE
    simple_compile_backend = "eager"

    @property
    def dist_backend(self) -> str:  # type: ignore[override]
        """The process-group backend of the communicator the container wired (HCCL)."""
        return str(container().communicator().backend)

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        from adapters.vllm.worker.communicator import COMMUNICATOR_PATH

        return COMMUNICATOR_PATH

    @classmethod
    def use_custom_op_collectives(cls) -> bool:
        """vLLM's collectives as its torch.ops.vllm.* custom ops (as CUDA, ROCm and XPU
        opt in): one opaque op each in the compiled pieces and graphs. Otherwise Dynamo
        traces into the device communicator's Python (its host staging too) and stops."""
        return True

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        # npu_fused_infer_attention_score takes fp16/bf16 queries only (the core's limits).
        return [getattr(torch, name) for name in ATTENTION_DTYPES]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        """vLLM asks this before building the model; the same rule the plan applies."""
        name = str(dtype).removeprefix("torch.")
        if name not in ATTENTION_DTYPES:
            raise ConfigError(
                f"model_config.dtype={name} (--dtype): npu_fused_infer_attention_score "
                "takes float16 or bfloat16 only.",
                "Use --dtype bfloat16 (or float16).",
            )

    @classmethod
    def chip_family(cls) -> ChipFamily:
        from adapters.vllm.engine.plugin import serving_device

        return serving_device()[1]

    # -- graphs --------------------------------------------------------------------

    @classmethod
    def opaque_attention_op(cls) -> bool:
        """Attention as vLLM's one opaque op, where vLLM's piecewise compiler splits the
        model: PIECEWISE graphs hold what lies between, and attention (whose host-side
        lengths change every step) runs eagerly between their replays."""
        return True

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        """vLLM captures the plan's NPU graphs through get_static_graph_wrapper_cls."""
        return True

    @classmethod
    def get_static_graph_wrapper_cls(cls) -> str:
        """vLLM's graph wrapper on the runtime port's graphs (torch_npu's NPUGraph)."""
        return "adapters.vllm.worker.npu_model_runner.NpuGraphWrapper"

    @classmethod
    def current_stream(cls) -> Any:
        """The process's own stream: an NPU graph is never captured on the default one,
        and vLLM captures on (and replays from) the stream this returns."""
        graphs = cls.runtime().graphs()
        return cls.runtime().current_stream() if graphs is None else graphs.capture_stream()

    def graph_pool_handle(self) -> Any:
        """A graph memory pool (vLLM shares one across the graphs of a process)."""
        graphs = self.runtime().graphs()
        if graphs is None:
            raise RuntimeError("the runtime port of this NPU worker has no graphs")
        return graphs.pool()

