"""The `quantization` section: the method the model files and the arguments ask for."""

from __future__ import annotations

from adapters.doctor.plan.items import PASS, WARN, failed
from adapters.doctor.serve_args import ServeArgs
from ascend_core.errors import AscendError
from ascend_core.preflight import CheckItem
from ascend_core.quantization import QuantDetection, detect_quantization
from ports.model_files import ModelFiles


def quantization_items(
    files: ModelFiles, args: ServeArgs
) -> tuple[list[CheckItem], QuantDetection | None]:
    """The detected method and its evidence, or why detection failed (then no detection)."""
    try:
        detection = detect_quantization(files, args.quantization)
    except AscendError as error:
        return failed("method", error), None
    items = [
        CheckItem(
            "method",
            PASS,
            f"{detection.method.value}, {detection.decided_by.value}: {detection.evidence}",
        )
    ]
    items += [CheckItem("warning", WARN, w) for w in detection.warnings]
    return items, detection
