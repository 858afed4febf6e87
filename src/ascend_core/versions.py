"""Version numbers and ranges: the small subset of PEP 440 the registry and compatibility need."""

from __future__ import annotations

import enum
import re

from attrs import field, frozen

# Release, then an optional pre-release (a, b, rc, or CANN's ".RC"), .postN, .devN, +local.
_VERSION = re.compile(
    r"""
    ^\s*v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[.\-_]?(?P<pre_kind>a|alpha|b|beta|rc|c)[.\-_]?(?P<pre_n>\d*))?
    (?:[.\-_]?post[.\-_]?(?P<post>\d*))?
    (?:[.\-_]?dev[.\-_]?(?P<dev>\d*))?
    (?:\+[a-z0-9.]+)?
    \s*$
    """,
    re.VERBOSE | re.IGNORECASE,
)
_PRE_KINDS = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "rc": "rc", "c": "rc"}
# Ordering of what follows a release: dev < a < b < rc < final.
_PRE_ORDER = {"dev": 0, "a": 1, "b": 2, "rc": 3, "final": 4}


@frozen(eq=False)
class Version:
    """A parsed version; compares like PEP 440 (2.14 == 2.14.0; local labels like +cpu ignored)."""

    release: tuple[int, ...]
    pre: tuple[str, int] | None = None
    post: int | None = None
    dev: int | None = None
    text: str = field(default="", eq=False)

    @classmethod
    def parse(cls, text: str) -> Version | None:
        """The version `text` spells, or None when it is not one."""
        if not isinstance(text, str) or len(text) > 200:
            return None
        m = _VERSION.match(text)
        if m is None:
            return None
        release = tuple(int(p) for p in m["release"].split("."))
        pre = None
        if m["pre_kind"]:
            pre = (_PRE_KINDS[m["pre_kind"].lower()], int(m["pre_n"] or 0))
        post = int(m["post"] or 0) if m["post"] is not None else None
        dev = int(m["dev"] or 0) if m["dev"] is not None else None
        return cls(release, pre, post, dev, text.strip())

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    def _key(self) -> tuple[object, ...]:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()  # 2.14 == 2.14.0
        if self.pre is not None:
            pre: tuple[int, int] = (_PRE_ORDER[self.pre[0]], self.pre[1])
        elif self.dev is not None and self.post is None:
            pre = (_PRE_ORDER["dev"], self.dev)  # 1.0.dev1 sorts before 1.0a1
        else:
            pre = (_PRE_ORDER["final"], 0)
        post = -1 if self.post is None else self.post
        dev = float("inf") if self.dev is None else self.dev
        return (tuple(release), pre, post, dev)

    def base_release(self) -> tuple[int, ...]:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        return tuple(release)

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Version) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Version) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Version) -> bool:
        return self._key() >= other._key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text or ".".join(str(p) for p in self.release)


class Operator(enum.Enum):
    """The comparison operators a range clause may use."""

    EQ = "=="
    NE = "!="
    GE = ">="
    LE = "<="
    GT = ">"
    LT = "<"


_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*(\S+)\s*$")


@frozen
class Clause:
    """One `<op><version>` of a range."""

    op: Operator
    version: Version

    def admits(self, candidate: Version) -> bool:
        v = self.version
        if self.op is Operator.EQ:
            return candidate == v
        if self.op is Operator.NE:
            return candidate != v
        if self.op is Operator.GE:
            return candidate >= v
        if self.op is Operator.LE:
            return candidate <= v
        if self.op is Operator.GT:
            # PEP 440: >1.0 does not admit 1.0.post1.
            return candidate > v and not (
                candidate.post is not None and candidate.base_release() == v.base_release()
            )
        # `<0.34` must not admit 0.34.0rc1: a pre-release of the excluded bound.
        return candidate < v and not (
            candidate.is_prerelease
            and not v.is_prerelease
            and candidate.base_release() == v.base_release()
        )

    def __str__(self) -> str:
        return f"{self.op.value}{self.version}"


@frozen
class VersionRange:
    """A comma-separated conjunction of clauses, e.g. `>=0.33.0,<0.34`."""

    clauses: tuple[Clause, ...]

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse `text`; raises ValueError naming the bad clause (a registry authoring error)."""
        clauses = []
        for part in text.split(","):
            m = _CLAUSE.match(part)
            version = Version.parse(m.group(2)) if m else None
            if m is None or version is None:
                raise ValueError(
                    f"version range {text!r}: clause {part.strip()!r} is not "
                    "<op><version> with op one of == != >= <= > <"
                )
            clauses.append(Clause(Operator(m.group(1)), version))
        return cls(tuple(clauses))

    def admits(self, candidate: Version) -> bool:
        return all(c.admits(candidate) for c in self.clauses)

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.clauses)


def to_range(value: str | VersionRange) -> VersionRange:
    """attrs converter: accept a range or its text."""
    return value if isinstance(value, VersionRange) else VersionRange.parse(value)
