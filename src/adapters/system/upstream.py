"""The Upstream port from package metadata, imports, and the CANN toolkit's install info."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from pathlib import Path

from adapters.system.environment import OsEnvironment
from ports.environment import Environment
from ports.upstream import Upstream

# Where CANN installs when $ASCEND_HOME_PATH (exported by set_env.sh) is unset:
# the toolkit layout up to 8.x, then the `cann` layout of later releases.
DEFAULT_CANN_HOMES = (
    "/usr/local/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/cann",
)
CANN_HOME_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


class MetadataUpstream(Upstream):
    """Versions from importlib.metadata; symbols by importing their module, nothing more.

    `has_symbol` walks attributes with `inspect.getattr_static`, so no property,
    descriptor or module `__getattr__` runs: the only code executed is the import of
    the named module (and of submodules on the path).
    """

    def __init__(
        self,
        environment: Environment | None = None,
        cann_homes: tuple[str, ...] = DEFAULT_CANN_HOMES,
    ) -> None:
        self._env = environment if environment is not None else OsEnvironment()
        self._cann_homes = cann_homes

    def version(self, package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    def has_symbol(self, dotted: str) -> bool:
        module_name, attrs = _split(dotted)
        if module_name is None:
            return False
        try:
            obj: object = importlib.import_module(module_name)
        except Exception:  # any failure to import means the symbol is not usable here
            return False
        path = module_name
        for attr in attrs:
            path = f"{path}.{attr}"
            try:
                obj = inspect.getattr_static(obj, attr)
            except AttributeError:
                # Only a package can have a not-yet-imported submodule; asking a plain
                # module for `__path__` would run its `__getattr__`.
                if not inspect.ismodule(obj) or "__path__" not in vars(obj):
                    return False
                try:  # a submodule not imported yet by its package
                    obj = importlib.import_module(path)
                except Exception:
                    return False
        return True

    def cann_version(self) -> str | None:
        homes = [v for v in (self._env.get(n) for n in CANN_HOME_VARIABLES) if v]
        for home in [*homes, *self._cann_homes]:
            version = read_cann_version(Path(home))
            if version is not None:
                return version
        return None


def _split(dotted: str) -> tuple[str | None, list[str]]:
    """`pkg.mod:A.b` -> (`pkg.mod`, [A, b]); `pkg.mod.A` -> the longest importable module."""
    if ":" in dotted:
        module_name, _, rest = dotted.partition(":")
        return module_name or None, [a for a in rest.split(".") if a]
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        if name in sys.modules:
            return name, parts[cut:]
        try:
            if importlib.util.find_spec(name) is not None:
                return name, parts[cut:]
        except (ImportError, ValueError):
            continue
    return None, []


def read_cann_version(home: Path) -> str | None:
    """The `version=` of a CANN install at `home`, None when there is none.

    `<arch>-linux/ascend_toolkit_install.info` is what the CANN docs tell users to
    read; `version.info` files of older layouts are the fallback.
    """
    candidates = [
        *sorted(home.glob("*-linux/ascend_toolkit_install.info")),
        home / "version.info",
        home / "compiler" / "version.info",
        home / "runtime" / "version.info",
    ]
    for path in candidates:
        version = _version_line(path)
        if version:
            return version
    return None


def _version_line(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "version":
            return value.strip().strip("[]\"'") or None
    return None
