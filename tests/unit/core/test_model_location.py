"""Which model names can only be local paths (refused at once when missing)."""

from __future__ import annotations

import pytest

from ascend_core.preflight import missing_model_error, names_local_path


@pytest.mark.parametrize(
    "name",
    [
        "/nonexistent/model-dir",
        "./tiny",
        "../models/tiny",
        "~/models/tiny",
        ".",
        "models/tiny-llama",  # hf.co/models is the Hub's own page: no namespace "models"
        "datasets/x",
        "a/b/c",  # more parts than a Hub id's namespace/name
    ],
)
def test_names_only_a_directory_can_be(name: str) -> None:
    assert names_local_path(name)


@pytest.mark.parametrize(
    "name", ["Qwen/Qwen3-0.6B", "gpt2", "org/name", "s3://bucket/models/x", "gs://b/m"]
)
def test_hub_ids_and_remote_stores_are_left_to_vllm(name: str) -> None:
    assert not names_local_path(name)


def test_the_error_names_the_path_and_both_ways_out() -> None:
    error = missing_model_error("./models/tiny")
    assert error.what.startswith("./models/tiny does not exist")
    assert "hf download" in error.hint and "<org>/<name>" in error.hint
