"""The vLLM adapter's patch table and the core's patch registry hold exactly the same ids:
no registered patch without a function, no function without a registered patch."""

from __future__ import annotations

import ast
from pathlib import Path

from adapters.vllm.patches import table
from ascend_core.patches import REGISTRY

PATCHES = Path(table.__file__).parent


def _functions(module: str) -> set[str]:
    tree = ast.parse((PATCHES / f"{module}.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_table_and_the_registry_have_the_same_ids() -> None:
    registered = [spec.id for spec in REGISTRY]
    assert set(table.FUNCTIONS) == set(registered), (
        f"only in the registry: {sorted(set(registered) - set(table.FUNCTIONS))}; "
        f"only in the table: {sorted(set(table.FUNCTIONS) - set(registered))}"
    )


def test_each_function_exists_and_each_kernel_override_has_an_implementation() -> None:
    # Read, not imported: the patch modules import vLLM, which unit tests keep out.
    for patch_id, where in table.FUNCTIONS.items():
        module, _, function = where.partition(":")
        assert function in _functions(module), f"{patch_id}: {where} does not exist"
    overrides = (PATCHES / "torch_kernels.py").read_text()
    for spec in REGISTRY:
        if table.FUNCTIONS[spec.id] == "torch_kernels:override":
            assert f'"{spec.target}"' in overrides, f"{spec.id} has no torch implementation"


def test_an_id_the_table_lacks_is_named_with_where_to_add_it() -> None:
    try:
        table.function_for("no-such-patch")
    except table.UnknownPatch as error:
        assert "no-such-patch" in str(error) and "table.py" in str(error)
    else:
        raise AssertionError("an unknown id must be refused")
