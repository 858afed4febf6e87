"""The NPU probe: is torch_npu installed, are CANN's libraries found, is a device visible.

Nothing here imports torch or torch_npu or touches a device (the probe must explain a
host where `import torch` fails): each fact comes through an injected function.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Sequence

from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE, visible_devices
from ports.device import DeviceFacts, DeviceKind, DeviceProbe, ProbeResult
from ports.environment import Environment

# libascendcl: CANN's runtime; libhccl: its collective library. torch_npu fails to
# import without either (it says so itself, in torch_npu/_init/core/module_loader.py).
CANN_LIBRARIES = ("libascendcl.so", "libhccl.so")
TORCH_NPU_REQUIREMENT = "torch-npu==2.14.0"
SET_ENV_HINT = (
    "source the CANN toolkit's set_env.sh (for a default install: "
    "`source /usr/local/Ascend/ascend-toolkit/set_env.sh`), which sets ASCEND_HOME_PATH "
    "and LD_LIBRARY_PATH"
)
_DAVINCI = re.compile(r"^davinci(\d+)$")


class CannLibraryFinder:
    """Finds a CANN shared library in LD_LIBRARY_PATH, then under $ASCEND_HOME_PATH/lib64."""

    def __init__(self, env: Environment, is_file: Callable[[str], bool] = os.path.isfile) -> None:
        self._env = env
        self._is_file = is_file

    def search_path(self) -> list[str]:
        dirs = [d for d in (self._env.get("LD_LIBRARY_PATH") or "").split(":") if d]
        for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
            home = self._env.get(var)
            if home:
                dirs.append(os.path.join(home, "lib64"))
        return dirs

    def __call__(self, library: str) -> str | None:
        for directory in self.search_path():
            path = os.path.join(directory, library)
            if self._is_file(path):
                return path
        return None


class DavinciDeviceLister:
    """Physical NPU ids from the driver's device nodes (/dev/davinci<N>), without opening them.

    Their count is what ASCEND_RT_VISIBLE_DEVICES' logical ids 0..count-1 range over.
    """

    def __init__(
        self, dev_dir: str = "/dev", listdir: Callable[[str], Sequence[str]] = os.listdir
    ) -> None:
        self._dev_dir = dev_dir
        self._listdir = listdir

    def __call__(self) -> list[int]:
        try:
            names = self._listdir(self._dev_dir)
        except OSError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _DAVINCI.match(n)))


class NpuProbe(DeviceProbe):
    """Says whether the NPU can serve here, and if not, which piece is missing and the fix.

    env: the process environment (ASCEND_RT_VISIBLE_DEVICES, LD_LIBRARY_PATH, ...).
    find_spec: importlib.util.find_spec, to see torch_npu without importing it.
    find_library: library file name -> path or None (default CannLibraryFinder(env)).
    list_devices: the NPUs the driver exposes (default DavinciDeviceLister()).
    read_facts: optional; reads DeviceFacts from an initialised runtime once the checks
        pass. The container leaves it unset: the probe decides in every vLLM process,
        before torch_npu is imported, and the chip is read once it serves (serving_chip).
    """

    def __init__(
        self,
        env: Environment,
        find_spec: Callable[[str], object | None] = importlib.util.find_spec,
        find_library: Callable[[str], str | None] | None = None,
        list_devices: Callable[[], Sequence[int]] | None = None,
        read_facts: Callable[[], DeviceFacts] | None = None,
    ) -> None:
        self._env = env
        self._find_spec = find_spec
        self._find_library = find_library or CannLibraryFinder(env)
        self._list_devices = list_devices or DavinciDeviceLister()
        self._read_facts = read_facts

    def probe(self) -> ProbeResult:
        if self._find_spec("torch_npu") is None:
            return _unavailable(
                "the Python package torch_npu is not installed",
                f"pip install {TORCH_NPU_REQUIREMENT} (built for torch 2.14.0) on the NPU host",
            )
        found = {lib: self._find_library(lib) for lib in CANN_LIBRARIES}
        missing = [lib for lib, path in found.items() if path is None]
        if missing:
            return _unavailable(
                f"CANN library {', '.join(missing)} not found in LD_LIBRARY_PATH or "
                "$ASCEND_HOME_PATH/lib64",
                f"install the CANN toolkit and {SET_ENV_HINT}",
            )
        devices = list(self._list_devices())
        if not devices:
            return _unavailable(
                "no NPU device visible: the driver exposes no /dev/davinci<N> node",
                "install the Ascend driver and firmware (check with `npu-smi info`); in a "
                "container, pass the /dev/davinci* devices and /dev/davinci_manager through",
            )
        # ASCEND_RT_VISIBLE_DEVICES holds logical ids: 0..count-1 of the nodes present.
        visible = visible_devices(self._env.get(VISIBLE_DEVICES_VARIABLE), len(devices))
        if visible.none_visible:
            return _unavailable(f"no NPU device visible: {visible.problem}", visible.hint)
        ids = list(visible.ids or ())
        reason = (
            f"torch_npu installed, CANN libraries at {', '.join(str(p) for p in found.values())}, "
            f"{len(ids)} visible NPU(s) {ids} "
            f"(logical ids of the {len(devices)} /dev/davinci<N> nodes)"
        )
        if visible.problem is not None:
            reason += f"; but {visible.problem}"
        facts = self._read_facts() if self._read_facts is not None else None
        return ProbeResult(kind=DeviceKind.NPU, available=True, reason=reason, facts=facts)


def _unavailable(reason: str, hint: str) -> ProbeResult:
    return ProbeResult(kind=DeviceKind.NPU, available=False, reason=reason, hint=hint)
