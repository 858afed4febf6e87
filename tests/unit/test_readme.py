"""The README is for users: its links resolve, its commands use the venv's programs, and it
carries no development history (that lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_names_a_file_or_heading_that_exists() -> None:
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    links = re.findall(r"\]\(([^)]+)\)", README)
    assert links
    for link in links:
        if link.startswith("http"):
            continue
        if link.startswith("#"):
            assert link[1:] in anchors, link
        else:
            assert (ROOT / link.split("#")[0]).exists(), link


def test_every_doc_under_docs_is_linked_from_the_readme() -> None:
    for doc in (ROOT / "docs").glob("*.md"):
        assert f"](docs/{doc.name})" in README, doc.name


def test_no_development_history_in_the_readme() -> None:
    for pattern in (r"\bRound \d+", r"\bissue \d+", r"\bsession"):
        assert not re.search(pattern, README, flags=re.I), pattern


def test_commands_run_the_venv_programs_and_serve_on_loopback() -> None:
    """A `vllm` or `ascend-doctor` elsewhere on PATH does not see this plugin."""
    blocks = re.findall(r"```\n(.*?)```", README, flags=re.S)
    commands = [
        re.sub(r"<[^>]*>", "", line.split(" #", 1)[0])  # no comments, no <placeholders>
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
    ]
    assert any("vllm serve" in line for line in commands)
    for line in commands:
        for program in ("vllm serve", "ascend-doctor "):
            if program in line:
                assert f".venv/bin/{program}" in line, line
        if "vllm serve" in line:
            assert "--host 127.0.0.1" in line, line
