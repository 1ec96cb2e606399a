"""The code blocks of README.md and of the documentation pages (docs/) as the tests run them.

A fenced block is taken as it is written. A comment on the line just before its fence
says how a test uses it::

    <!-- readme-test -->                  Python run as written (tests/test_readme.py),
                                          in README.md and in any page of docs/
    <!-- readme-test: spark-history -->   Python run against the demo's archive
    <!-- readme-test: skip: REASON -->    not run here; the test reports REASON
    <!-- readme-test: migrating-after -->  the migration guide's "after" code and commands
                                          (tests/docs/test_migrating.py)

The tutorial's pages have marks of their own (tests/support/tutorial.py).

Shell blocks of a section are run command by command (tests/pipeline/
test_readme_spark.py reads docs/howto/history.md): a command is a line, or lines joined
by a trailing backslash; comments and blank lines are dropped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# The info string whole: a MyST directive's (```{include}) too, so that its closing
# fence is never taken for the opening of the next block.
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```$", re.S | re.M)
_MARK = re.compile(r"<!--\s*readme-test(?::\s*(.*?))?\s*-->\s*$")
_HEADING = re.compile(r"^(#{1,6}) (.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block."""

    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    mark: str | None  # None: no readme-test comment; "" a bare one; else its text

    @property
    def skip_reason(self) -> str | None:
        """The reason given by a ``skip: REASON`` mark."""
        if self.mark and self.mark.startswith("skip:"):
            return self.mark.removeprefix("skip:").strip()
        return None


def blocks(text: str, first_line: int = 1) -> list[Block]:
    """The fenced blocks of ``text`` with the marks on the lines before them."""
    out = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        out.append(
            Block(
                lang=match[1].strip(),
                code=match[2],
                line=first_line + text[: match.start()].count("\n"),
                mark=None if mark is None else (mark[1] or ""),
            )
        )
    return out


def section(title: str, text: str | None = None, path: Path = README) -> tuple[str, int]:
    """The section headed ``title`` (at any level) of ``path``'s Markdown, or of ``text``,
    up to the next heading of the same or a higher level, and the line it starts on.

    Raises:
        ValueError: no heading ``title`` (outside code blocks).
    """
    where = "the text" if text is not None else str(path)
    text = path.read_text(encoding="utf-8") if text is None else text
    lines = text.split("\n")
    start = level = None
    fenced = False
    for n, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            continue
        if start is None and heading[2].strip() == title:
            start, level = n, len(heading[1])
        elif start is not None and level is not None and len(heading[1]) <= level:
            return "\n".join(lines[start:n]) + "\n", start + 1
    if start is None:
        raise ValueError(f"no heading {title!r} in {where}")
    return "\n".join(lines[start:]), start + 1


def pages() -> list[Path]:
    """Every Markdown page of the documentation site (docs/), built output left out."""
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)


def shell_commands(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped."""
    commands, current = [], ""
    for raw in code.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        words = shlex.split(current, comments=True)
        if words:
            commands.append(shlex.join(words))
        current = ""
    return commands
