"""The README is for users: at most 300 lines holding what a user needs, its commands
runnable as written with the venv's programs, its links (and the docs' links) resolving,
and no development history (that lives in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")

# What a user needs, in this order (the headings' starts).
SECTIONS = (
    "What has run where",
    "Install",
    "The two commands",
    "Serving on the host",
    "Serving on an Ascend NPU",
    "The emulated NPU",
    "The doctor",
    "What this build serves",
    "Configuration",
)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def _section(heading_start: str) -> str:
    (section,) = [s for s in README.split("\n## ")[1:] if s.startswith(heading_start)]
    return section


def _fences(text: str) -> list[tuple[str, str]]:
    """Each fenced block as (its language, its body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)


def _commands(text: str, language: str) -> list[str]:
    """The command lines of the blocks in `language`: continuations joined, comments dropped."""
    return [
        line.split(" #", 1)[0].strip()
        for lang, body in _fences(text)
        if lang == language
        for line in body.replace("\\\n", " ").splitlines()
        if line.strip()
    ]


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.splitlines()) <= 300


def test_the_readme_has_what_a_user_needs_in_order() -> None:
    headings = re.findall(r"^## (.+)$", README, flags=re.M)
    found = [next(i for i, h in enumerate(headings) if h.startswith(s)) for s in SECTIONS]
    assert found == sorted(found), headings


def test_what_has_run_where_comes_first_and_says_nothing_ran_on_ascend_hardware() -> None:
    assert re.findall(r"^## (.+)$", README, flags=re.M)[0] == "What has run where"
    section = _section("What has run where")
    assert "Nothing in this repository has run on Ascend hardware" in section
    assert "| an Ascend NPU | nothing |" in section


def test_the_two_commands_are_there() -> None:
    commands = _commands(_section("The two commands"), "sh")
    assert commands[:2] == ["make test", "make serve"], commands


def test_install_names_the_system_package_make_venv_cannot_install() -> None:
    commands = _commands(_section("Install"), "sh")
    assert "make venv" in commands and "apt-get install libibverbs1" in commands, commands
    assert "libibverbs" in (ROOT / "docs" / "install.md").read_text(encoding="utf-8")


def test_every_code_block_is_commands_or_output() -> None:
    """`sh` blocks are commands (checked below), `text` blocks output: none hides between."""
    for page in [ROOT / "README.md", *DOCS]:
        text = page.read_text(encoding="utf-8")
        blocks = _fences(text)
        assert {lang for lang, _ in blocks} <= {"sh", "text"}, (page.name, blocks)
        # Every fence was read as a block (an odd fence would unbalance them).
        assert text.count("\n```") == 2 * len(blocks), page.name


def test_commands_run_the_venv_programs_and_serve_on_loopback() -> None:
    """A `vllm` or `ascend-doctor` elsewhere on PATH does not see this plugin."""
    commands = _commands(README, "sh")
    for doc in DOCS:  # the pages the README hands its longer recipes to
        commands += _commands(doc.read_text(encoding="utf-8"), "sh")
    assert sum("vllm serve" in line for line in commands) >= 4
    for line in commands:
        line = re.sub(r"<[^>]*>", "", line)  # docs' <placeholders>
        for program in ("vllm serve", "ascend-doctor "):
            if program in line:
                assert f".venv/bin/{program}" in line, line
        if "vllm serve" in line:
            assert "--host 127.0.0.1" in line, line


def test_the_readme_commands_are_runnable_as_written() -> None:
    """No placeholders, no optional-argument brackets; every make target and file exists."""
    targets = set(re.findall(r"^([\w-]+):", MAKEFILE, flags=re.M))
    for line in _commands(README, "sh"):
        assert not re.search(r"<[^>]*>|\[--|\bMODEL\b|\.\.\.", line), line
        for target in re.findall(r"\bmake (\w[\w-]*)", line):
            assert target in targets, line
        for path in re.findall(r"\b((?:scripts|examples)/[\w/.-]+\.py)\b", line):
            assert (ROOT / path).is_file(), line
    # `make model` makes the model directory the commands serve.
    assert "MODEL_DIR ?= models/$(MODEL_SIZE)-$(MODEL_STYLE)" in MAKEFILE
    assert "MODEL_STYLE ?= llama" in MAKEFILE and "MODEL_SIZE ?= tiny" in MAKEFILE


def test_every_relative_link_names_a_file_or_heading_that_exists() -> None:
    """In the README and in every page of docs/, heading anchors included."""
    pages = [ROOT / "README.md", *DOCS]
    checked = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.exists(), (page.name, link)
            if anchor and target.suffix == ".md":
                assert anchor in _anchors(target.read_text(encoding="utf-8")), (page.name, link)
            checked += 1
    assert checked > len(pages)


def test_every_doc_under_docs_is_linked_from_the_readme() -> None:
    for doc in DOCS:
        assert f"](docs/{doc.name})" in README, doc.name


def test_no_development_history_in_the_readme() -> None:
    for pattern in (r"\bRound \d+", r"\bissue \d+", r"\bsession"):
        assert not re.search(pattern, README, flags=re.I), pattern
