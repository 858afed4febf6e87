"""Hugging Face transformers as the oracle: greedy tokens and logprobs of a local model dir.

Each prompt runs alone (batch of one, no padding), in float32 by default, so the
answer does not depend on batching; vLLM runs are compared against these token ids.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO_ROOT / "models"

Prompt = str | Sequence[int]


@functools.cache
def make_models_module() -> ModuleType:
    """scripts/make_models.py as a module (scripts/ is not a package)."""
    path = REPO_ROOT / "scripts" / "make_models.py"
    spec = importlib.util.spec_from_file_location("make_models", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_model(
    out_dir: str | os.PathLike[str],
    style: str = "llama",
    size: str = "tiny",
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """scripts/make_models.make_model: build the model dir unless it is already there."""
    result: Path = make_models_module().make_model(out_dir, style, size, seed, dtype)
    return result


def local_model(style: str = "llama", size: str = "tiny") -> Path:
    """The shared default model <repo>/models/<size>-<style> (seed 0, float32), built once."""
    return make_model(MODELS_DIR / f"{size}-{style}", style, size)


@functools.cache
def _load(model_dir: str, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    model.eval()
    return model, tokenizer


def load(model_dir: str | os.PathLike[str], dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """(model, tokenizer), cached per directory and dtype. Do not modify the model."""
    return _load(str(Path(model_dir).resolve()), dtype)


def prompt_ids(model_dir: str | os.PathLike[str], prompt: Prompt) -> list[int]:
    """Token ids as vLLM makes them by default: the tokenizer with its special tokens."""
    if not isinstance(prompt, str):
        return list(prompt)
    _, tokenizer = load(model_dir)
    ids: list[int] = tokenizer(prompt).input_ids
    return ids


@attrs.frozen
class Generation:
    """One prompt's greedy continuation: new token ids, each one's logprob, and the top-k."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[int, float]]


def greedy_generate(
    model_dir: str | os.PathLike[str],
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    dtype: torch.dtype = torch.float32,
    top_k: int = 5,
    ignore_eos: bool = False,
) -> list[Generation]:
    """HF `generate(do_sample=False)` for each prompt on its own.

    Logprobs are log_softmax of the raw float32 logits, as vLLM reports them. Cached per
    directory and arguments, as load() caches the model (a module's engines, compiled and
    eager, ask for the same reference); each call gets its own copy.
    """
    key = tuple(p if isinstance(p, str) else tuple(p) for p in prompts)
    return copy.deepcopy(_greedy_generate(str(Path(model_dir).resolve()), key, max_new_tokens,
                                          dtype, top_k, ignore_eos))  # fmt: skip


@functools.cache
def _greedy_generate(
    model_dir: str,
    prompts: tuple[Prompt, ...],
    max_new_tokens: int,
    dtype: torch.dtype,
    top_k: int,
    ignore_eos: bool,
) -> list[Generation]:
    model, _ = load(model_dir, dtype)
    results = []
    for prompt in prompts:
        ids = prompt_ids(model_dir, prompt)
        config = copy.deepcopy(model.generation_config)
        config.max_new_tokens = max_new_tokens
        config.do_sample = False
        config.output_logits = True
        config.return_dict_in_generate = True
        if ignore_eos:
            # As vLLM's ignore_eos: EOS may be chosen, it just does not stop the run.
            config.eos_token_id = None
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                generation_config=config,
            )
        new = out.sequences[0, len(ids) :].tolist()
        logprobs, tops = [], []
        for token, step_logits in zip(new, out.logits, strict=False):
            lp = torch.log_softmax(step_logits[0].float(), dim=-1)
            logprobs.append(float(lp[token]))
            values, indices = lp.topk(top_k)
            tops.append(dict(zip(indices.tolist(), values.tolist(), strict=True)))
        results.append(Generation(ids, new, logprobs, tops))
    return results


def greedy_token_ids(
    model_dir: str | os.PathLike[str],
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    dtype: torch.dtype = torch.float32,
    ignore_eos: bool = False,
) -> list[list[int]]:
    """Just the new token ids of greedy_generate."""
    generations = greedy_generate(model_dir, prompts, max_new_tokens, dtype, ignore_eos=ignore_eos)
    return [g.token_ids for g in generations]


def next_token_logprobs(
    model_dir: str | os.PathLike[str], prompt: Prompt, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[vocab] float32 log-probabilities of the token after the prompt."""
    return prompt_logprobs_full(model_dir, prompt, dtype)[-1]


def prompt_logprobs_full(
    model_dir: str | os.PathLike[str], prompt: Prompt, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[len(prompt), vocab] float32 log-probabilities after each prompt prefix."""
    model, _ = load(model_dir, dtype)
    ids = prompt_ids(model_dir, prompt)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


def prompt_logprobs(
    model_dir: str | os.PathLike[str], prompt: Prompt, dtype: torch.dtype = torch.float32
) -> list[float | None]:
    """Each prompt token's logprob given the tokens before it (None for the first), as
    vLLM's prompt_logprobs reports the chosen tokens."""
    ids = prompt_ids(model_dir, prompt)
    full = prompt_logprobs_full(model_dir, ids, dtype)
    return [None] + [float(full[i - 1, tok]) for i, tok in enumerate(ids) if i > 0]
