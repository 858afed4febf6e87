"""Every `additional_config` key with what it accepts, its default and its doc, for the doctor."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import frozen

from ascend_core.ascend_config.fields import SectionSpec, specs_of
from ascend_core.ascend_config.schema import AscendConfig


@frozen
class KeyDoc:
    """One key: its dotted path under additional_config, accepted values, default, doc."""

    path: str
    expected: str
    default: object
    doc: str


def describe_keys(schema: type[Any] = AscendConfig, prefix: str = "") -> tuple[KeyDoc, ...]:
    """Each scalar key of `schema` and its sections, depth first in declaration order."""
    defaults = {f.name: f.default for f in attrs.fields(schema)}
    rows: list[KeyDoc] = []
    for name, spec in specs_of(schema).items():
        path = f"{prefix}{name}"
        if isinstance(spec, SectionSpec):
            rows.extend(describe_keys(spec.schema, f"{path}."))
        else:
            rows.append(KeyDoc(path, spec.expected(), defaults[name], spec.doc))
    return tuple(rows)
