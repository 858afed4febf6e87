"""ASCEND_RT_VISIBLE_DEVICES read the way CANN documents it: logical ids, commas only,
ascending, reading stops at the first bad id."""

from __future__ import annotations

import pytest

from ascend_core.visible_devices import visible_devices


def test_unset_means_every_device() -> None:
    v = visible_devices(None, 4)
    assert (v.ids, v.problem) == ((0, 1, 2, 3), None)
    assert v.describe() == "ASCEND_RT_VISIBLE_DEVICES unset: all 4 device(s)"


def test_unset_with_an_unknown_count_is_all_devices() -> None:
    v = visible_devices(None, None)
    assert v.ids is None and not v.none_visible and v.problem is None


def test_ids_are_logical_whatever_the_davinci_numbers() -> None:
    # A container given /dev/davinci4 and /dev/davinci5 has 2 devices: logical ids 0 and 1.
    v = visible_devices("0,1", 2)
    assert (v.ids, v.problem) == ((0, 1), None)
    assert "2 of 2 device(s), logical ids [0, 1] seen as 0..1" in v.describe()
    far = visible_devices("4,5", 2)
    assert far.none_visible
    assert far.problem is not None and "[4, 5] out of range" in far.problem
    assert "not the N of /dev/davinci<N>" in far.problem
    assert far.hint == "use ids below 2, or unset ASCEND_RT_VISIBLE_DEVICES"


def test_a_subset_is_renumbered_from_zero() -> None:
    v = visible_devices("4,5,6,7", 8)
    assert v.ids == (4, 5, 6, 7) and v.problem is None
    assert "4 of 8 device(s)" in v.describe() and "seen as 0..3" in v.describe()


@pytest.mark.parametrize(
    ("raw", "used", "fragment"),
    [
        ("1, 2,3", (1,), "' 2' is not a device id; CANN stops reading there"),
        ("0,a,1", (0,), "'a' is not a device id"),
        ("1,2,-1,3", (1, 2), "'-1' is not a device id"),
        ("0,8,1", (0,), "[8] out of range; 8 device(s) here (ids 0..7)"),
    ],
)
def test_reading_stops_at_the_first_bad_id(raw: str, used: tuple[int, ...], fragment: str) -> None:
    v = visible_devices(raw, 8)
    assert v.ids == used
    assert v.problem is not None and fragment in v.problem


def test_empty_hides_every_device() -> None:
    v = visible_devices("", 8)
    assert v.none_visible and v.problem is not None and "empty" in v.problem


def test_duplicates_and_descending_order_are_problems_with_the_fixed_value() -> None:
    twice = visible_devices("0,1,1", 8)
    assert twice.problem is not None and "[1] listed twice" in twice.problem
    assert twice.hint.endswith("=0,1")
    down = visible_devices("3,2", 8)
    assert down.problem is not None and "ascending" in down.problem
    assert down.hint.endswith("=2,3")


def test_without_a_count_only_the_syntax_is_checked() -> None:
    v = visible_devices("12", None)
    assert (v.ids, v.problem) == ((12,), None)


def test_no_device_at_all() -> None:
    assert visible_devices(None, 0).describe().endswith("(no device here)")
    v = visible_devices("0", 0)
    assert v.none_visible and v.problem is not None and "(none)" in v.problem
