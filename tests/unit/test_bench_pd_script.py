"""scripts/bench_pd.py's arithmetic and parsing (the benchmark itself is not a test)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_pd.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_pd_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


METRICS = """\
# HELP vllm:mooncake_bytes_transferred Histogram of bytes transferred per Mooncake transfer.
# TYPE vllm:mooncake_bytes_transferred histogram
vllm:mooncake_bytes_transferred_bucket{engine="0",le="2048.0",model_name="m"} 0.0
vllm:mooncake_bytes_transferred_count{engine="0",model_name="m"} 3.0
vllm:mooncake_bytes_transferred_sum{engine="0",model_name="m"} 1.5e+07
vllm:mooncake_bytes_transferred_sum{engine="1",model_name="m"} 5e+06
vllm:mooncake_xfer_time_seconds_count{engine="0",model_name="m"} 3.0
vllm:mooncake_xfer_time_seconds_sum{engine="0",model_name="m"} 0.01
vllm:mooncake_xfer_time_seconds_sum_other 99
"""


def test_transfer_totals_sum_each_series_over_label_sets(bench: ModuleType) -> None:
    totals = bench.transfer_totals(METRICS)
    assert totals == {"bytes": 2e7, "seconds": 0.01, "transfers": 3.0}
    assert bench.gb_per_s(totals["bytes"], totals["seconds"]) == pytest.approx(2.0)
    assert bench.gb_per_s(1e9, 0.0) == 0.0


def test_received_lines_give_tokens_and_seconds(bench: ModuleType) -> None:
    log = (
        "INFO ... KV received: request cmpl-1-0, 412 prompt tokens' KV from prefill engine "
        "e1 at http://127.0.0.1:8998 in 0.153 s.\n"
        "WARNING ... KV load failed: request x, 9 prompt tokens' KV from prefill engine e1\n"
        "INFO ... KV received: request cmpl-2-0, 7 prompt tokens' KV from prefill engine "
        "e1 at http://127.0.0.1:8998 in 12.5 s.\n"
    )
    assert bench.received(log) == [(412, 0.153), (7, 12.5)]


def test_ttft_and_tpot_from_chunk_times(bench: ModuleType) -> None:
    # Sent at 10.0; 5 tokens in 4 chunks (one chunk carried two): first at 10.5, last 11.3.
    ttft, tpot = bench.ttft_tpot(10.0, [10.5, 10.7, 11.0, 11.3], 5)
    assert ttft == pytest.approx(0.5) and tpot == pytest.approx(0.8 / 4)
    assert bench.ttft_tpot(1.0, [1.25], 1) == (0.25, 0.0)
    with pytest.raises(ValueError, match="no token"):
        bench.ttft_tpot(1.0, [], 3)


def test_kv_bytes_per_token_of_a_gqa_config(bench: ModuleType) -> None:
    config = {
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "hidden_size": 768,
        "head_dim": 64,
    }
    assert bench.kv_bytes_per_token(config) == 2 * 12 * 4 * 64 * 4 == 24_576
    del config["head_dim"], config["num_key_value_heads"]
    assert bench.kv_bytes_per_token(config, dtype_bytes=2) == 2 * 12 * 12 * 64 * 2
    assert bench.summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
