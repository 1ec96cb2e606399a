"""The README's code blocks as the tests run them.

A fenced block is taken as it is written. A comment on the line just before its fence
says how a test uses it::

    <!-- readme-test -->                  the quick start (tests/test_readme.py)
    <!-- readme-test: spark-history -->   Python run against the demo's archive
    <!-- readme-test: skip: REASON -->    not run here; the test reports REASON

Shell blocks of a section are run command by command (tests/pipeline/
test_readme_spark.py): a command is a line, or lines joined by a trailing backslash;
comments and blank lines are dropped.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
_MARK = re.compile(r"<!--\s*readme-test(?::\s*(.*?))?\s*-->\s*$")


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
                lang=match[1],
                code=match[2],
                line=first_line + text[: match.start()].count("\n"),
                mark=None if mark is None else (mark[1] or ""),
            )
        )
    return out


def section(title: str, text: str | None = None) -> tuple[str, int]:
    """The text of the ``## title`` section (up to the next ``## `` heading) and the
    line it starts on."""
    text = README.read_text() if text is None else text
    start = text.index(f"\n## {title}\n") + 1
    end = text.find("\n## ", start)
    body = text[start : end if end >= 0 else len(text)]
    return body, text[:start].count("\n") + 1


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
