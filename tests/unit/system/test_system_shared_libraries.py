"""adapters/system/shared_libraries.py: where the loader finds a soname, without loading it
(the loader's cache and the file test injected)."""

from __future__ import annotations

from adapters.system.shared_libraries import LoaderLibraries, ldconfig_cache
from unit.fakes.environment import FakeEnvironment

CACHE = """538 libs found in cache `/etc/ld.so.cache'
\tlibibverbs.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libibverbs.so.1
\tlibibverbs.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libibverbs.so
"""


def _libraries(env: dict[str, str], cache: str | None, files: set[str]) -> LoaderLibraries:
    return LoaderLibraries(
        FakeEnvironment(env), lambda: cache, files.__contains__, default_dirs=("/usr/lib64",)
    )


def test_ld_library_path_comes_first() -> None:
    found = _libraries(
        {"LD_LIBRARY_PATH": "/opt/x:/opt/rdma"}, CACHE, {"/opt/rdma/libibverbs.so.1"}
    )
    assert found.locate("libibverbs.so.1") == "/opt/rdma/libibverbs.so.1"


def test_then_the_loaders_cache_by_exact_soname() -> None:
    found = _libraries({}, CACHE, set())
    assert found.locate("libibverbs.so.1") == "/lib/x86_64-linux-gnu/libibverbs.so.1"
    assert found.locate("libibverbs.so.2") is None


def test_then_the_usual_directories_and_none_when_absent() -> None:
    assert _libraries({}, None, {"/usr/lib64/libibverbs.so.1"}).locate("libibverbs.so.1") == (
        "/usr/lib64/libibverbs.so.1"
    )
    assert _libraries({}, None, set()).locate("libibverbs.so.1") is None


def test_the_real_cache_reader_answers_text_or_none() -> None:
    cache = ldconfig_cache()
    assert cache is None or isinstance(cache, str)
