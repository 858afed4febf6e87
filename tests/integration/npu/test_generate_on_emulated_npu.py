"""LLM.generate with NpuOps on the emulated torch_npu gives the host device's token ids.

bf16 (the NPU attention op takes no float32 query) and block size 128 (its paged
prefill needs a multiple of 128). Prompts longer than max_num_batched_tokens run as
chunked prefill; the second pass over the same prompts hits the prefix cache.

The K and V caches reach the NPU attention op as they are allocated: it refuses
non-contiguous caches, so this also checks the backend's KV layout needs no copy.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import pytest

from adapters.container import container
from adapters.npu.ops import NpuOps
from support.torch_npu_emulator import make_torch_npu

LENGTHS = (5, 150, 40, 200, 1, 131)
MAX_NEW = 8


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


def _generate_twice(model: str) -> tuple[list[list[int]], list[list[int]]]:
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in _prompts()]
    try:
        first = [list(o.outputs[0].token_ids) for o in llm.generate(batch, params, use_tqdm=False)]
        again = [list(o.outputs[0].token_ids) for o in llm.generate(batch, params, use_tqdm=False)]
    finally:
        del llm
    return first, again


@contextlib.contextmanager
def _with_ops(ops: object) -> Iterator[None]:
    with container().ops.override(ops):
        yield


@pytest.fixture(scope="module")
def host_ids(tiny_llama: str) -> tuple[list[list[int]], list[list[int]]]:
    return _generate_twice(tiny_llama)


def test_generate_through_npu_ops_matches_host(
    tiny_llama: str, host_ids
) -> None:
    torch_npu = make_torch_npu()
    with _with_ops(NpuOps(torch_npu)):
        first, again = _generate_twice(tiny_llama)
    assert first == host_ids[0]
    assert again == host_ids[1] == first
    called = {name for name, _, _ in torch_npu.calls}
    assert called == {
        "npu_rms_norm",
        "npu_add_rms_norm",
        "npu_swiglu",
        "npu_rotary_mul",
        "npu_scatter_nd_update_",
        "npu_fused_infer_attention_score",
    }
    modes = {b["sparse_mode"] for b in torch_npu.calls_of("npu_fused_infer_attention_score")}
    assert modes == {0, 3}  # decode batches and (chunked) prefill batches both ran
