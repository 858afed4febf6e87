"""Importing the container skips dependency_injector's optional integrations, and only then."""

import subprocess
import sys
import types

import pytest

from adapters.system.lean_imports import DEPENDENCY_INJECTOR_EXTRAS, without_modules

PROBE = """
import sys
import adapters.container
extras = {extras!r}
loaded = sorted(m for m in extras if m in sys.modules)
blocked = sorted(k for k, v in sys.modules.items() if v is None and k in extras)
import yaml  # installed in this environment; importable again once the block is over
print(",".join(loaded) + "|" + ",".join(blocked) + "|" + yaml.__name__)
"""


def test_the_container_imports_none_of_dependency_injectors_integrations() -> None:
    pytest.importorskip("yaml")
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(extras=DEPENDENCY_INJECTOR_EXTRAS)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    loaded, blocked, later = out.split("|")
    assert loaded == "", f"importing the container loaded {loaded}"
    assert blocked == "", f"left blocked in sys.modules: {blocked}"
    assert later == "yaml"


def test_a_blocked_module_raises_import_error_inside_and_imports_afterwards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("ascend_lean_probe")
    with without_modules(("ascend_lean_probe",)), pytest.raises(ImportError):
        import ascend_lean_probe  # noqa: F401
    assert "ascend_lean_probe" not in sys.modules
    monkeypatch.setitem(sys.modules, "ascend_lean_probe", fake)
    with without_modules(("ascend_lean_probe",)):  # already imported: left alone
        import ascend_lean_probe as again
    assert again is fake
