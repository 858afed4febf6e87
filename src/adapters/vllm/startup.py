"""How the plugin's own errors stop vLLM's start: the message alone, and a non-zero exit.

A typed error (ascend_core.errors.AscendError) raised at startup, left to vLLM, ends as
a 45-line traceback through vLLM, our adapter and the core, with the message at its
end. Raised as SystemExit instead, Python prints only the message and exits with 1,
and vLLM's `except Exception` handlers do not catch it on the way.

In-process users of `vllm.LLM(...)` get a StartupError: a SystemExit, so `except
Exception` does not catch it; catch `StartupError` (or SystemExit) and read `.error`
(also its `__cause__`) for the typed error with its `what` and `hint`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ascend_core.errors import AscendError

PREFIX = "vllm-plugin-ascend: "


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
        backend = getattr(parallel_config, "distributed_executor_backend", "uni")
        if backend != "uni":
            raise
        raise StartupError(error) from error
