"""LocalModelFiles: JSON files and safetensors headers, never the weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from adapters.system import LocalModelFiles, ModelFilesError
from ports.model_files import TensorHeader


def write_safetensors(path: Path, tensors: dict[str, object], payload: bytes = b"") -> None:
    header = json.dumps(tensors).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)


def test_read_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    files = LocalModelFiles(tmp_path)
    assert files.read_json("config.json") == {"architectures": ["LlamaForCausalLM"]}
    assert files.read_json("quant_model_description.json") is None
    assert files.location == str(tmp_path)


@pytest.mark.parametrize(
    ("content", "fragment"), [("{not json", "not readable JSON"), ("[1]", "JSON list")]
)
def test_bad_json_is_an_error_naming_the_file(tmp_path: Path, content: str, fragment: str) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(ModelFilesError) as info:
        LocalModelFiles(tmp_path).read_json("config.json")
    assert "config.json" in info.value.what and fragment in info.value.what


def test_tensor_headers_of_every_file_in_name_order(tmp_path: Path) -> None:
    write_safetensors(
        tmp_path / "model-00002.safetensors",
        {"b": {"dtype": "I8", "shape": [4, 2], "data_offsets": [0, 8]}},
        b"\x00" * 8,
    )
    write_safetensors(
        tmp_path / "model-00001.safetensors",
        {
            "__metadata__": {"format": "pt"},
            "a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
        },
        b"\x00" * 4,
    )
    (tmp_path / "notes.txt").write_text("ignored")
    assert LocalModelFiles(tmp_path).tensor_headers() == (
        TensorHeader("a", "BF16", (2,)),
        TensorHeader("b", "I8", (4, 2)),
    )


def test_weights_are_not_read(tmp_path: Path) -> None:
    # A header followed by a huge sparse payload: reading it all would be slow and large.
    path = tmp_path / "big.safetensors"
    write_safetensors(path, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    with path.open("r+b") as f:
        f.truncate(8 * 1024**3)
    assert LocalModelFiles(tmp_path).tensor_headers() == (TensorHeader("w", "F32", (1,)),)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"\x01\x02", "shorter than the 8-byte"),
        (struct.pack("<Q", 10**6) + b"{}", "declares a 1000000-byte header"),
        (struct.pack("<Q", 4) + b"nope", "not JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (struct.pack("<Q", 10) + b'{"w": 1}  ', "without a dtype and shape"),
    ],
)
def test_malformed_safetensors_is_an_error_naming_the_file(
    tmp_path: Path, raw: bytes, fragment: str
) -> None:
    (tmp_path / "m.safetensors").write_bytes(raw)
    with pytest.raises(ModelFilesError) as info:
        LocalModelFiles(tmp_path).tensor_headers()
    assert "m.safetensors" in info.value.what and fragment in info.value.what


def test_no_safetensors(tmp_path: Path) -> None:
    assert LocalModelFiles(tmp_path).tensor_headers() == ()
