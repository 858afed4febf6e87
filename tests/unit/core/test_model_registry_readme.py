"""The README's model table is the registration table, with the matrix's verdict per device."""

from __future__ import annotations

from pathlib import Path

from adapters.vllm.models import MODEL_CLASSES
from ascend_core.model_registry import REGISTRATIONS, Registration
from ports.device import DeviceKind

README = Path(__file__).resolve().parents[3] / "README.md"
HEADING = "\n## Model architectures\n"
_VLLM_MODELS = "vllm.model_executor.models."


def _row(r: Registration) -> str:
    served = ["yes" if r.serves_on(d) else "refused" for d in (DeviceKind.CPU, DeviceKind.NPU)]
    # A row of our own names its class in the vLLM adapter's models room.
    where = (r.implementation or MODEL_CLASSES[r.architecture]).removeprefix(_VLLM_MODELS)
    cls = f"{r.implementation_kind.value} `{where}`"
    return f"| {r.architecture} | {served[0]} | {served[1]} | {cls} | {r.why} |"


def expected_table() -> str:
    head = "| architecture | host device | Ascend NPU | model class | why |\n|---|---|---|---|---|"
    return "\n".join([head, *(_row(r) for r in REGISTRATIONS)])


def _current_table(text: str) -> str:
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def test_the_readme_lists_every_registration_with_its_verdicts_and_reason() -> None:
    text = README.read_text()
    assert HEADING in text
    assert _current_table(text) == expected_table(), (
        "README's model table is not the registration table; rewrite it with "
        "`.venv/bin/python tests/unit/core/test_model_registry_readme.py`"
    )


if __name__ == "__main__":  # rewrite the README's table from the registration table
    text = README.read_text()
    README.write_text(text.replace(_current_table(text), expected_table(), 1))
