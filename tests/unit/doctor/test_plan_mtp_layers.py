"""`plan` with --speculative-config: MTP's layers in the KV budget and in the plan's check,
from the model's config as serving reads it."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan_command import plan_report
from adapters.doctor.report import Report
from adapters.doctor.serve_args import ServeArgs
from ascend_core.preflight import CheckStatus
from unit.doctor.large_models import LLAMA_70B_CONFIG, llama_70b_headers
from unit.doctor.test_plan_kv_cache_bytes import A2, KV_PER_TOKEN
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.upstream import FakeUpstream


def _plan(config: dict[str, Any], spec: dict[str, Any]) -> Report:
    args = ServeArgs.from_parsed(
        {"model": "/m/llama", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.9,
         "speculative_config": spec}
    )
    files = FakeModelFiles({"config.json": config}, llama_70b_headers(), "/m/llama")
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    return plan_report(args, files, FakeEnvironment({}), upstream, A2)


def test_mtp_layers_count_in_the_kv_budget() -> None:
    config = {**LLAMA_70B_CONFIG, "num_nextn_predict_layers": 2}
    memory = _plan(config, {"method": "ngram", "num_speculative_tokens": 2}).data["memory"]
    assert memory["kv_bytes_per_token"] == KV_PER_TOKEN  # ngram drafts without layers
    memory = _plan(config, {"method": "mtp", "num_speculative_tokens": 2}).data["memory"]
    # 80 layers give KV_PER_TOKEN; the two MTP layers add their share.
    assert memory["kv_bytes_per_token"] == KV_PER_TOKEN + KV_PER_TOKEN * 2 // 80
    assert "the draft's" in memory["kv_formula"]


def test_mtp_without_mtp_layers_fails_the_plan_with_the_reason() -> None:
    report = _plan(dict(LLAMA_70B_CONFIG), {"method": "mtp", "num_speculative_tokens": 1})
    section = next(s for s in report.sections if s.title == "config plan")
    failed = [i for i in section.items if i.status is CheckStatus.FAIL]
    assert any("num_nextn_predict_layers" in i.detail for i in failed), section.items
