"""The tutorial's pages (docs/tutorial) as one shell script, for tests/docs/test_tutorial.py.

A comment on the line just before a fenced block says what the block is::

    <!-- tutorial: run -->              shell commands, run in order in one bash
    <!-- tutorial: file PATH -->        the whole text of PATH (relative to the project)
    <!-- tutorial: append PATH -->      text added at the end of PATH
    <!-- tutorial: output -->           lines the commands before it print (each one whole)
    <!-- tutorial: skip: REASON -->     not run (long-running, interactive, or the test's job)

Every block of a tutorial page carries one: an unmarked block is an error, so the page
cannot show a step the test does not take (or say why it does not).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.support.readme import DOCS

#: The pages in the order a reader follows them (the example project's page is not
#: part of the run: it works in a clone of the repository, ``make demo`` runs it).
PAGES = tuple(DOCS / "tutorial" / page for page in ("install.md", "first-steps.md", "testing.md"))

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```$", re.S | re.M)
_MARK = re.compile(r"<!--\s*tutorial:\s*(run|file|append|output|skip)(?::|\s)?\s*(.*?)\s*-->\s*$")
#: Where the script installs the wheel under test instead of the package from PyPI.
INSTALL = "pip install redisq-django"
_EOF = "REDISQ_TUTORIAL_EOF"


@dataclass(frozen=True)
class Step:
    """One marked block of a tutorial page."""

    kind: str  # run, file, append, output, skip
    arg: str  # the path (file, append), the reason (skip), else ""
    code: str
    where: str  # page:line, for messages


def steps(pages: tuple[Path, ...] = PAGES) -> list[Step]:
    """Every fenced block of ``pages``, in order.

    Raises:
        ValueError: a block without a ``tutorial:`` mark, or a file mark without a path.
    """
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            where = f"{page.relative_to(DOCS)}:{line}"
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = _MARK.search(before)
            if mark is None:
                raise ValueError(f"{where}: a block without a <!-- tutorial: … --> mark")
            kind, arg = mark[1], mark[2]
            if kind in ("file", "append") and not arg:
                raise ValueError(f"{where}: '{kind}' needs a path")
            found.append(Step(kind=kind, arg=arg, code=match[2], where=where))
    return found


def script(found: list[Step], wheel: Path) -> str:
    """A bash script that takes the steps in order: files written with here-documents,
    commands as written, except that the package comes from ``wheel``.

    Raises:
        ValueError: no step installs the package as the page tells a reader to.
    """
    # Each traced command with the time it started, for a failure's log.
    lines = ["set -euxo pipefail", "PS4='+ ${EPOCHREALTIME} '"]
    installs = 0
    for step in found:
        lines.append(f": {shlex.quote(step.where)}")
        if step.kind == "run":
            for command in step.code.splitlines():
                if command.strip() == INSTALL:
                    installs += 1
                    command = f"pip install {shlex.quote(str(wheel))}"
                lines.append(command)
        elif step.kind in ("file", "append"):
            assert _EOF not in step.code
            path = shlex.quote(step.arg)
            lines.append(f'mkdir -p "$(dirname {path})"')
            lines.append(f"cat {'>' if step.kind == 'file' else '>>'} {path} <<'{_EOF}'")
            lines.append(step.code.rstrip("\n"))
            lines.append(_EOF)
    if installs != 1:
        raise ValueError(f"the tutorial runs {INSTALL!r} {installs} times, not once")
    return "\n".join(lines) + "\n"


def outputs(found: list[Step]) -> list[str]:
    """The lines the ``output`` blocks show, in order."""
    return [line for s in found if s.kind == "output" for line in s.code.splitlines() if line]
