"""Stopping an in-process vLLM engine deterministically (tests run several per process)."""

from __future__ import annotations


def shut_down(llm) -> None:  # type: ignore[no-untyped-def]
    """Stop an in-process engine now rather than whenever it is garbage-collected.

    Its shutdown destroys vLLM's process groups; run late (at GC, while a later LLM is
    alive) it would destroy that engine's groups instead.
    """
    llm.llm_engine.engine_core.shutdown()

