"""Model files: the JSON a model directory holds, read without loading weights."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

from attrs import frozen


@frozen
class TensorHeader:
    """One tensor as a safetensors header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]


class ModelFiles(abc.ABC):
    """Reads the files of one model (a local directory or a downloaded snapshot)."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """Where the files are, for messages."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether the model's location exists at all (a directory, for local files)."""

    @abc.abstractmethod
    def read_json(self, name: str) -> Mapping[str, Any] | None:
        """The parsed JSON file `name`, or None when the model has no such file."""

    @abc.abstractmethod
    def tensor_headers(self) -> tuple[TensorHeader, ...]:
        """The tensors of every safetensors file, from their headers only."""
