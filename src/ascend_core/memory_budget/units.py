"""Byte units and how sizes are shown to a person."""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20


def format_bytes(n: int) -> str:
    """Bytes for a person: GiB above one GiB, MiB above one MiB, else KiB or bytes."""
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a >= GIB:
        return f"{sign}{a / GIB:.2f} GiB"
    if a >= MIB:
        return f"{sign}{a / MIB:.1f} MiB"
    if a >= 1024:
        return f"{sign}{a / 1024:.1f} KiB"
    return f"{sign}{a} B"


def exact_bytes(n: int) -> str:
    """The exact count, which a user may pass back as a flag, then the readable size."""
    return f"{n} B ({format_bytes(n)})"
