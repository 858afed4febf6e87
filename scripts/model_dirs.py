"""What the model-making scripts share: build a directory once, and the local text.

make_models.py, make_quant_exports.py and make_ct_exports.py each write a directory
that is expensive to make. `build_once` makes it at most once per stamp: under a lock
file next to it (several test processes may ask at once), into a temporary directory
that is renamed into place, so a reader never sees a half-written model.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def build_once(
    out: Path, stamp_file: str, stamp: dict[str, Any], build: Callable[[Path], None]
) -> Path:
    """Return `out`, first calling build(tmp) and renaming tmp to `out` unless `out`
    already carries exactly this stamp (in `stamp_file`)."""
    if read_json(out / stamp_file) == stamp:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out.parent / f".{out.name}.lock"):
        if read_json(out / stamp_file) == stamp:
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            build(tmp)
            (tmp / stamp_file).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
            # mkdtemp and some writers create owner-only files; a model dir is for everyone.
            tmp.chmod(0o755)
            for path in tmp.iterdir():
                path.chmod(0o644)
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return out


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stdlib_sources(reverse: bool = False) -> Iterator[str]:
    """This Python's standard library module sources, in name order (or reversed):
    the local text tokenizers are trained on (forward) and calibration reads (reversed,
    so not the files the tokenizer saw first)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.glob("*.py"), reverse=reverse):
        yield path.read_text(encoding="utf-8", errors="replace")


def calibration_token_ids(tokenizer: Any, tokens: int) -> list[int]:
    """The first `tokens` ids of the reversed stdlib text, tokenized by `tokenizer`."""
    ids: list[int] = []
    for text in stdlib_sources(reverse=True):
        ids += tokenizer(text).input_ids
        if len(ids) >= tokens:
            break
    return ids[:tokens]
