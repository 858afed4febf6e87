"""`ascend-doctor plan` names the registration row of the model at hand, in text and JSON."""

from __future__ import annotations

import json

from unit.doctor.large_models import LLAMA_70B_CONFIG, llama_70b_headers
from unit.doctor.test_cli import run, wiring
from unit.fakes.model_files import FakeModelFiles


def _files(architecture: str) -> dict[str, FakeModelFiles]:
    config = {**LLAMA_70B_CONFIG, "architectures": [architecture]}
    return {"/m/x": FakeModelFiles({"config.json": config}, llama_70b_headers(), "/m/x")}


def _registration_item(data: dict) -> dict:
    model = next(s for s in data["sections"] if s["title"] == "model")
    return next(i for i in model["items"] if i["name"] == "registration")


def test_plan_json_carries_the_row_of_a_listed_architecture() -> None:
    argv = ["plan", "--json", "--", "/m/x", "--tensor-parallel-size", "4"]
    _, out = run(argv, wiring(files=_files("LlamaForCausalLM")))
    data = json.loads(out)
    row = data["data"]["registration"]
    assert row["architecture"] == "LlamaForCausalLM"
    assert row["implementation_kind"] == "vLLM's own"
    assert row["implementation"] == "vllm.model_executor.models.llama:LlamaForCausalLM"
    assert set(row["serves_on"]) == {"cpu", "npu"} and row["features"] == []
    item = _registration_item(data)
    assert item["status"] == "pass"
    assert item["detail"].startswith("vLLM's own vllm.model_executor.models.llama:Llama")
    assert "paged attention backend" in item["detail"]


def test_plan_text_says_an_unlisted_architecture_has_no_row() -> None:
    argv = ["plan", "--", "/m/x", "--tensor-parallel-size", "4"]
    code, text = run(argv, wiring(files=_files("Phi3ForCausalLM")))
    assert "Phi3ForCausalLM has no row in the plugin's registration table" in text
    _, out = run(["plan", "--json", *argv[1:]], wiring(files=_files("Phi3ForCausalLM")))
    assert json.loads(out)["data"]["registration"] is None
    assert code == 0  # the matrix serves a dense model; no row is not a failure
