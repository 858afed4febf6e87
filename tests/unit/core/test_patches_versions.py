"""The registry's version parsing and ranges (a PEP 440 subset, no `packaging`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_core.patches import Version, VersionRange


def v(text: str) -> Version:
    parsed = Version.parse(text)
    assert parsed is not None, text
    return parsed


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("0.33.0", "0.33.1"),
        ("0.33.0", "0.34"),
        ("0.9.0", "0.10.0"),
        ("0.34.0rc1", "0.34.0"),
        ("0.34.0rc1", "0.34.0rc2"),
        ("0.34.0a1", "0.34.0b1"),
        ("0.34.0b1", "0.34.0rc1"),
        ("0.34.0.dev1", "0.34.0a1"),
        ("0.34.0", "0.34.0.post1"),
        ("0.34.0.post1", "0.34.0.post2"),
        ("2.14.0", "2.14.0.post1"),
        ("8.3.RC1", "8.3.0"),
    ],
)
def test_order(lower: str, higher: str) -> None:
    assert v(lower) < v(higher)
    assert v(higher) > v(lower)
    assert v(lower) != v(higher)


@pytest.mark.parametrize(
    ("a", "b"),
    [("2.14", "2.14.0"), ("2.13.0+cpu", "2.13.0"), ("v1.0", "1.0"), ("1.0RC1", "1.0rc1")],
)
def test_equal_spellings(a: str, b: str) -> None:
    assert v(a) == v(b)
    assert hash(v(a)) == hash(v(b))


@pytest.mark.parametrize("text", ["", "abc", "1.x", "1..2", "latest", "1.0 2.0"])
def test_not_a_version(text: str) -> None:
    assert Version.parse(text) is None


def test_prerelease_flags() -> None:
    assert v("0.34.0rc1").is_prerelease
    assert v("0.34.0.dev3").is_prerelease
    assert not v("0.34.0.post1").is_prerelease


@pytest.mark.parametrize(
    ("spec", "admitted", "refused"),
    [
        (">=0.33.0,<0.34", ["0.33.0", "0.33.2", "0.33.9.post1"], ["0.32.9", "0.34.0", "0.34.0rc1"]),
        ("==0.33.0", ["0.33.0", "0.33"], ["0.33.1", "0.33.0.post1"]),
        ("!=0.33.1", ["0.33.0"], ["0.33.1"]),
        (">0.33.0", ["0.33.1"], ["0.33.0", "0.33.0.post1"]),
        ("<=0.33.0", ["0.33.0", "0.32.0"], ["0.33.1"]),
        ("<0.34rc2", ["0.34rc1"], ["0.34rc2"]),
    ],
)
def test_range(spec: str, admitted: list[str], refused: list[str]) -> None:
    r = VersionRange.parse(spec)
    for text in admitted:
        assert r.admits(v(text)), text
    for text in refused:
        assert not r.admits(v(text)), text


@pytest.mark.parametrize("spec", ["", "0.33.0", "~=0.33", ">=0.33,", "=>0.33", ">=x"])
def test_bad_range_is_a_value_error_naming_the_clause(spec: str) -> None:
    with pytest.raises(ValueError, match="version range"):
        VersionRange.parse(spec)


def test_range_text_round_trips() -> None:
    assert str(VersionRange.parse(" >=0.33.0 , <0.34 ")) == ">=0.33.0,<0.34"


@given(st.text(max_size=40))
def test_parse_never_raises(text: str) -> None:
    parsed = Version.parse(text)
    if parsed is not None:
        assert parsed == parsed
