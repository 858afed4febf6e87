"""VllmConfig -> the core's Deployment (the configuration use case, configure.py, applies
the plan back)."""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any

import attrs

from adapters.vllm.engine import eplb_hold
from adapters.vllm.kv_transfer import read_module_path
from ascend_core import kv_transfer
from ascend_core.deployment import (
    BatchSettings,
    CacheSettings,
    CompilationSettings,
    CompileMode,
    Deployment,
    DraftFacts,
    GraphMode,
    KvTransferRole,
    MlaShape,
    ModelFacts,
    ParallelSettings,
    SpeculativeSettings,
)
from ascend_core.deployment_builder import (
    Requested,
    build_deployment,
    export_layers,
    files_say,
)
from ascend_core.model_facts import model_facts_from_config
from ascend_core.plan.speculative import PROPOSER_PACKAGES
from ascend_core.profiling import ProfilerSettings, settings_from_mapping
from ports.device import ChipFamily, DeviceKind
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles
from ports.upstream import Upstream

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger("vllm.plugins.ascend")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def model_facts(vllm_config: VllmConfig) -> ModelFacts | None:
    """The core's reading of config.json (as the doctor reads it), with what vLLM resolved
    on top: sizes after its model-specific rules, MLA as enabled, hybrid layers."""
    mc = vllm_config.model_config
    if mc is None:
        return None
    facts = model_facts_from_config(
        mc.hf_config.to_dict(),
        source=f"{mc.model}/config.json",
        dtype=_dtype_name(mc.dtype),
        max_model_len=int(mc.max_model_len),
    )
    mla = facts.mla
    if not mc.use_mla:
        mla = None  # e.g. VLLM_MLA_DISABLE: the latent cache is not used
    elif mla is None:
        hf = mc.hf_text_config
        mla = MlaShape(
            kv_lora_rank=int(getattr(hf, "kv_lora_rank", 1) or 1),
            qk_rope_head_dim=int(getattr(hf, "qk_rope_head_dim", 0) or 0),
            qk_nope_head_dim=int(getattr(hf, "qk_nope_head_dim", 0) or 0),
            v_head_dim=int(getattr(hf, "v_head_dim", 0) or 0),
        )
    return attrs.evolve(
        facts,
        hidden_size=int(mc.get_hidden_size()),
        num_kv_heads=max(1, int(mc.get_total_num_kv_heads())),
        head_size=max(1, int(mc.get_head_size())),
        mla=mla,
        hybrid=bool(getattr(mc, "is_hybrid", False)),
        encoder_decoder=facts.encoder_decoder or bool(getattr(mc, "is_encoder_decoder", False)),
        # vLLM's registry knows the model takes more than text while config.json names no
        # tower key the core reads: the vision row (the common tower) speaks for it.
        vision=facts.vision
        or (bool(getattr(mc, "is_multimodal_model", False)) and not facts.multimodal),
    )


def _enum_by_name(enum_cls: type[enum.Enum], value: Any) -> Any:
    if value is None:
        return None
    name = getattr(value, "name", None)
    return enum_cls[name] if name in enum_cls.__members__ else None


# Where apply_config_platform_defaults keeps the compilation settings as the operator
# gave them: vLLM resolves unset ones (mode, cudagraph_mode, capture sizes, the custom
# ops' base mode) before
# check_and_update_config runs, and the doctor, which has no VllmConfig, sees them unset.
# An attribute of the config (on plugin_attrs), so it travels with it to the workers.
GIVEN_COMPILATION_ATTR = "_ascend_given_compilation"


def plugin_attrs(vllm_config: VllmConfig) -> Any:
    """Where the plugin keeps its own attributes on a VllmConfig: its compilation_config.
    They travel with the config (pickled) to the worker processes. VllmConfig itself
    cannot hold them: vllm.config.utils.replace, with which the speculative proposers copy
    the config for their draft model, refuses attributes that are not dataclass fields."""
    return vllm_config.compilation_config


def _compilation_as_set(vllm_config: VllmConfig) -> dict[str, Any]:
    cc = vllm_config.compilation_config
    return {
        "mode": _enum_by_name(CompileMode, cc.mode),
        "graph_mode": _enum_by_name(GraphMode, cc.cudagraph_mode),
        "capture_sizes": cc.cudagraph_capture_sizes,
        "custom_ops": tuple(cc.custom_ops),
        "encoder_graphs": bool(getattr(cc, "cudagraph_mm_encoder", False)),
    }


def remember_given_compilation(vllm_config: VllmConfig) -> None:
    """Record the compilation settings before vLLM resolves them (first call wins)."""
    attrs_ = plugin_attrs(vllm_config)
    if getattr(attrs_, GIVEN_COMPILATION_ATTR, None) is None:
        setattr(attrs_, GIVEN_COMPILATION_ATTR, _compilation_as_set(vllm_config))


def _compilation(vllm_config: VllmConfig) -> CompilationSettings:
    given = getattr(plugin_attrs(vllm_config), GIVEN_COMPILATION_ATTR, None)
    if given is None:  # a config vLLM did not build through __post_init__ (tests)
        given = _compilation_as_set(vllm_config)
    return CompilationSettings(
        enforce_eager=bool(vllm_config.model_config.enforce_eager),
        mode=given["mode"],
        graph_mode=given["graph_mode"],
        capture_sizes=given["capture_sizes"],
        custom_ops=given["custom_ops"],
        encoder_graphs=bool(given.get("encoder_graphs", False)),
    )


def _speculative(vllm_config: VllmConfig) -> SpeculativeSettings:
    """The method and k, and what the plan checks the draft against: the draft model's
    config as vLLM read it (no weight loaded yet), the target's vocabulary and MTP layers."""
    spec = vllm_config.speculative_config
    method = getattr(spec, "method", None) if spec else None
    if spec is None or not method:
        return SpeculativeSettings()
    mc = vllm_config.model_config
    draft = None
    draft_config = getattr(spec, "draft_model_config", None)
    if draft_config is not None and draft_config is not mc and not method.endswith("mtp"):
        hf = draft_config.hf_config
        draft_vocab = getattr(hf, "draft_vocab_size", None)
        draft = DraftFacts(
            architecture=str((getattr(hf, "architectures", None) or ["?"])[0]),
            tp=int(getattr(spec, "draft_tensor_parallel_size", None) or 1),
            num_layers=max(1, int(getattr(hf, "num_hidden_layers", 1) or 1)),
            num_attention_heads=max(1, int(getattr(hf, "num_attention_heads", 1) or 1)),
            num_kv_heads=max(1, int(draft_config.get_total_num_kv_heads())),
            head_size=max(1, int(draft_config.get_head_size())),
            vocab_size=max(1, int(getattr(hf, "vocab_size", 1) or 1)),
            draft_vocab_size=int(draft_vocab) if draft_vocab else None,
        )
    text = mc.hf_text_config
    return SpeculativeSettings(
        method=method,
        num_speculative_tokens=int(getattr(spec, "num_speculative_tokens", 0) or 0),
        draft=draft,
        target_vocab_size=int(mc.get_vocab_size()),
        mtp_layers=int(getattr(text, "num_nextn_predict_layers", 0) or 0),
    )


def requested(vllm_config: VllmConfig) -> Requested:
    """What the operator asked for, read from the VllmConfig vLLM built from the arguments."""
    pc = vllm_config.parallel_config
    cache = vllm_config.cache_config
    kv = vllm_config.kv_transfer_config
    role = None
    kv_settings = None
    if kv is not None and getattr(kv, "kv_role", None):
        role = KvTransferRole(kv.kv_role)
        raw = {
            name: getattr(kv, name, None)
            for name in (
                "kv_connector",
                "kv_role",
                "kv_connector_extra_config",
                "kv_connector_module_path",
                "kv_port",
                "kv_load_failure_policy",
            )
        }
        raw["kv_connector_module_path"] = read_module_path(raw["kv_connector_module_path"])
        kv_settings = kv_transfer.settings_from(raw)
    return Requested(
        parallel=ParallelSettings(
            tp=pc.tensor_parallel_size,
            pp=pc.pipeline_parallel_size,
            dp=pc.data_parallel_size,
            pcp=getattr(pc, "prefill_context_parallel_size", 1),
            dcp=getattr(pc, "decode_context_parallel_size", 1),
            expert_parallel=bool(pc.enable_expert_parallel),
            disable_custom_all_reduce=bool(pc.disable_custom_all_reduce),
            ray=bool(pc.use_ray),
            eplb=eplb_hold.settings_of(pc),
        ),
        speculative=_speculative(vllm_config),
        compilation=_compilation(vllm_config),
        cache=CacheSettings(
            block_size=cache.block_size if cache.user_specified_block_size else None,
            enable_prefix_caching=bool(cache.enable_prefix_caching),
            kv_cache_dtype=str(cache.cache_dtype),
            enable_sleep_mode=bool(vllm_config.model_config.enable_sleep_mode),
        ),
        batch=BatchSettings(
            max_num_seqs=int(vllm_config.scheduler_config.max_num_seqs),
            max_num_batched_tokens=int(vllm_config.scheduler_config.max_num_batched_tokens),
        ),
        kv_transfer_role=role,
        kv_transfer=kv_settings,
        additional_config=dict(vllm_config.additional_config or {}),
        user_quantization=vllm_config.model_config.quantization,
        lora=vllm_config.lora_config is not None,
        mm_off=modalities_off(vllm_config),
        profiler=profiler_settings(vllm_config),
    )


# The input modalities whose towers the core's support matrix has rows for.
MODALITIES = ("image", "video", "audio")


def modalities_off(vllm_config: VllmConfig) -> frozenset[str]:
    """The modalities vLLM takes none of (--limit-mm-per-prompt 0, --language-model-only);
    none for a text-only model (no multimodal config; the matrix has no tower to judge)."""
    mc = vllm_config.model_config
    mm = getattr(mc, "multimodal_config", None) if mc is not None else None
    if mm is None:
        return frozenset()
    return frozenset(m for m in MODALITIES if mm.get_limit_per_prompt(m) == 0)


def profiler_settings(vllm_config: VllmConfig) -> ProfilerSettings:
    """vLLM's ProfilerConfig as the core's plain data (the worker's profiler reads it too);
    the same mapping as the doctor's (ascend_core.profiling.settings_from_mapping)."""
    pc = getattr(vllm_config, "profiler_config", None)
    fields = getattr(pc, "__dataclass_fields__", {})
    return settings_from_mapping({name: getattr(pc, name) for name in fields})


def deployment(
    vllm_config: VllmConfig,
    kind: DeviceKind,
    chip_family: ChipFamily,
    env: Environment,
    files: ModelFiles | None,
    host_cpus: int | None,
    local_files: LocalFiles,
    upstream: Upstream | None = None,
) -> Deployment | None:
    """The Deployment the core plans for; None before vLLM knows the model. `upstream`
    answers whether the speculative method's proposer package imports (suffix)."""
    model = model_facts(vllm_config)
    if model is None:
        return None
    asked = requested(vllm_config)
    package = PROPOSER_PACKAGES.get(asked.speculative.method or "")
    if package is not None and upstream is not None:
        installed = upstream.has_symbol(package.symbol)
        asked = attrs.evolve(
            asked, speculative=attrs.evolve(asked.speculative, proposer_installed=installed)
        )
    detected = files_say(files)
    return build_deployment(
        model,
        kind,
        chip_family,
        asked,
        env,
        detected,
        host_cpus,
        local_files,
        export_layers(files, asked.user_quantization, detected),
    )
