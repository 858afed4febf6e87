"""The doctor reads --limit-mm-per-prompt and --language-model-only as vLLM's
MultiModalConfig does: which input modalities (so which towers) `vllm serve` takes none of."""

from __future__ import annotations

import pytest

from adapters.doctor.plan.config import modalities_off, requested
from adapters.doctor.serve_args import ServeArgs
from ascend_core.errors import ConfigError


def _args(**parsed: object) -> ServeArgs:
    return ServeArgs.from_parsed({"model": "/m", **parsed})


def test_no_flag_turns_nothing_off() -> None:
    assert modalities_off(_args()) == frozenset()


def test_a_zero_count_in_either_format_turns_a_modality_off() -> None:
    args = _args(limit_mm_per_prompt={"video": 0, "image": {"count": 2, "width": 64},
                                      "audio": {"count": 0}})
    assert modalities_off(args) == {"video", "audio"}
    assert requested(args).mm_off == {"video", "audio"}


def test_language_model_only_turns_every_modality_off() -> None:
    args = _args(language_model_only=True, limit_mm_per_prompt={"image": 3})
    assert modalities_off(args) == {"image", "video", "audio"}


def test_a_limit_that_is_not_a_json_object_is_refused_as_vllm_refuses_it() -> None:
    with pytest.raises(ConfigError, match="--limit-mm-per-prompt must be a JSON object"):
        _args(limit_mm_per_prompt="image=0")
