"""ASCEND_RT_VISIBLE_DEVICES as CANN reads it: which NPUs a process may use, and what is wrong.

One rule for the doctor's preflight and the NPU probe. CANN's environment-variable
reference: the ids are the devices' logical ids, 0..count-1 of the devices the driver
exposes to this host or container (not the N of /dev/davinci<N>, which is the physical
id); the process renumbers the listed devices 0, 1, ...; ids are separated by commas
only, in ascending order, and reading stops at the first other character or invalid id.
"""

from __future__ import annotations

import re

from attrs import frozen

VISIBLE_DEVICES_VARIABLE = "ASCEND_RT_VISIBLE_DEVICES"
_ID = re.compile(r"[0-9]+")


@frozen
class VisibleDevices:
    """The devices a process may use, and what (if anything) is wrong with the variable.

    ids: the logical ids the runtime uses, in the order the process numbers them 0, 1, ...;
        None when the variable is unset and the device count is unknown (all devices).
    problem: what is wrong with the variable, None when nothing is; hint: the fix.
    """

    raw: str | None
    device_count: int | None
    ids: tuple[int, ...] | None
    problem: str | None = None
    hint: str = ""

    @property
    def none_visible(self) -> bool:
        return self.ids is not None and not self.ids

    def describe(self) -> str:
        """What the process sees, for a report line or a log."""
        count = f"{self.device_count} device(s)" if self.device_count is not None else "devices"
        if self.raw is None:
            if self.device_count == 0:
                return f"{VISIBLE_DEVICES_VARIABLE} unset (no device here)"
            return f"{VISIBLE_DEVICES_VARIABLE} unset: all {count}"
        ids = list(self.ids or ())
        return (
            f"{VISIBLE_DEVICES_VARIABLE}={self.raw}: {len(ids)} of {count}, logical ids {ids} "
            f"seen as 0..{len(ids) - 1} in the process"
        )


def visible_devices(raw: str | None, device_count: int | None) -> VisibleDevices:
    """Apply CANN's reading of ASCEND_RT_VISIBLE_DEVICES to a host with `device_count` NPUs.

    `device_count`: the devices the driver exposes (the /dev/davinci<N> nodes present),
    None when unknown, in which case ids are checked for syntax only.
    """
    if raw is None:
        every = None if device_count is None else tuple(range(device_count))
        return VisibleDevices(raw, device_count, every)
    tokens = raw.split(",")
    used: list[int] = []
    for token in tokens:  # CANN's reading: up to the first token that is not a usable id
        if not _ID.fullmatch(token) or (device_count is not None and int(token) >= device_count):
            break
        used.append(int(token))
    problem, hint = _problem(raw, tokens, device_count, used)
    return VisibleDevices(raw, device_count, tuple(used), problem, hint)


def _problem(
    raw: str, tokens: list[str], device_count: int | None, used: list[int]
) -> tuple[str | None, str]:
    var = VISIBLE_DEVICES_VARIABLE
    if not raw.strip():
        return (
            f"{var} is set but empty: no device is visible",
            f"unset {var} or list device ids, e.g. {var}=0,1",
        )
    bad = [t for t in tokens if not _ID.fullmatch(t)]
    if bad:
        return (
            f"{var}={raw!r}: {', '.join(repr(b) for b in bad)} is not a device id; CANN stops "
            f"reading there, so the process sees only {used}",
            f"list non-negative integer ids separated by commas, no spaces, e.g. {var}=0,1",
        )
    ids = [int(t) for t in tokens]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        return (
            f"{var}={raw}: id(s) {duplicates} listed twice; two ranks would share one device",
            f"list each id once: {var}={','.join(str(i) for i in sorted(set(ids)))}",
        )
    if device_count is not None:
        out = [i for i in ids if i >= device_count]
        if out:
            here = f"ids 0..{device_count - 1}" if device_count else "none"
            return (
                f"{var}={raw}: id(s) {out} out of range; {device_count} device(s) here ({here}); "
                "the ids are logical (0..count-1 of the devices this host or container "
                "exposes), not the N of /dev/davinci<N>",
                f"use ids below {device_count}, or unset {var}",
            )
    if ids != sorted(ids):
        return (
            f"{var}={raw}: ids not in ascending order, which CANN does not support",
            f"list them in ascending order: {var}={','.join(str(i) for i in sorted(ids))}",
        )
    return None, ""
