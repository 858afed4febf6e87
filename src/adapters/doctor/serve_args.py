"""The `vllm serve` options the doctor plans with, as plain attrs data.

They come from adapters.vllm.engine.doctor_args, loaded by name: the doctor itself may not
import vLLM, and the parse is slow, so tests pass a dict instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from attrs import field, frozen

from ascend_core.errors import ConfigError

ParseServeArgs = Callable[[Sequence[str]], Mapping[str, Any]]
PARSER_MODULE = "adapters.vllm.engine.doctor_args"


def vllm_parser() -> ParseServeArgs:
    """vLLM's own parser of `vllm serve` arguments (imports vLLM: seconds)."""
    module = importlib.import_module(PARSER_MODULE)
    parse: ParseServeArgs = module.parse_serve_args
    return parse


# Options `vllm serve` takes as JSON objects (vLLM refuses anything else).
JSON_OBJECT_OPTIONS = (
    "additional_config",
    "compilation_config",
    "speculative_config",
    "kv_transfer_config",
    "limit_mm_per_prompt",
)


def _mapping(raw: Any) -> Mapping[str, Any]:
    return dict(raw) if isinstance(raw, Mapping) else {}


def _backend(value: Any) -> str | None:
    return None if value is None else str(value)


@frozen
class ServeArgs:
    """The parsed options; None where the user left vLLM to decide."""

    model: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    pcp: int = 1
    dcp: int = 1
    expert_parallel: bool = False
    enable_eplb: bool = False
    eplb_config: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    enable_lora: bool = False
    language_model_only: bool = False  # --language-model-only: no multimodal input
    limit_mm_per_prompt: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    max_loras: int = 1  # vLLM's defaults
    max_lora_rank: int = 16
    nnodes: int = 1
    distributed_executor_backend: str | None = None  # "ray", "mp", ...; None: vLLM's choice
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.92  # vLLM's default
    kv_cache_memory_bytes: int | None = None
    quantization: str | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    enable_sleep_mode: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    compilation: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    speculative: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    kv_transfer: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    additional_config: Mapping[str, Any] = field(factory=dict, converter=_mapping)
    profiler: Mapping[str, Any] = field(factory=dict, converter=_mapping)  # --profiler-config
    host: str | None = None  # --host (the P/D pair check compares the ports on one host)
    port: int | None = None  # --port

    @classmethod
    def from_parsed(cls, d: Mapping[str, Any]) -> ServeArgs:
        """From doctor_args' dict (vLLM's argparse names).

        Raises ConfigError when a JSON option is not a JSON object, as vLLM's config
        validation does when `vllm serve` builds its configuration.
        """
        for name in JSON_OBJECT_OPTIONS:
            value = d.get(name)
            if value is not None and not isinstance(value, Mapping):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(
                    f"{flag} must be a JSON object, got {value!r} "
                    f"({'not valid JSON' if isinstance(value, str) else type(value).__name__}).",
                    f"""pass a JSON object, e.g. {flag} '{{"key": value}}'""",
                )

        def get(name: str, default: Any) -> Any:
            value = d.get(name)
            return default if value is None else value

        return cls(
            model=str(d["model"]),
            tp=int(get("tensor_parallel_size", 1)),
            pp=int(get("pipeline_parallel_size", 1)),
            dp=int(get("data_parallel_size", 1)),
            pcp=int(get("prefill_context_parallel_size", 1)),
            dcp=int(get("decode_context_parallel_size", 1)),
            expert_parallel=bool(get("enable_expert_parallel", False)),
            enable_eplb=bool(get("enable_eplb", False)),
            eplb_config=get("eplb_config", {}),
            enable_lora=bool(get("enable_lora", False)),
            language_model_only=bool(get("language_model_only", False)),
            limit_mm_per_prompt=get("limit_mm_per_prompt", {}),
            max_loras=int(get("max_loras", 1) or 1),
            max_lora_rank=int(get("max_lora_rank", 16) or 16),
            nnodes=int(get("nnodes", 1)),
            distributed_executor_backend=_backend(d.get("distributed_executor_backend")),
            max_model_len=d.get("max_model_len"),
            gpu_memory_utilization=float(get("gpu_memory_utilization", 0.92)),
            kv_cache_memory_bytes=d.get("kv_cache_memory_bytes"),
            quantization=d.get("quantization"),
            dtype=str(get("dtype", "auto")),
            kv_cache_dtype=str(get("kv_cache_dtype", "auto")),
            block_size=d.get("block_size"),
            enable_prefix_caching=d.get("enable_prefix_caching"),
            enforce_eager=bool(get("enforce_eager", False)),
            enable_sleep_mode=bool(get("enable_sleep_mode", False)),
            max_num_batched_tokens=d.get("max_num_batched_tokens"),
            max_num_seqs=d.get("max_num_seqs"),
            compilation=get("compilation_config", {}),
            speculative=get("speculative_config", {}),
            kv_transfer=get("kv_transfer_config", {}),
            additional_config=get("additional_config", {}),
            profiler=get("profiler_config", {}),
            host=d.get("host"),
            port=d.get("port"),
        )
