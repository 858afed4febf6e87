"""vLLM 0.33's capture sizes (VllmConfig._set_cudagraph_sizes), as the doctor computes them."""

from __future__ import annotations

from ascend_core.plan.capture_sizes import (
    default_capture_sizes,
    full_decode_sizes,
    given_capture_sizes,
)


def test_serve_on_a_small_device_with_32_sequences() -> None:
    # vllm serve --max-num-seqs 32 on a device under 70 GiB (2048 batched tokens): the
    # sizes the emulated-NPU server logs as captured (tests/e2e/test_serve_emulated_npu.py).
    assert default_capture_sizes(32, 2048) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)


def test_the_default_256_sequences_reach_the_512_ceiling_in_steps_of_16() -> None:
    sizes = default_capture_sizes(256, 8192)
    assert sizes is not None
    assert sizes[:4] == (1, 2, 4, 8) and sizes[-1] == 512
    assert sizes[sizes.index(248) :][:4] == (248, 256, 272, 288)
    assert len(sizes) == 3 + 31 + 17


def test_few_batched_tokens_cap_the_sizes_and_are_captured_themselves() -> None:
    # min(2 x 32, 512, 20) = 20: 1, 2, 4, 8, 16 and the token budget itself.
    assert default_capture_sizes(32, 20) == (1, 2, 4, 8, 16, 20)
    # An odd max_num_seqs within the ceiling is added (the widest uniform decode batch).
    assert default_capture_sizes(5, 2048) == (1, 2, 4, 5, 8)


def test_speculative_decoding_adds_whole_verify_batches_of_one_plus_k() -> None:
    # The spec engines of the emulated-NPU tests: 8 requests of 1 + 3 tokens, 64 a step.
    assert default_capture_sizes(8, 64, decode_query_len=4) == (
        1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64
    )
    # At vLLM's defaults: the ceiling grows to 512 and the request-count grid times 3
    # (3, 6, 12, 24, ... 504) joins the token grid.
    sizes = default_capture_sizes(256, 8192, decode_query_len=3)
    assert sizes[-1] == 512
    assert {n * 3 for n in (1, 2, 4, *range(8, 171, 8))} <= set(sizes)
    assert set(default_capture_sizes(256, 8192)) <= set(sizes)


def test_full_decode_graphs_round_the_sizes_to_whole_verify_batches() -> None:
    assert full_decode_sizes((1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64), 4) == (
        4, 8, 16, 24, 32, 40, 48, 56, 64
    )
    assert full_decode_sizes((1, 2, 4, 8), 3) == (3, 6)  # 9 would pass the largest, 8
    assert full_decode_sizes((1, 2, 4, 8), 1) == (1, 2, 4, 8)


def test_given_sizes_are_deduplicated_sorted_and_kept_within_the_token_budget() -> None:
    assert given_capture_sizes([8, 1, 4, 8, 4096], 2048) == (1, 4, 8)
