"""Supported vLLM / torch / torch_npu / CANN versions, and a verdict on what is installed."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from attrs import frozen

from ascend_core.errors import AscendError, CompatibilityError, PlanErrors
from ascend_core.versions import Version, VersionRange
from ports.device import DeviceKind
from ports.upstream import Upstream


class Component(enum.Enum):
    """What the verdict checks; the value is the name users see."""

    VLLM = "vllm"
    TORCH = "torch"
    TORCH_NPU = "torch_npu"
    CANN = "CANN"


class ItemStatus(enum.Enum):
    OK = "ok"
    MISMATCH = "mismatch"
    MISSING = "missing"
    NOT_NEEDED = "not needed"


@frozen
class SupportedSet:
    """The versions one device kind is built and tested with, and how to install each."""

    device: DeviceKind
    vllm: VersionRange
    torch: VersionRange
    torch_install: str
    torch_npu: VersionRange | None = None
    cann: VersionRange | None = None


VLLM_INSTALL = "pip install --no-deps vllm==0.33.0"  # its CUDA-only requirements stay out
CANN_INSTALL = (
    "install the CANN toolkit and the kernels for your chip, 9.1.x "
    "(https://www.hiascend.com/software/cann), then "
    "`source /usr/local/Ascend/ascend-toolkit/set_env.sh`"
)

SUPPORTED: Mapping[DeviceKind, SupportedSet] = MappingProxyType(
    {
        DeviceKind.NPU: SupportedSet(
            device=DeviceKind.NPU,
            vllm=VersionRange.parse("==0.33.0"),
            torch=VersionRange.parse("==2.14.0"),
            torch_install="pip install torch==2.14.0",
            # Post releases (2.14.0.postN) rebuild the same torch_npu for newer CANN.
            torch_npu=VersionRange.parse(">=2.14.0,<2.14.1"),
            # Assumption: no published table pairs torch_npu 2.14 with a CANN release yet.
            # The latest one (TorchNPU 26.1.x: torch_npu 2.7.1 .. 2.12.0) pairs with CANN
            # 9.1.x, so we require at least 9.1.0 and stay below the next major.
            cann=VersionRange.parse(">=9.1.0,<10"),
        ),
        DeviceKind.CPU: SupportedSet(
            device=DeviceKind.CPU,
            vllm=VersionRange.parse("==0.33.0"),
            torch=VersionRange.parse("==2.13.0"),
            torch_install=(
                "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
            ),
        ),
    }
)


@frozen
class InstalledVersions:
    """What is installed; None for a package or toolkit that is absent."""

    vllm: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    cann: str | None = None


def installed_versions(upstream: Upstream) -> InstalledVersions:
    """Ask the upstream port for every version the verdict needs."""
    return InstalledVersions(
        vllm=upstream.version("vllm"),
        torch=upstream.version("torch"),
        torch_npu=upstream.version("torch_npu"),
        cann=upstream.cann_version(),
    )


@frozen
class CompatibilityItem:
    """One component: its status, what is installed and required, what is wrong, the fix."""

    component: Component
    status: ItemStatus
    installed: str | None
    required: str
    message: str
    fix: str = ""

    @property
    def is_problem(self) -> bool:
        return self.status in (ItemStatus.MISMATCH, ItemStatus.MISSING)


@frozen
class CompatibilityVerdict:
    """Every component checked for one device kind."""

    device: DeviceKind
    items: tuple[CompatibilityItem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def problems(self) -> tuple[CompatibilityItem, ...]:
        return tuple(i for i in self.items if i.is_problem)

    def item(self, component: Component) -> CompatibilityItem:
        return next(i for i in self.items if i.component is component)

    def errors(self) -> tuple[CompatibilityError, ...]:
        return tuple(CompatibilityError(i.message, i.fix) for i in self.problems)

    def raise_for_problems(self) -> None:
        """Raise the one CompatibilityError, or PlanErrors listing several."""
        errors = self.errors()
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise PlanErrors(list[AscendError](errors))

    def explain(self) -> str:
        lines = [f"Compatibility on {self.device.value}: {'ok' if self.ok else 'problems'}"]
        for i in self.items:
            line = f"  {i.component.value}: {i.status.value}: {i.message}"
            lines.append(f"{line} Fix: {i.fix}" if i.fix and i.is_problem else line)
        return "\n".join(lines)


_CANN = re.compile(r"^\s*(\d+(?:\.\d+){0,3})(?:\.?RC(\d+))?", re.IGNORECASE)


def parse_cann_version(text: str) -> Version | None:
    """CANN spells releases `8.5.0` and candidates `8.3.RC1`; trailing `.beta1` is ignored."""
    m = _CANN.match(text) if isinstance(text, str) and len(text) <= 200 else None
    if m is None:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    pre = ("rc", int(m.group(2))) if m.group(2) else None
    return Version(release, pre, text=text.strip())


def _wanted(spec: VersionRange) -> str:
    """`2.14.0` for an exact pin, the range text otherwise."""
    only = spec.clauses[0] if len(spec.clauses) == 1 else None
    if only is not None and only.op.value == "==":
        return str(only.version)
    if spec.clauses and spec.clauses[0].op.value == ">=":
        return str(spec.clauses[0].version)  # `>=2.14.0,<2.14.1` reads as 2.14.0
    return str(spec)


def _check(
    component: Component,
    installed: str | None,
    spec: VersionRange,
    fix: str,
    needed_by: str,
    parse: Callable[[str], Version | None] = Version.parse,
) -> CompatibilityItem:
    name = component.value
    if installed is None:
        return CompatibilityItem(
            component,
            ItemStatus.MISSING,
            None,
            str(spec),
            f"{name} is not installed; {needed_by} needs {name} {_wanted(spec)}.",
            fix,
        )
    version = parse(installed)
    if version is None:
        return CompatibilityItem(
            component,
            ItemStatus.MISMATCH,
            installed,
            str(spec),
            f"{name} reports version {installed!r}, which is not a version number; "
            f"{needed_by} needs {name} {_wanted(spec)}.",
            fix,
        )
    if not spec.admits(version):
        return CompatibilityItem(
            component,
            ItemStatus.MISMATCH,
            installed,
            str(spec),
            f"{name} {installed} installed, {needed_by} needs {name} {_wanted(spec)}.",
            fix,
        )
    return CompatibilityItem(
        component, ItemStatus.OK, installed, str(spec), f"{name} {installed} installed."
    )


def check_compatibility(installed: InstalledVersions, device: DeviceKind) -> CompatibilityVerdict:
    """Each of vLLM, torch, torch_npu and CANN checked against what `device` is supported with."""
    supported = SUPPORTED[device]
    items = [_check(Component.VLLM, installed.vllm, supported.vllm, VLLM_INSTALL, "this plugin")]
    if device is DeviceKind.NPU:
        items += _npu_items(installed, supported)
    else:
        items += _host_items(installed, supported)
    return CompatibilityVerdict(device, tuple(items))


def _npu_items(installed: InstalledVersions, s: SupportedSet) -> list[CompatibilityItem]:
    assert s.torch_npu is not None and s.cann is not None  # the NPU set names both
    npu_pin = _wanted(s.torch_npu)
    npu_ok = Version.parse(installed.torch_npu or "")
    # torch_npu is built against one torch: name it, since that is what pip users see.
    torch_needer = (
        f"torch_npu {installed.torch_npu}"
        if npu_ok is not None and s.torch_npu.admits(npu_ok)
        else f"the NPU device (with torch_npu {npu_pin})"
    )
    return [
        _check(Component.TORCH, installed.torch, s.torch, s.torch_install, torch_needer),
        _check(
            Component.TORCH_NPU,
            installed.torch_npu,
            s.torch_npu,
            f"pip install torch-npu=={npu_pin}",
            "the NPU device",
        ),
        _check(
            Component.CANN,
            installed.cann,
            s.cann,
            CANN_INSTALL,
            f"torch_npu {npu_pin}",
            parse=parse_cann_version,
        ),
    ]


def _host_items(installed: InstalledVersions, s: SupportedSet) -> list[CompatibilityItem]:
    items = [
        _check(
            Component.TORCH,
            installed.torch,
            s.torch,
            s.torch_install,
            "the host device (CPU build of torch)",
        )
    ]
    if installed.torch_npu is not None and installed.cann is None:
        # torch loads installed device backends at import; torch_npu without CANN fails there.
        items.append(
            CompatibilityItem(
                Component.TORCH_NPU,
                ItemStatus.MISMATCH,
                installed.torch_npu,
                "absent",
                f"torch_npu {installed.torch_npu} is installed but no CANN toolkit was found, "
                "so `import torch` fails when torch autoloads torch_npu; the host device "
                "does not use it.",
                "pip uninstall -y torch-npu",
            )
        )
    else:
        note = (
            f"torch_npu {installed.torch_npu} installed; the host device does not use it."
            if installed.torch_npu is not None
            else "not needed on the host device."
        )
        items.append(
            CompatibilityItem(
                Component.TORCH_NPU, ItemStatus.NOT_NEEDED, installed.torch_npu, "", note
            )
        )
    items.append(
        CompatibilityItem(
            Component.CANN,
            ItemStatus.NOT_NEEDED,
            installed.cann,
            "",
            "not needed on the host device.",
        )
    )
    return items
