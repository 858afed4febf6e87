"""How the plugin's own errors stop vLLM's start: the message alone, and a non-zero exit.

A typed error (ascend_core.errors.AscendError) raised at startup, left to vLLM, ends as
a 45-line traceback through vLLM, our adapter and the core, with the message at its
end. Raised as SystemExit instead, Python prints only the message and exits with 1,
and vLLM's `except Exception` handlers do not catch it on the way.

In-process users of `vllm.LLM(...)` get a StartupError: a SystemExit, so `except
Exception` does not catch it; catch `StartupError` (or SystemExit) and read `.error`
(also its `__cause__`) for the typed error with its `what` and `hint`.

Some arguments fail inside vLLM before any hook of ours sees the config: a local model
path that does not exist (a minute of Hub retries, then a traceback) and
`--quantization ascend` on a model without a ModelSlim description (a pydantic
traceback). `refuse_before_start` checks those first, with the doctor's messages.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ascend_core.env_registry import unknown_variables
from ascend_core.errors import AscendError
from ascend_core.model_facts import text_config
from ascend_core.plan.speculative import (
    PROPOSER_PACKAGES,
    mtp_layers_error,
    proposer_package_error,
)
from ascend_core.preflight import missing_model_error, names_local_path
from ascend_core.quantization import QuantMethod, detect_quantization
from ports.environment import Environment
from ports.model_files import ModelFiles
from ports.upstream import Upstream

PREFIX = "vllm-plugin-ascend: "
_watching: list[Path] = []


class StartupError(SystemExit):
    """An AscendError that stops vLLM's start; its code is the message Python prints."""

    def __init__(self, error: AscendError) -> None:
        self.error = error
        super().__init__(f"{PREFIX}{error}")


@contextlib.contextmanager
def stop_on_our_errors(parallel_config: Any = None) -> Iterator[None]:
    """Turn an AscendError raised inside into a StartupError (chained to it).

    parallel_config: given in a worker. Only a worker that runs in the engine's own
    process (the "uni" executor, vLLM's choice for one device) may stop it so; a worker
    process of the multiprocessing executor answers vLLM's RPC, and exiting there
    would look to vLLM like a crashed worker, so the typed error goes back to vLLM.
    """
    try:
        yield
    except AscendError as error:
        if parallel_config is not None:
            _tell_watcher(str(error))
        backend = getattr(parallel_config, "distributed_executor_backend", "uni")
        if backend != "uni":
            raise
        raise StartupError(error) from error


def _note_path(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"vllm-plugin-ascend-{pid}.startup-error"


def watch_engine_errors() -> None:
    """In the process that builds the config (vllm serve's front end): repeat at exit the
    StartupError an engine process it started stopped with.

    The engine prints its message alone, but vLLM's front end then ends in its own
    "Engine core initialization failed. See root cause above" traceback, which puts
    that message out of sight. The engine leaves the message in a note named after
    this process (its parent), which exists only while this process watches; the exit
    hook prints it after the traceback of the error that ended this process
    (sys.last_value), and removes the note either way.
    """
    if _watching:
        return
    note = _note_path(os.getpid())
    try:
        note.unlink(missing_ok=True)  # left by an earlier process of the same pid
        os.close(os.open(note, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return
    _watching.append(note)
    atexit.register(_repeat_engine_error, note)


def _tell_watcher(message: str) -> None:
    """Leave the message for the nearest watching ancestor: the engine's parent for a
    worker in the engine process, its grandparent for a worker process of the
    multiprocessing executor (TP > 1), whose error vLLM reports as its own traceback."""
    for pid in _ancestors(os.getpid(), _WATCH_DEPTH):
        note = _note_path(pid)
        if note.exists():  # only a watching process created it
            with contextlib.suppress(OSError), note.open("a") as f:
                f.write(message + "\n")
            return


# front end -> engine core -> executor workers: two levels up is as far as vLLM starts.
_WATCH_DEPTH = 2


def _ancestors(pid: int, depth: int) -> Iterator[int]:
    """The parent, grandparent, ... of `pid`, up to `depth` of them (from /proc)."""
    for _ in range(depth):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        # Field 4 is the parent's pid; the name (field 2) is in parentheses and may
        # hold spaces, so split after its closing one.
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return
        yield pid


def _repeat_engine_error(note: Path) -> None:
    try:
        text = note.read_text().strip()
        note.unlink()
    except OSError:
        return
    # Each worker of a TP > 1 engine that stopped leaves its line: say each reason once.
    reasons = list(dict.fromkeys(line for line in text.splitlines() if line))
    if reasons and getattr(sys, "last_value", None) is not None:
        for reason in reasons:
            sys.stderr.write(f"{PREFIX}the engine process stopped at startup: {reason}\n")


# --quantization values whose config vLLM reads from the model files before any hook
# of ours runs; without them vLLM ends in a pydantic traceback.
_FROM_FILES = (QuantMethod.ASCEND.value, QuantMethod.COMPRESSED_TENSORS.value)


def check_before_start(
    model: str,
    quantization: str | None,
    files: ModelFiles,
    speculative_method: str | None = None,
    upstream: Upstream | None = None,
) -> None:
    """The checks vLLM would fail with a traceback, made first with the doctor's errors.

    files: the model directory's files (the ModelFiles port over `model`). Raises the
    core's MissingModelError for a local path with nothing there (a Hub id is left to
    vLLM), the core's QuantizationError for a --quantization the files cannot back, and
    its ConfigError for `mtp` on a model without MTP layers (vLLM's SpeculativeConfig
    divides by their count: a ZeroDivisionError) and for `suffix` without its package
    (asked of `upstream`; vLLM's own ImportError names an install that would build it
    against PyPI's CUDA torch).
    """
    package = PROPOSER_PACKAGES.get((speculative_method or "").strip().lower())
    if package is not None and upstream is not None:
        error = proposer_package_error(
            speculative_method or "", upstream.has_symbol(package.symbol)
        )
        if error is not None:
            raise error
    if not files.exists():
        if names_local_path(model):
            raise missing_model_error(model)
        return
    if quantization is not None and quantization.strip().lower() in _FROM_FILES:
        detect_quantization(files, quantization)
    if speculative_method:
        config = text_config(files.read_json("config.json") or {})
        architecture = str((config.get("architectures") or ["?"])[0])
        layers = int(config.get("num_nextn_predict_layers") or 0)
        error = mtp_layers_error(speculative_method, architecture, layers)
        if error is not None:
            raise error


def refuse_before_start(
    engine_args: Any, files_for: Any, upstream: Upstream | None = None
) -> None:
    """check_before_start on vLLM's EngineArgs, as a StartupError (the message alone).

    files_for: model name -> ModelFiles (the container's model_files). Anything but an
    EngineArgs with a string model (vLLM building a config without one) is left alone.
    """
    model = getattr(engine_args, "model", None)
    if not isinstance(model, str) or not model:
        return
    spec = getattr(engine_args, "speculative_config", None)
    method = spec.get("method") if isinstance(spec, dict) else getattr(spec, "method", None)
    with stop_on_our_errors():
        check_before_start(
            model,
            getattr(engine_args, "quantization", None),
            files_for(model),
            method if isinstance(method, str) else None,
            upstream,
        )


def engine_args_calling() -> Any:
    """The EngineArgs whose create_engine_config called the platform hook running now.

    vLLM calls Platform.pre_register_and_update() first thing in
    EngineArgs.create_engine_config, before it reads the model's config (where a
    missing local path retries the Hub), and passes no arguments: the caller's frame is
    the only way to them. None when the hook was called from elsewhere (the
    upstream-surface test guards the call site).
    """
    frame = sys._getframe(1)
    for _ in range(4):
        if frame is None:
            return None
        if frame.f_code.co_name == "create_engine_config":
            return frame.f_locals.get("self")
        frame = frame.f_back  # type: ignore[assignment]
    return None


def decline_reason(reason: str, env: Environment) -> str:
    """The plugin's reason for declining, with each VLLM_ASCEND_* variable it does not
    read (a misspelt VLLM_ASCEND_DEVICE=cpu is the usual cause), as `check` lists them."""
    unknown = [f"{u.what} Fix: {u.hint}" for u in unknown_variables(env)]
    return " ".join([reason, *unknown])
