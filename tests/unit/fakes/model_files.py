"""FakeModelFiles: a model directory held in memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ports.model_files import ModelFiles, TensorHeader


class FakeModelFiles(ModelFiles):
    """Returns the JSON documents and tensor headers it was given; records what was read.

    A document may be any JSON value (not only an object), to test how callers cope
    with malformed files.
    """

    def __init__(
        self,
        files: Mapping[str, Any] | None = None,
        headers: tuple[TensorHeader, ...] = (),
        location: str = "/models/fake",
        exists: bool = True,
    ) -> None:
        self._exists = exists
        self._files = dict(files or {})
        self._headers = headers
        self._location = location
        self.reads: list[str] = []

    @property
    def location(self) -> str:
        return self._location

    def exists(self) -> bool:
        return self._exists

    def read_json(self, name: str) -> Any:
        self.reads.append(name)
        return self._files.get(name)

    def tensor_headers(self) -> tuple[TensorHeader, ...]:
        return self._headers
