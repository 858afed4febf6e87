"""OsEnvironment reads the process environment (or a given mapping)."""

from __future__ import annotations

import pytest

from adapters.system import OsEnvironment


def test_reads_os_environ_live(monkeypatch: pytest.MonkeyPatch) -> None:
    env = OsEnvironment()
    monkeypatch.setenv("VLLM_ASCEND_TEST_VALUE", "1")
    assert env.get("VLLM_ASCEND_TEST_VALUE") == "1"
    assert "VLLM_ASCEND_TEST_VALUE" in env.names()
    monkeypatch.delenv("VLLM_ASCEND_TEST_VALUE")
    assert env.get("VLLM_ASCEND_TEST_VALUE") is None


def test_given_mapping() -> None:
    env = OsEnvironment({"A": "x"})
    assert env.get("A") == "x"
    assert env.get("B") is None
    assert tuple(env.names()) == ("A",)
