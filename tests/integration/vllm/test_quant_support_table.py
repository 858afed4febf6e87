"""For every quantized format x layer kind (support.quant_table.ROWS), on the host device,
`vllm serve` (vLLM's parser, EngineArgs -> VllmConfig, our platform's config hook) and
`ascend-doctor plan` agree: both accept, or both refuse with the same message before any
weight loads, naming the layer, the scheme and what would serve it. No engine starts: the
accepted rows' serving is proven by the generate tests (test_quantized_generate.py,
test_quantized_moe_generate.py, test_compressed_tensors_generate.py). The NPU column:
tests/integration/npu/test_quant_support_table_on_emulated_npu.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_doctor_serve_agreement import doctor_refuses, serve_refuses

from support.quant_table import ROWS, make_row

_WORDS = ("this build of the Ascend plugin does not serve",
          "weight blocks, which do not fit this model")


def agreement(model_dirs: dict[str, str], how: str, style: str, where: Path
              ) -> tuple[bool, bool, list[str], str]:
    """(doctor refuses, serve refuses, the doctor's quantization refusals, serve's error)."""
    model, extra = make_row(how, Path(model_dirs[style]), where)
    argv = [str(model), *extra]
    by_doctor, report = doctor_refuses(argv)
    by_serve, error = serve_refuses(argv)
    failures = [f"{i['detail']} Fix: {i['fix']}"
                for s in json.loads(report)["sections"] for i in s["items"]
                if i["status"] == "fail" and any(w in i["detail"] for w in _WORDS)]
    return by_doctor, by_serve, failures, error


@pytest.fixture(scope="module")
def rows_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("quant-rows")


@pytest.mark.parametrize(("style", "how", "served"), [(s, h, ok) for _, s, h, ok in ROWS],
                         ids=[i for i, _, _, _ in ROWS])  # fmt: skip
def test_serve_and_the_doctor_agree_before_load(
    model_dirs: dict[str, str], rows_dir: Path, style: str, how: str, served: bool
) -> None:
    by_doctor, by_serve, failures, error = agreement(model_dirs, how, style, rows_dir)
    assert (by_doctor, by_serve) == (not served, not served), (failures, error[-2000:])
    if served:
        return
    # Refused in the plugin's words, before the engine: our StartupError, the doctor's
    # refusal verbatim, naming a layer; never vLLM's kernel selection.
    assert error.startswith("StartupError: vllm-plugin-ascend: "), error[-2000:]
    assert failures, error[-2000:]
    for failure in failures:
        assert failure.startswith("Layer model.") or failure.startswith("Layer lm_head")
        assert failure in error
    assert "Failed to find a kernel" not in error and "block_n" not in error
