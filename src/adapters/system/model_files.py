"""The ModelFiles port over a local directory; safetensors are read header-only."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ascend_core.errors import AscendError
from ports.model_files import ModelFiles, TensorHeader

# A safetensors header is a few hundred KB at most; refuse absurd lengths rather than read GBs.
MAX_HEADER_BYTES = 100 * 1024 * 1024


class ModelFilesError(AscendError):
    """A model file cannot be read or is not what its name says."""


class LocalModelFiles(ModelFiles):
    """A model directory on the local disk."""

    def __init__(self, directory: str | Path) -> None:
        self._dir = Path(directory)

    @property
    def location(self) -> str:
        return str(self._dir)

    def exists(self) -> bool:
        return self._dir.is_dir()

    def read_json(self, name: str) -> Mapping[str, Any] | None:
        path = self._dir / name
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelFilesError(
                f"{path} is not readable JSON: {exc}.",
                "Download the file again; it may be truncated or a git-lfs pointer.",
            ) from exc
        if not isinstance(data, Mapping):
            raise ModelFilesError(
                f"{path} holds a JSON {type(data).__name__}, not an object.",
                "Use the file the model was published with.",
            )
        return data

    def tensor_headers(self) -> tuple[TensorHeader, ...]:
        headers: list[TensorHeader] = []
        for path in sorted(self._dir.glob("*.safetensors")):
            headers.extend(read_safetensors_header(path))
        return tuple(headers)


def read_safetensors_header(path: Path) -> tuple[TensorHeader, ...]:
    """The tensors a safetensors file holds: 8-byte little-endian length, then JSON."""
    try:
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) != 8:
                raise _bad(path, "shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            size = path.stat().st_size
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise _bad(path, f"declares a {length}-byte header in a {size}-byte file")
            raw = f.read(length)
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc})") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"has a header that is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise _bad(path, "has a header that is not a JSON object")
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            tensors.append(
                TensorHeader(name, str(info["dtype"]), tuple(int(d) for d in info["shape"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(path, f"describes tensor {name!r} without a dtype and shape") from exc
    return tuple(tensors)


def _bad(path: Path, problem: str) -> ModelFilesError:
    return ModelFilesError(
        f"{path} is not a valid safetensors file: it {problem}.",
        "Download the file again; it may be truncated or a git-lfs pointer.",
    )
