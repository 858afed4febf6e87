"""Did-you-mean suggestions for misspelled keys and variable names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """' Did you mean X?' for the closest known name, or '' when none is close."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" Did you mean '{matches[0]}'?" if matches else ""
