"""What serve logs from the plan (adapters.vllm.engine.configure.plan_for), without vLLM."""

from __future__ import annotations

import logging

import pytest

from adapters.vllm.engine import configure
from ascend_core.deployment import CompileMode
from unit.core.plan_fixtures import host, npu


def test_serve_logs_that_the_default_npugraph_ex_has_no_effect_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deployment = npu(compilation={"mode": CompileMode.VLLM_COMPILE})
    configure._noted.clear()
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        configure.plan_for(deployment)
        configure.plan_for(deployment)  # the API server and the engine plan alike
    notes = [r for r in caplog.records if "enable_npugraph_ex" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert "is true by default and has no effect" in notes[0].getMessage()


def test_a_written_true_is_a_warning_and_the_host_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configure._noted.clear()
    written = {"ascend_compilation_config": {"enable_npugraph_ex": True}}
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        configure.plan_for(npu(additional_config=written))
        configure.plan_for(host(compilation={}))
    notes = [r for r in caplog.records if "enable_npugraph_ex" in r.getMessage()]
    assert [r.levelno for r in notes] == [logging.WARNING]
    assert "has no effect: this plugin does not bind" in notes[0].getMessage()
