"""`ascend-doctor check` and `plan` through their ports: fabricated hosts, fake model files,
and a stand-in for vLLM's argument parser (the real one is in the integration tests)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dependency_injector import providers

from adapters.container import Container
from adapters.doctor.cli import main
from ascend_core.preflight import HostFacts
from ports.device import DeviceKind, DeviceProbe, ProbeResult
from unit.doctor.large_models import (
    DEEPSEEK_V3_CONFIG,
    LLAMA_70B_CONFIG,
    deepseek_v3_description,
    deepseek_v3_headers,
    llama_70b_headers,
)
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.probe import FakeProbe
from unit.fakes.system_libraries import FakeSystemLibraries
from unit.fakes.upstream import FakeUpstream

GIB = 1 << 30
NO_NPU = ProbeResult(DeviceKind.NPU, False, "torch_npu is not installed", "pip install torch-npu")
_FLAGS = {
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", int),
    "--max-model-len": ("max_model_len", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--quantization": ("quantization", str),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
}


def fake_parse(argv: Sequence[str]) -> Mapping[str, Any]:
    """The few `vllm serve` flags these tests use, as doctor_args would return them."""
    parsed: dict[str, Any] = {"model": argv[0], "gpu_memory_utilization": 0.9}
    for flag, value in zip(argv[1::2], argv[2::2], strict=True):
        key, kind = _FLAGS[flag]
        parsed[key] = kind(value)
    return parsed


def wiring(
    env: Mapping[str, str] | None = None,
    versions: Mapping[str, str] | None = None,
    files: Mapping[str, FakeModelFiles] | None = None,
) -> Container:
    """The production container with every port the doctor touches overridden."""
    c = Container()
    c.environment.override(FakeEnvironment(env or {}))
    c.upstream.override(FakeUpstream(
        versions or {"vllm": "0.33.0", "torch": "2.13.0", "torchvision": "0.28.0"}
    ))
    c.npu_probe.override(FakeProbe(NO_NPU))
    c.host_facts.override(HostFacts("3.11.7", {}, 0, {"lo": ("127.0.0.1",)}))
    c.system_libraries.override(FakeSystemLibraries())
    c.serve_args_parser.override(fake_parse)
    c.model_files.override(providers.Callable((files or {}).__getitem__))
    return c


def run(argv: list[str], c: Container) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, c, out)
    return code, out.getvalue()


def test_check_on_a_host_without_npu_fails_and_says_why() -> None:
    code, text = run(["check"], wiring())
    assert code == 2
    assert "torch_npu is not installed" in text
    assert text.rstrip().endswith("(exit 2)")


def test_check_without_npu_names_the_host_device_once_as_the_fix() -> None:
    code, out = run(["check", "--json"], wiring())
    items = [i for s in json.loads(out)["sections"] for i in s["items"]]
    naming = [i for i in items if "VLLM_ASCEND_DEVICE=cpu" in f"{i['detail']} {i['fix']}"]
    assert code == 2
    assert [(i["name"], i["status"]) for i in naming] == [("device", "fail")]
    assert "VLLM_ASCEND_DEVICE=cpu" in naming[0]["fix"]
    assert "pip install torch-npu" in naming[0]["fix"]  # the NPU fix stays first
    _, text = run(["check"], wiring())
    assert text.count("VLLM_ASCEND_DEVICE=cpu") == 1


def test_check_on_the_host_device_passes() -> None:
    code, text = run(["check"], wiring(env={"VLLM_ASCEND_DEVICE": "cpu"}))
    assert code == 0, text


def test_check_with_a_misspelled_variable_warns() -> None:
    env = {"VLLM_ASCEND_DEVICE": "cpu", "VLLM_ASCEND_ENABLE_NZZ": "1"}
    code, out = run(["check", "--json"], wiring(env=env))
    data = json.loads(out)
    assert code == 1 and data["status"] == "warn"
    items = [i for s in data["sections"] for i in s["items"] if i["status"] == "warn"]
    assert items[0]["name"] == "VLLM_ASCEND_ENABLE_NZZ"
    assert "VLLM_ASCEND_ENABLE_NZ" in items[0]["fix"]


def test_check_multi_node_flag_checks_network_variables() -> None:
    env = {"VLLM_ASCEND_DEVICE": "cpu"}
    code, out = run(["check", "--json", "--multi-node"], wiring(env=env))
    names = {i["name"] for s in json.loads(out)["sections"] for i in s["items"]}
    assert code == 1 and {"GLOO_SOCKET_IFNAME", "HCCL_IF_IP"} <= names


def test_plan_without_serve_args_fails() -> None:
    assert run(["plan"], wiring())[0] == 2


def _llama() -> dict[str, FakeModelFiles]:
    files = FakeModelFiles({"config.json": LLAMA_70B_CONFIG}, llama_70b_headers(), "/m/llama")
    return {"/m/llama": files}


def plan_json(argv: list[str], files: dict[str, FakeModelFiles]) -> tuple[int, dict[str, Any]]:
    code, out = run(["plan", "--json", "--", *argv], wiring(files=files))
    return code, json.loads(out)


def test_plan_llama_70b_tp4_matches_the_hand_calculation() -> None:
    code, data = plan_json(["/m/llama", "--tensor-parallel-size", "4"], _llama())
    memory = data["data"]["memory"]
    # Parameters: per layer q,o 8192x8192; k,v 1024x8192; gate,up,down 28672x8192;
    # two norms of 8192 -> 855,654,400; x80 = 68,452,352,000; embed + lm_head
    # 2 x 128256 x 8192 = 2,101,346,304; final norm 8192 -> 70,553,706,496 at 2 bytes.
    assert memory["weights_bytes_total"] == 70_553_706_496 * 2 == 141_107_412_992
    assert memory["weights_bytes_per_device"] == 141_107_412_992 // 4 == 35_276_853_248
    # KV: 2 x 80 layers x (8 KV heads / tp 4 = 2) x 128 x 2 bytes.
    assert memory["kv_bytes_per_token"] == 2 * 80 * 2 * 128 * 2 == 81_920
    # Reserve: 2 GiB + 8192 tokens x 12 x 8192 hidden x 2 bytes / tp 4.
    reserve = 2 * GIB + 8192 * 12 * 8192 * 2 // 4
    assert memory["reserve_bytes"] == reserve == 2_550_136_832
    # A2: 64 GiB x 0.9 = 61,847,529,062 usable; minus weights and reserve.
    available = int(64 * GIB * 0.9) - 35_276_853_248 - reserve
    assert memory["kv_bytes_available"] == available == 24_020_538_982
    # Blocks of 128 tokens x 81,920 B = 10 MiB: 2,290 blocks = 293,120 tokens,
    # 2 whole sequences of the config's 131,072-token context.
    assert (memory["tokens"], memory["sequences"], memory["fits"]) == (293_120, 2, True)
    assert memory["fixes"] == []
    assert code == 0, data


def test_plan_llama_70b_short_of_memory_suggests_each_fix_with_numbers() -> None:
    argv = ["/m/llama", "--tensor-parallel-size", "4", "--gpu-memory-utilization", "0.6"]
    code, data = plan_json(argv, _llama())
    memory = data["data"]["memory"]
    # 64 GiB x 0.6 = 41,231,686,041; minus 35,276,853,248 weights and 2,550,136,832
    # reserve = 3,404,695,961 -> 324 blocks = 41,472 tokens < 131,072.
    assert memory["kv_bytes_available"] == 3_404_695_961
    assert (memory["tokens"], memory["fits"]) == (41_472, False)
    fixes = {f["kind"]: f for f in memory["fixes"]}
    # One sequence = 1,024 blocks x 10 MiB = 10 GiB; needed 35,276,853,248 + 2,550,136,832
    # + 10,737,418,240 = 48,564,408,320 = 0.7067 of 64 GiB -> 0.71.
    assert fixes["gpu_memory_utilization"]["argument"] == "--gpu-memory-utilization 0.71"
    assert fixes["max_model_len"]["argument"] == "--max-model-len 41472"
    # tp 8: 17,638,426,624 B weights, 1 KV head: 40,960 B/token; 21,043,122,585 B left
    # = 4,013 blocks of 5 MiB = 513,664 tokens = 3 sequences, on 8 devices.
    assert fixes["tensor_parallel_size"]["value"] == 8
    assert (
        "513664 tokens = 3 sequence(s); needs 8 devices" in fixes["tensor_parallel_size"]["detail"]
    )
    # W8A8 halves the weights to 17,638,426,624 B: 21,043,122,585 B = 256,768 tokens.
    assert "256768 tokens" in fixes["quantization"]["detail"]
    assert [f["kind"] for f in memory["fixes"]] == [
        "gpu_memory_utilization",
        "max_model_len",
        "tensor_parallel_size",
        "quantization",
    ]
    kv_item = next(i for s in data["sections"] for i in s["items"] if i["name"] == "KV cache")
    assert kv_item["status"] == "fail"
    assert kv_item["detail"].startswith("KV cache cannot hold one sequence of max_model_len=131072")
    assert kv_item["fix"].startswith("--gpu-memory-utilization 0.71")
    assert code == 2


def test_plan_deepseek_v3_w8a8_accounts_for_mla_and_int8_weights() -> None:
    files = FakeModelFiles(
        {
            "config.json": DEEPSEEK_V3_CONFIG,
            "quant_model_description.json": deepseek_v3_description(),
        },
        deepseek_v3_headers(),
        "/m/dsv3",
    )
    code, data = plan_json(["/m/dsv3", "--tensor-parallel-size", "16"], {"/m/dsv3": files})
    memory = data["data"]["memory"]
    h = 7168
    # int8 attention per layer: q_a 1536xh, q_b (128x192)x1536, kv_a 576xh,
    # kv_b (128x256)x512, o hx(128x128); bf16 norms 1536 + 512 + 2h.
    attention = 1536 * h + 24576 * 1536 + 576 * h + 32768 * 512 + h * 16384
    norms = 2 * (1536 + 512 + 2 * h)
    dense = 3 * 18432 * h  # int8 gate, up, down of the 3 dense layers
    # int8 experts and shared expert; bf16 router; its f32 bias counts at bf16 (vLLM casts).
    moe = 256 * 3 * 2048 * h + 3 * 2048 * h + 2 * 256 * h + 2 * 256
    embeddings = 2 * 2 * 129280 * h + 2 * h
    total = 61 * (attention + norms) + 3 * dense + 58 * moe + embeddings
    assert memory["weights_bytes_total"] == total == 672_987_229_184
    assert memory["weights_bytes_per_device"] == total // 16
    # MLA: 61 layers x (512 + 64) x 2 bytes, the same on every TP rank.
    assert memory["kv_bytes_per_token"] == 61 * 576 * 2 == 70_272
    available = int(64 * GIB * 0.9) - total // 16 - (2 * GIB + 8192 * 12 * h * 2 // 16)
    assert memory["kv_bytes_available"] == available == 17_550_263_206
    # 1,951 blocks of 128 x 70,272 B = 249,728 tokens: one 163,840-token sequence (yarn x40).
    assert (memory["tokens"], memory["sequences"]) == (249_728, 1)
    sections = {s["title"]: s["items"] for s in data["sections"]}
    assert sections["attention"][0]["detail"].startswith("mla:")
    quant = sections["quantization"][0]["detail"]
    assert quant.startswith("ascend, model files") and "quant_model_description.json" in quant
    assert "MLA (kv_lora_rank 512, qk_rope_head_dim 64), MoE" in sections["model"][0]["detail"]
    # MLA and MoE are served on an NPU, but at tensor_parallel_size=16 each device holds 8
    # of the 128 query heads, and the MLA decode call takes 32, 64 or 128: refused at plan
    # time, before any weight would load; nothing else fails.
    failures = [i for items in sections.values() for i in items if i["status"] == "fail"]
    assert code == 2
    assert len(failures) == 1, failures
    assert "8 query heads per device" in failures[0]["detail"]
    assert "VLLM_ASCEND_DEVICE=cpu" in failures[0]["fix"]


def test_plan_of_a_directory_without_config_fails() -> None:
    files = {"/m/empty": FakeModelFiles({}, (), "/m/empty")}
    code, data = plan_json(["/m/empty"], files)
    assert code == 2
    assert data["sections"][0]["items"][0]["name"] == "config.json"


def test_plan_text_output_is_readable() -> None:
    code, text = run(
        ["plan", "--", "/m/llama", "--tensor-parallel-size", "4"], wiring(files=_llama())
    )
    assert code == 0
    assert "memory budget" in text and "KV cache holds 293120 tokens = 2 sequence(s)" in text


def test_plan_of_a_config_that_is_not_an_object_fails() -> None:
    files = {"/m/odd": FakeModelFiles({"config.json": [1, 2]}, (), "/m/odd")}
    code, data = plan_json(["/m/odd"], files)
    assert code == 2
    assert "holds a list, not a JSON object" in data["sections"][0]["items"][0]["detail"]


def test_check_reports_a_probe_that_cannot_be_built() -> None:
    c = wiring()

    def broken() -> DeviceProbe:
        raise ImportError("libhccl.so: cannot open shared object file")

    c.npu_probe.override(providers.Callable(broken))
    code, text = run(["check"], c)
    assert code == 2
    assert "the NPU probe failed: ImportError: libhccl.so" in text


def test_plan_reports_the_graph_mode_the_engine_runs_not_the_one_it_asks_for() -> None:
    _, data = plan_json(["/m/llama"], _llama())
    execution = data["data"]["execution"]
    # The plan asks vLLM for the reference's default NPU graphs for a dense model, and the
    # NPU worker captures them.
    assert "npu_graph_mode=FULL_AND_PIECEWISE" in data["data"]["plan"]
    assert execution["graph_mode"] == "FULL_AND_PIECEWISE"
    assert "NPU graphs captured: FULL_AND_PIECEWISE" in execution["how"]
    (section,) = [s for s in data["sections"] if s["title"] == "config plan"]
    items = {i["name"]: i["detail"] for i in section["items"]}
    assert "graph FULL_AND_PIECEWISE" in items["decisions"]
    # Tensor parallelism keeps the graphs (the ranks capture); under pipeline parallelism
    # the plan asks for none (plan/graph.py), and none run.
    _, tp = plan_json(["/m/llama", "--tensor-parallel-size", "4"], _llama())
    assert tp["data"]["execution"]["graph_mode"] == "FULL_AND_PIECEWISE"
    _, parallel = plan_json(["/m/llama", "--pipeline-parallel-size", "2"], _llama())
    assert parallel["data"]["execution"]["graph_mode"] == "NONE"
    assert "npu_graph_mode=NONE" in parallel["data"]["plan"]
    assert items["execution"] == execution["how"]


def test_check_says_when_mooncake_lacks_libibverbs_and_how_to_install_it() -> None:
    c = wiring(versions={"vllm": "0.33.0", "mooncake-transfer-engine-non-cuda": "0.3.13"})
    code, text = run(["check"], c)
    assert "P/D disaggregation (Mooncake)" in text
    assert "libibverbs.so.1" in text and "apt-get install libibverbs1" in text
    plain_code, plain = run(["check"], wiring())
    assert "P/D disaggregation" not in plain and code == plain_code == 2


def test_plan_of_an_fp8_export_shows_the_chips_fp8_path() -> None:
    qconfig = {"quant_method": "compressed-tensors", "format": "float-quantized",
               "ignore": ["lm_head"], "config_groups": {"group_0": {
                   "targets": ["Linear"],
                   "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                   "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                         "dynamic": True}}}}
    config = {**LLAMA_70B_CONFIG, "quantization_config": qconfig}
    files = FakeModelFiles({"config.json": config}, llama_70b_headers(), "/m/fp8")
    _, data = plan_json(["/m/fp8", "--tensor-parallel-size", "4"], {"/m/fp8": files})
    sections = {s["title"]: s["items"] for s in data["sections"]}
    fp8 = next(i for i in sections["quantization"] if i["name"] == "fp8")
    assert fp8["status"] == "pass"
    assert fp8["detail"].startswith("fp8 weights: dequantize at load to the model dtype")
    assert "quant   fp8 weights: dequantize at load" in data["data"]["plan"]
