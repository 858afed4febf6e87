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


# An EAGLE-3 head for the 70B: one layer of the target's attention shape.
EAGLE3_CONFIG: dict[str, Any] = {
    "architectures": ["Eagle3LlamaForCausalLM"], "hidden_size": 8192,
    "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 128256, "draft_vocab_size": 32000,
}


def _plan_with_draft(draft_config: dict[str, Any], **spec: Any) -> Report:
    args = ServeArgs.from_parsed(
        {"model": "/m/llama", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.9,
         "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3,
                                "model": "/m/eagle3", **spec}}
    )
    files = FakeModelFiles({"config.json": dict(LLAMA_70B_CONFIG)}, llama_70b_headers(),
                           "/m/llama")
    draft = FakeModelFiles({"config.json": draft_config}, (), "/m/eagle3")
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    return plan_report(args, files, FakeEnvironment({}), upstream, A2, draft_files=draft)


def test_the_draft_models_layers_count_in_the_kv_budget() -> None:
    memory = _plan_with_draft(EAGLE3_CONFIG).data["memory"]
    # One draft layer of the target's shape adds one target layer's share.
    assert memory["kv_bytes_per_token"] == KV_PER_TOKEN + KV_PER_TOKEN // 80


def _plan_failures(report: Report) -> list[str]:
    section = next(s for s in report.sections if s.title == "config plan")
    return [i.detail for i in section.items if i.status is CheckStatus.FAIL]


def test_a_draft_that_does_not_fit_the_target_fails_the_plan_with_the_reason() -> None:
    assert _plan_failures(_plan_with_draft(EAGLE3_CONFIG)) == []
    bad_vocab = _plan_failures(_plan_with_draft({**EAGLE3_CONFIG, "vocab_size": 32000}))
    assert any("vocabulary of 32000" in d for d in bad_vocab), bad_vocab
    bad_tp = _plan_failures(_plan_with_draft(EAGLE3_CONFIG, draft_tensor_parallel_size=1))
    assert any("draft_tensor_parallel_size=1" in d for d in bad_tp), bad_tp
    bad_heads = _plan_failures(_plan_with_draft({**EAGLE3_CONFIG, "num_attention_heads": 6,
                                                 "num_key_value_heads": 6}))
    assert any("do not split over tp=4" in d for d in bad_heads), bad_heads


SUFFIX_TREES = "arctic_inference.suffix_decoding:SuffixDecodingCache"


def _plan_suffix(upstream: FakeUpstream) -> Report:
    args = ServeArgs.from_parsed(
        {"model": "/m/llama", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.9,
         "speculative_config": {"method": "suffix", "num_speculative_tokens": 3}}
    )
    files = FakeModelFiles({"config.json": dict(LLAMA_70B_CONFIG)}, llama_70b_headers(),
                           "/m/llama")
    return plan_report(args, files, FakeEnvironment({}), upstream, A2)


def test_suffix_fails_the_plan_naming_the_install_where_its_package_does_not_import() -> None:
    versions = {"vllm": "0.33.0", "torch": "2.13.0"}
    absent = FakeUpstream(versions)
    failures = _plan_failures(_plan_suffix(absent))
    assert absent.asked.count(SUFFIX_TREES) == 1  # asked as serving asks it
    assert any("arctic_inference.suffix_decoding" in d for d in failures), failures
    assert _plan_failures(_plan_suffix(FakeUpstream(versions, [SUFFIX_TREES]))) == []
