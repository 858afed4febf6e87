"""LoRA test material: two peft adapters for the tiny Llama, and transformers + peft as
the oracle for their greedy ids.

peft is a dev extra (pyproject.toml); without it the callers skip, saying so.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from support.hf_reference import local_model, make_models_module

ADAPTER_SEEDS = {"lora-a": 1, "lora-b": 2}


def require_peft() -> None:
    if importlib.util.find_spec("peft") is None:
        pytest.skip("peft is not installed (a dev extra: pip install -e '.[dev]')")


def lora_model() -> tuple[Path, dict[str, Path]]:
    """The tiny Llama and its two adapters (name -> directory), made once in models/."""
    require_peft()
    base = local_model("llama", "tiny")
    make = make_models_module().make_lora_adapter
    adapters = {
        name: make(base.parent / f"tiny-llama-{name}", base, seed)
        for name, seed in ADAPTER_SEEDS.items()
    }
    return base, adapters


def peft_greedy_ids(
    base: Path,
    adapter: Path | None,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: torch.dtype = torch.float32,
) -> list[list[int]]:
    """transformers (+ peft's adapter when given) greedy ids, one prompt at a time, EOS
    ignored (as vLLM's ignore_eos); cached per directory and arguments (a module's
    compiled and eager engines ask for the same), each call getting its own copy."""
    key = tuple(tuple(p) for p in prompts)
    ids = _peft_greedy_ids(str(base), None if adapter is None else str(adapter), key,
                           max_new_tokens, dtype)  # fmt: skip
    return [list(i) for i in ids]


@functools.cache
def _peft_greedy_ids(
    base: str,
    adapter: str | None,
    prompts: tuple[tuple[int, ...], ...],
    max_new_tokens: int,
    dtype: torch.dtype,
) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    out = []
    for ids in prompts:
        with torch.no_grad():
            seq = model.generate(
                input_ids=torch.tensor([list(ids)]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        out.append(seq[0, len(ids) :].tolist())
    return out
