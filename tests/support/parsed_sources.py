"""Python sources parsed once per test process: several guards scan the same files of src/
and tests/ (env reads, module-global patches, fakes of ports), and parsing is most of their
cost."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def syntax_nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file's tree, in ast.walk's order."""
    return tuple(ast.walk(syntax_tree(path)))
