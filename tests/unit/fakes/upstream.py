"""FakeUpstream: installed versions and vLLM symbols as plain data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ports.upstream import Upstream


class FakeUpstream(Upstream):
    """Knows the versions and symbols it was given; records every symbol asked about."""

    def __init__(
        self,
        versions: Mapping[str, str] | None = None,
        symbols: Iterable[str] = (),
        cann: str | None = None,
    ) -> None:
        self._versions = dict(versions or {})
        self._symbols = frozenset(symbols)
        self._cann = cann
        self.asked: list[str] = []

    def version(self, package: str) -> str | None:
        return self._versions.get(package)

    def has_symbol(self, dotted: str) -> bool:
        self.asked.append(dotted)
        return dotted in self._symbols

    def cann_version(self) -> str | None:
        return self._cann
