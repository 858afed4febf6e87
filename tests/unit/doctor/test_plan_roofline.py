"""`ascend-doctor plan --chip CHIP`: the roofline section, in text and JSON, for the
reference's DeepSeek-V3 W8A8 deployment shape and a bf16 Llama; none without a chip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from adapters.doctor.plan_command import RooflineAsk, Target, plan_report
from adapters.doctor.render_json import render_json
from adapters.doctor.render_text import render_text
from adapters.doctor.report import Report
from adapters.doctor.serve_args import ServeArgs
from adapters.system.model_files import LocalModelFiles
from ascend_core.roofline import CHIPS, Resource, Setup, decode_row, model_shape
from ports.device import ChipFamily, DeviceKind
from ports.model_files import ModelFiles
from unit.doctor.large_models import (
    DEEPSEEK_V3_CONFIG,
    LLAMA_70B_CONFIG,
    deepseek_v3_description,
    deepseek_v3_headers,
    llama_70b_headers,
)
from unit.doctor.test_cli import run, wiring
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.upstream import FakeUpstream

GIB = 1 << 30
A3 = Target(DeviceKind.NPU, ChipFamily.A3, 64 * GIB, None, "test: chip given")
# The reference's nightly DeepSeek-R1 W8A8 deployment on an A3: DP2/TP8 + EP + MTP.
REFERENCE_SHAPE = {
    "model": "/m/dsv3", "tensor_parallel_size": 8, "data_parallel_size": 2,
    "enable_expert_parallel": True, "gpu_memory_utilization": 0.9,
    "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
}  # fmt: skip
DSV3_MTP = {**DEEPSEEK_V3_CONFIG, "num_nextn_predict_layers": 1}


def _deepseek(files: ModelFiles | None = None, **ask: Any) -> Report:
    files = files or FakeModelFiles(
        {"config.json": DSV3_MTP, "quant_model_description.json": deepseek_v3_description()},
        deepseek_v3_headers(),
        "/m/dsv3",
    )
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    args = ServeArgs.from_parsed(REFERENCE_SHAPE)
    return plan_report(args, files, FakeEnvironment({}), upstream, A3, roofline=RooflineAsk(**ask))


def test_deepseek_v3_w8a8_at_the_reference_shape_on_a3() -> None:
    report = _deepseek(context=4096)
    data = report.data["roofline"]
    assert data["weights"].startswith("W8A8_DYNAMIC: 1 B")
    assert data["setup"]["draft_tokens"] == 1 and data["setup"]["expert_parallel"]
    rows = data["decode"]
    assert [r["batch"] for r in rows] == [1, 8, 32, 64, 128, 256]
    # The doctor's numbers are the core's for the same setup: 1 B weights on the int8
    # cube, the MLA latent (70,272 B a token) and MTP's one draft, all accepted.
    setup = Setup(
        tp=8, dp=2, expert_parallel=True, weight_bytes=1, int8_compute=True,
        kv_bytes_per_token=70_272 + 70_272 // 61, context=4096, draft_tokens=1,
    )  # fmt: skip
    assert data["setup"] == attrs.asdict(setup)
    expected = decode_row(model_shape(DSV3_MTP), CHIPS[ChipFamily.A3], setup, 32)
    assert rows[2]["tokens_per_s"] == expected.tokens_per_s
    assert rows[2]["binds"] == expected.binds.value == Resource.HBM.value
    # More sequences never lower the bound, and the bound per step only grows.
    speeds = [r["tokens_per_s"] for r in rows]
    assert speeds == sorted(speeds)
    # The reference publishes 411 tok/s for this shape (its nightly gate): the bound sits
    # above it at every batch size the section shows.
    assert min(speeds) > 411
    assert data["prefill"]["binds"] in ("compute", "link")
    figures = data["chip"]["figures"]
    assert figures["hbm_bytes_per_s"]["value"] == 1.6e12
    assert "arXiv:2506.12708" in figures["cube_bf16_flops"]["source"]
    assert figures["cube_int8_ops"]["published"] is False


def test_text_shows_each_batch_and_what_binds_it() -> None:
    text = render_text(_deepseek())
    section = text[text.index("roofline") :]
    for batch in (1, 8, 32, 64, 128, 256):
        assert f"decode bs={batch} " in section
    assert "bound by HBM" in section
    assert "Ascend 910C die" in section and "2 of 7 figures assumed" in section
    assert "context 4096 tokens (default, at most 4096)" in section
    assert "MTP 1 draft(s) a step, all counted accepted" in section
    assert "a prediction, not a measurement" in section
    assert json.loads(render_json(_deepseek()))["data"]["roofline"]["decode"][0]["batch"] == 1


def test_a_config_only_model_directory_has_its_roofline(tmp_path: Path) -> None:
    """The bound needs config.json only: without safetensors the memory budget warns and
    is skipped, the roofline is still there (the quantization from its description)."""
    (tmp_path / "config.json").write_text(json.dumps(DSV3_MTP))
    (tmp_path / "quant_model_description.json").write_text(json.dumps(deepseek_v3_description()))
    report = _deepseek(LocalModelFiles(tmp_path))
    sections = {s.title: s.items for s in report.sections}
    assert sections["memory budget"][0].name == "weights"  # "no *.safetensors" warning
    assert report.data["roofline"]["weights"].startswith("W8A8_DYNAMIC")
    assert len(report.data["roofline"]["decode"]) == 6


def _llama() -> dict[str, FakeModelFiles]:
    return {
        "/m/llama": FakeModelFiles(
            {"config.json": LLAMA_70B_CONFIG}, llama_70b_headers(), "/m/llama"
        )
    }


def test_cli_chip_shows_the_roofline_and_no_chip_keeps_the_plan_as_it_was() -> None:
    serve = ["--", "/m/llama", "--tensor-parallel-size", "4"]
    code, text = run(["plan", "--chip", "A2", "--context", "2048", *serve], wiring(files=_llama()))
    assert code == 0
    assert "roofline" in text and "not quantized: 2 B a weight" in text
    assert "context 2048 tokens (--context)" in text
    assert "HCCS" in text  # the TP=4 all-reduces stay in one server
    code, text = run(["plan", *serve], wiring(files=_llama()))
    assert code == 0 and "\nroofline\n" not in text


def test_a_chip_without_figures_warns() -> None:
    target = attrs.evolve(A3, chip_family=ChipFamily.P310)
    files = FakeModelFiles({"config.json": LLAMA_70B_CONFIG}, llama_70b_headers(), "/m/l")
    args = ServeArgs.from_parsed({"model": "/m/l", "tensor_parallel_size": 4})
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    report = plan_report(args, files, FakeEnvironment({}), upstream, target, roofline=RooflineAsk())
    item = next(s for s in report.sections if s.title == "roofline").items[0]
    assert item.status.value == "warn" and "310P" in item.detail


def test_a_config_the_bound_cannot_count_warns_and_fails_nothing() -> None:
    config = {k: v for k, v in LLAMA_70B_CONFIG.items() if k != "vocab_size"}
    files = FakeModelFiles({"config.json": config}, llama_70b_headers(), "/m/l")
    args = ServeArgs.from_parsed({"model": "/m/l", "tensor_parallel_size": 4})
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    report = plan_report(args, files, FakeEnvironment({}), upstream, A3, roofline=RooflineAsk())
    (item,) = next(s for s in report.sections if s.title == "roofline").items
    assert item.status.value == "warn" and "vocab_size" in item.detail
