"""`vllm serve` arguments parsed by vLLM's own parser, returned as plain data for the doctor.

The doctor may not import vLLM (import-linter), so it loads this module by name and
receives only JSON-like values: no vLLM type crosses.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ascend_core.errors import AscendError


class ServeArgsError(AscendError):
    """The arguments after `--` are not ones `vllm serve` accepts."""


# The fields the doctor plans with, in vLLM's argparse names.
FIELDS = (
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "prefill_context_parallel_size",
    "decode_context_parallel_size",
    "enable_expert_parallel",
    "enable_eplb",
    "eplb_config",
    "enable_lora",
    "language_model_only",
    "limit_mm_per_prompt",
    "nnodes",
    "distributed_executor_backend",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "quantization",
    "dtype",
    "kv_cache_dtype",
    "block_size",
    "enable_prefix_caching",
    "enforce_eager",
    "enable_sleep_mode",
    "max_num_batched_tokens",
    "max_num_seqs",
    "trust_remote_code",
    "additional_config",
    "compilation_config",
    "speculative_config",
    "kv_transfer_config",
    "profiler_config",
    "host",
    "port",
)


def parse_serve_args(argv: Sequence[str]) -> dict[str, Any]:
    """The `vllm serve` options the doctor needs, parsed exactly as `vllm serve` would.

    Raises ServeArgsError when vLLM's parser rejects the arguments (its message is on
    stderr). vLLM's log lines go to stderr so stdout stays the doctor's (e.g. --json).
    """
    with contextlib.redirect_stdout(sys.stderr):
        parser = _serve_parser()
        try:
            args = parser.parse_args(list(argv))
        except SystemExit as exc:
            raise ServeArgsError(
                f"vllm serve does not accept the arguments {' '.join(argv)!r}.",
                "fix the arguments as the message above says; `vllm serve --help` lists them",
            ) from exc
    # `vllm serve MODEL` puts the positional into model_tag; serve copies it to model.
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    return {name: _plain(getattr(args, name, None)) for name in FIELDS}


def _serve_parser() -> Any:
    with _some_platform():
        from vllm.entrypoints.common.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


@contextlib.contextmanager
def _some_platform() -> Iterator[None]:
    """Building the parser computes config defaults that ask vLLM's current platform for a
    device type. The doctor runs where no NPU may be (so the plugin declines): there,
    vLLM's CPU platform supplies the defaults. Only argument defaults depend on it."""
    import vllm  # noqa: F401  (loads the plugins first, in vLLM's order)
    from vllm import platforms

    if platforms.resolve_current_platform_cls_qualname().endswith("UnspecifiedPlatform"):
        previous = os.environ.get("VLLM_TARGET_DEVICE")
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
        try:
            _ = platforms.current_platform  # resolved once, now as the CPU platform
        finally:
            if previous is None:
                os.environ.pop("VLLM_TARGET_DEVICE", None)
            else:
                os.environ["VLLM_TARGET_DEVICE"] = previous
    yield


def _plain(value: Any) -> Any:
    """vLLM values as JSON-like data: enums by name, dataclasses and configs as dicts."""
    if isinstance(value, enum.Enum):  # before int: CompilationMode is an IntEnum
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: _plain(getattr(value, name, None)) for name in fields}
    return str(value)
