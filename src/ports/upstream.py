"""What is installed upstream: package versions and the vLLM symbols the plugin leans on."""

from __future__ import annotations

import abc


class Upstream(abc.ABC):
    """Answers questions about installed packages without the core importing them."""

    @abc.abstractmethod
    def version(self, package: str) -> str | None:
        """Installed version of a distribution (`vllm`, `torch`, `torch-npu`), None if absent."""

    @abc.abstractmethod
    def has_symbol(self, dotted: str) -> bool:
        """Whether `module.path:Attr.sub` (or `module.path.Attr`) resolves in the installed code."""

    @abc.abstractmethod
    def cann_version(self) -> str | None:
        """Installed CANN toolkit version, None when no toolkit is found."""
