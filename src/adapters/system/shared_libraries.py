"""The SystemLibraries port as the dynamic loader searches: LD_LIBRARY_PATH, then the
loader's cache (`ldconfig -p`), then the usual library directories. Nothing is loaded."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

from ports.environment import Environment
from ports.system_libraries import SystemLibraries

LDCONFIG = ("/sbin/ldconfig", "/usr/sbin/ldconfig")
DEFAULT_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


def ldconfig_cache() -> str | None:
    """`ldconfig -p` (the loader's cache, one library a line); None where it cannot run."""
    for path in LDCONFIG:
        if not os.path.isfile(path):
            continue
        try:
            done = subprocess.run(
                [path, "-p"], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return done.stdout
    return None


class LoaderLibraries(SystemLibraries):
    """Where the loader finds a soname; the cache reader and file test are injectable."""

    def __init__(
        self,
        env: Environment,
        read_cache: Callable[[], str | None] = ldconfig_cache,
        is_file: Callable[[str], bool] = os.path.isfile,
        default_dirs: tuple[str, ...] = DEFAULT_DIRS,
    ) -> None:
        self._env = env
        self._read_cache = read_cache
        self._is_file = is_file
        self._default_dirs = default_dirs

    def locate(self, soname: str) -> str | None:
        searched = [d for d in (self._env.get("LD_LIBRARY_PATH") or "").split(":") if d]
        for directory in searched:
            if self._is_file(path := os.path.join(directory, soname)):
                return path
        cached = _from_cache(self._read_cache(), soname)
        if cached is not None:
            return cached
        for directory in self._default_dirs:
            if self._is_file(path := os.path.join(directory, soname)):
                return path
        return None


def _from_cache(cache: str | None, soname: str) -> str | None:
    """The path `ldconfig -p` lists for `soname`: lines `NAME (flags) => PATH`."""
    for line in (cache or "").splitlines():
        name, arrow, path = line.strip().partition(" => ")
        if arrow and name.split(" (")[0] == soname and path.strip():
            return path.strip()
    return None
