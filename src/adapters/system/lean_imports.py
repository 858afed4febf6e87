"""Import a library without the optional integrations it would import when they are installed.

dependency_injector imports fastapi, starlette, werkzeug and fast_depends (for its
wiring markers), pydantic_settings and yaml (for Configuration loaders) whenever they
are installed, and a vLLM environment has most of them: they were about 85% of a cold
`register()` (`-X importtime`, docs/benchmarks.md "Round 5"), which every process that
loads vLLM's platform plugins pays, also those that import nothing else of vLLM's
serving stack (vLLM's model-inspection subprocess, `vllm --version`). A serving process
imports fastapi and yaml later anyway; pydantic_settings never. The plugin uses none of
those integrations.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

# What dependency_injector imports only to integrate with, never needs (checked against
# dependency_injector 4.49: its wiring, providers and containers modules try each).
DEPENDENCY_INJECTOR_EXTRAS = (
    "fastapi", "starlette", "werkzeug", "fast_depends", "pydantic_settings", "yaml",
)


@contextmanager
def without_modules(names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, `import name` of each top-level module not yet imported raises
    ImportError (a `None` entry in sys.modules, the documented way to block an import);
    afterwards those entries are gone again, so later imports find the real modules.
    Modules already imported are left alone."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
