"""`ascend-doctor pair`: a prefill and a decode `vllm serve` checked together, through the
doctor's ports (fake model files, a stand-in for vLLM's parser)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dependency_injector import providers

from adapters.container import Container
from adapters.doctor.cli import main
from unit.doctor.large_models import (
    DEEPSEEK_V3_CONFIG,
    LLAMA_70B_CONFIG,
    deepseek_v3_headers,
    llama_70b_headers,
)
from unit.doctor.test_cli import wiring
from unit.fakes.model_files import FakeModelFiles

SIZES = {"prefill": {"dp_size": 1, "tp_size": 4}, "decode": {"dp_size": 1, "tp_size": 4}}


def parse(argv: Sequence[str]) -> Mapping[str, Any]:
    """`<model> <port> <kv_role> [block_size]`, as doctor_args would return them."""
    model, port, role, *block = argv
    return {
        "model": model,
        "port": int(port),
        "tensor_parallel_size": 4,
        "gpu_memory_utilization": 0.9,
        "block_size": int(block[0]) if block else None,
        "kv_transfer_config": {
            "kv_connector": "MooncakeConnectorV1",
            "kv_role": role,
            "kv_connector_extra_config": SIZES,
        },
    }


def doctor() -> Container:
    files = {
        "/m/llama": FakeModelFiles(
            {"config.json": LLAMA_70B_CONFIG}, llama_70b_headers(), "/m/llama"
        ),
        "/m/dsv3": FakeModelFiles(
            {"config.json": DEEPSEEK_V3_CONFIG}, deepseek_v3_headers(), "/m/dsv3"
        ),
    }
    c = wiring(env={"VLLM_ASCEND_DEVICE": "cpu"}, files=files)
    c.serve_args_parser.override(providers.Object(parse))
    return c


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, doctor(), out)
    return code, out.getvalue()


def test_an_mla_pair_plans_and_counts_the_latent_and_rope_planes_on_the_wire() -> None:
    prefill, decode = ["/m/dsv3", "8101", "kv_producer"], ["/m/dsv3", "8102", "kv_consumer"]
    code, out = run(["pair", "--json", "--", *prefill, "--", *decode])
    report = json.loads(out)
    items = [i for s in report["sections"] for i in s["items"]]
    # No refusal of MLA with P/D in either side's plan.
    assert not [i for i in items if i["status"] == "fail" and "MLA" in i["detail"]], items
    by_name = {i["name"]: i for i in items}
    assert by_name["model"]["status"] == "pass" and "MLA latent" in by_name["model"]["detail"]
    # Per token each layer sends its latent row and its rope row (kv_lora_rank 512 +
    # qk_rope_head_dim 64, bf16) from every TP rank: 61 x 576 x 2 B, what the transfer
    # regions of adapters/vllm/kv_transfer/layout.py move per token (tests/integration/vllm/
    # test_mla_kv_transfer.py ties the two).
    assert by_name["KV bytes per token"]["detail"].startswith("70272 B per token per device")
    assert code in (0, 1)


# A prefill and a decode side of Llama that agree (JSON report).
MATCHING_PAIR = [
    "pair", "--json", "--", "/m/llama", "8101", "kv_producer", "--", "/m/llama", "8102",
    "kv_consumer",
]  # fmt: skip


def test_a_matching_pair_passes_and_says_what_goes_over_the_wire() -> None:
    code, out = run(MATCHING_PAIR)
    report = json.loads(out)
    items = {i["name"]: i for s in report["sections"] for i in s["items"]}
    assert items["transport"]["detail"] == "prefill tcp, decode tcp"
    assert items["roles"]["status"] == "pass" and items["block size"]["status"] == "pass"
    # Llama-70B at tp=4: 80 layers x 2 KV heads/device x 128 x 2 (K,V) x 2 B (bfloat16)
    assert items["KV bytes per token"]["detail"].startswith("81920 B per token per device")
    assert "tcp" in items["prefill does"]["detail"] and code in (0, 1)


def test_a_pair_that_disagrees_fails_with_the_fix() -> None:
    code, out = run(
        [
            "pair",
            "--",
            "/m/llama",
            "8101",
            "kv_consumer",
            "16",
            "--",
            "/m/llama",
            "8101",
            "kv_consumer",
            "128",
        ]
    )
    assert code == 2
    assert "kv_producer, the decode kv_consumer" in out  # the roles' fix
    assert "prefill 16, decode 128" in out
    assert "both serve HTTP on port 8101" in out


def test_pair_without_two_argument_lists_says_how() -> None:
    err = io.StringIO()
    import contextlib

    with contextlib.redirect_stderr(err):
        code = main(["pair", "--", "/m/llama", "8101", "kv_producer"], doctor(), io.StringIO())
    assert code == 2 and "ascend-doctor pair -- <prefill args> -- <decode args>" in err.getvalue()


def test_the_pair_report_says_each_sides_fault_bound_and_the_policy() -> None:
    code, out = run(MATCHING_PAIR)
    items = {i["name"]: i for s in json.loads(out)["sections"] for i in s["items"]}
    assert "holds a finished request's KV blocks 480 s" in items["prefill does"]["detail"]
    decode = items["decode does"]["detail"]
    assert "unanswered for 540 s" in decode and "kv_load_failure_policy=fail" in decode
    assert items["fault bounds"]["status"] == "pass" and code in (0, 1)


def test_the_pair_report_prints_the_matching_router_line() -> None:
    """As tests/e2e/test_pd_disaggregation.py starts the router: the vLLM PD mode,
    --kv-connector mooncake, the prefill's bootstrap port (VLLM_MOONCAKE_BOOTSTRAP_PORT,
    vLLM's 8998 here) after its URL."""
    _, out = run(MATCHING_PAIR)
    report = json.loads(out)
    (router,) = [s for s in report["sections"] if s["title"] == "router"]
    (item,) = router["items"]
    assert item["detail"] == (
        "vllm-router --host 127.0.0.1 --port 8100 --vllm-pd-disaggregation --kv-connector "
        "mooncake --prefill http://127.0.0.1:8101 8998 --decode http://127.0.0.1:8102"
    )
    assert "computes every prompt itself" in item["fix"]
    _, text = run(MATCHING_PAIR[:1] + MATCHING_PAIR[2:])  # the text report says it too
    assert "--kv-connector mooncake --prefill http://127.0.0.1:8101 8998" in text
