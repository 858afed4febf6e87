"""Stopping an in-process vLLM engine deterministically (tests run several per process)."""

from __future__ import annotations


def shut_down(llm) -> None:  # type: ignore[no-untyped-def]
    """Stop an in-process engine now rather than whenever it is garbage-collected.

    Its shutdown destroys vLLM's process groups; run late (at GC, while a later LLM is
    alive) it would destroy that engine's groups instead.
    """
    llm.llm_engine.engine_core.shutdown()



def clean_distributed_state() -> None:
    """Destroy vLLM's process groups if an engine left them (also one that failed half-way
    through its start, which no shutdown reaches), so the next engine initialises its own."""
    import sys

    import torch.distributed

    # Nothing to clean when no engine made a process group in this process; vLLM's
    # cleanup would then reach torch.accelerator, which raises with no accelerator
    # (the plugin's shutdown patch is applied only once an engine has started).
    if "vllm.distributed.parallel_state" in sys.modules and torch.distributed.is_initialized():
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
