"""CHANGELOG.md stays scannable: Keep a Changelog form, one line per user-visible change.

The rules (CONTRIBUTING.md, "Changelog"): ``## [Unreleased]`` first, then released
versions newest first as ``## [X.Y.Z] - YYYY-MM-DD``; inside each, only ``### Added``,
``### Changed``, ``### Deprecated``, ``### Removed``, ``### Fixed``, in that order; every
entry one bullet on one line of at most 250 characters, without test paths or benchmark
figures (those go to the commit message and ``bench/RESULTS.md``).

Run it on another file with ``python tests/test_changelog.py PATH``.
"""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

import pytest

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"

#: Keep a Changelog's sections we use, in the order they must appear in a version.
SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed")
#: The hard limit of one entry's line; aim for about 160.
MAX_BULLET = 250

_UNRELEASED = "## [Unreleased]"
_RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")
_LINK_DEFINITION = re.compile(r"^\[[^\]]+\]: \S+$")
_TEST_PATH = re.compile(r"\btests/")
# A benchmark figure: a ratio (0.54x, 2.5-3x, or with the multiplication sign), an
# approximate or sub-millisecond timing (~25 s, 12 µs), a percentile (p99) or a rate
# (8,215 msg/s). Defaults and bounds such as "default 600 s" or "at most 512 MiB" are
# behaviour and stay allowed.
_FIGURE = re.compile(
    r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s*[-\u2013]\s*\d+(?:[.,]\d+)?)?\s?[x\u00d7](?!\w)"
    r"|~\s?\d[\d.,]*\s*(?:ns|µs|us|ms|s|min)\b"
    r"|\d\s*(?:ns|µs|us)\b"
    r"|\bp(?:50|90|95|99|999)\b"
    r"|\d\s*k?\s*(?:msg|messages|ops|rows|events)/s\b"
)

_MOVE_FIGURES = "the figure goes to bench/RESULTS.md (with how it was measured), not here"


def problems(text: str, name: str = "CHANGELOG.md") -> list[str]:
    """Every way ``text`` departs from the changelog's form, each saying what to fix.

    Args:
        text: the changelog's Markdown.
        name: the file name the messages start with.

    Returns:
        One message per problem, ``NAME:LINE: what is wrong: what to do``; empty when
        the changelog follows the form.
    """
    out: list[str] = []

    def report(number: int, message: str) -> None:
        out.append(f"{name}:{number}: {message}")

    lines = text.splitlines()
    if not lines or lines[0] != "# Changelog":
        report(1, "the first line must be '# Changelog'")
    seen_unreleased = False
    last_release: tuple[tuple[int, int, int], datetime.date] | None = None
    version: str | None = None  # the version heading we are in
    section: str | None = None  # the section heading we are in
    section_line = 0
    section_bullets = 0
    section_index = -1

    def close_section() -> None:
        if section is not None and section_bullets == 0:
            report(section_line, f"'### {section}' has no entries: remove the heading")

    for number, line in enumerate(lines, start=1):
        if line.startswith("## "):
            close_section()
            section, section_index = None, -1
            if line == _UNRELEASED:
                if seen_unreleased:
                    report(number, "a second '## [Unreleased]': keep one, at the top")
                elif version is not None:
                    report(number, "'## [Unreleased]' must come before every released version")
                seen_unreleased = True
                version = "Unreleased"
            else:
                match = _RELEASE.match(line)
                if match is None:
                    report(
                        number,
                        f"malformed version heading {line!r}: write '## [Unreleased]' or "
                        "'## [X.Y.Z] - YYYY-MM-DD'",
                    )
                    version = line
                else:
                    release = (int(match[1]), int(match[2]), int(match[3]))
                    try:
                        date = datetime.date.fromisoformat(match[4])
                    except ValueError:
                        report(number, f"{match[4]!r} is not a date: write YYYY-MM-DD")
                        date = datetime.date.min
                    if not seen_unreleased:
                        report(number, "'## [Unreleased]' is missing above the first version")
                        seen_unreleased = True  # say it once
                    if last_release is not None and (
                        release >= last_release[0] or date > last_release[1]
                    ):
                        report(
                            number,
                            f"version {line[3:]} is out of order: newest first, each "
                            "version and date below the one above",
                        )
                    last_release = (release, date)
                    version = line
        elif line.startswith("### "):
            close_section()
            title = line[4:]
            section, section_line, section_bullets = title, number, 0
            if version is None:
                report(number, f"'{line}' stands above every version: put it under one")
            if title not in SECTIONS:
                report(
                    number,
                    f"section {title!r} is not one of {', '.join(SECTIONS)}: move its "
                    "entries into one of them",
                )
            else:
                index = SECTIONS.index(title)
                if index <= section_index:
                    report(
                        number,
                        f"section {title!r} is out of order or repeated: the order is "
                        f"{', '.join(SECTIONS)}, each once per version",
                    )
                section_index = max(section_index, index)
        elif line.startswith("#"):
            if number > 1:
                report(number, f"heading {line!r}: use '## ' for versions, '### ' for sections")
        elif not line.strip() or _LINK_DEFINITION.match(line):
            pass
        elif section is None:
            pass  # prose under the title or a version heading is allowed
        elif line.startswith("- "):
            section_bullets += 1
            if len(line) > MAX_BULLET:
                report(
                    number,
                    f"entry of {len(line)} characters (at most {MAX_BULLET}, ideally ~160): "
                    "say the change, leave the details to the docs and the commit message",
                )
        elif line[:1].isspace() or lines[number - 2].startswith("- "):
            report(
                number,
                "entry spans more than one line: one line per change (join the lines, "
                "or make it two changes)",
            )
        else:
            report(number, "text that is not an entry inside a section: write it as '- …'")
        if section is not None and line.strip() and not line.startswith("#"):
            if _TEST_PATH.search(line):
                report(number, "entry names a test path (tests/…): leave it to the commit message")
            figure = _FIGURE.search(line)
            if figure is not None:
                report(number, f"entry quotes a benchmark figure {figure[0]!r}: {_MOVE_FIGURES}")
    close_section()
    if not seen_unreleased:
        report(1, "'## [Unreleased]' is missing: add it above the first version")
    return out


def test_the_changelog_follows_its_form() -> None:
    # Given the repository's changelog, when it is checked, then nothing is wrong.
    found = problems(CHANGELOG.read_text(encoding="utf-8"))

    assert found == [], "CHANGELOG.md departs from its form (CONTRIBUTING.md):\n" + "\n".join(found)


GOOD = """\
# Changelog

Intro text.

## [Unreleased]

### Added

- A thing.

### Fixed

- A bug.

## [0.2.0] - 2026-12-01

Some words about the release.

### Changed

- `old_name` is `new_name`.

## [0.1.0] - 2026-11-22

### Added

- First version, default 600 s, at most 512 MiB, `"0x5"` undecodable.

[Unreleased]: https://example.org/compare/v0.2.0...HEAD
"""


def test_a_changelog_in_form_passes() -> None:
    assert problems(GOOD) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("## [Unreleased]\n", "", "'## [Unreleased]' is missing"),
        ("## [0.2.0] - 2026-12-01", "## 0.2.0 (2026-12-01)", "malformed version heading"),
        ("## [0.2.0] - 2026-12-01", "## [0.2.0] - 2026-13-01", "is not a date"),
        ("## [0.2.0] - 2026-12-01", "## [0.0.9] - 2026-12-01", "out of order: newest first"),
        ("## [0.2.0] - 2026-12-01", "## [0.2.0] - 2026-11-01", "out of order: newest first"),
        ("### Fixed", "### Security", "is not one of Added"),
        ("### Fixed", "### Added (earlier in this release)", "is not one of Added"),
        ("### Fixed\n\n- A bug.", "### Fixed\n\n- A bug.\n\n### Added\n\n- x.", "out of order"),
        ("- A bug.", "- A bug that was\n  found late.", "spans more than one line"),
        ("- A bug.", "- A bug.\n  - a nested detail", "spans more than one line"),
        ("- A bug.", "- " + "a" * 249, "at most 250"),
        ("- A bug.", "- A bug (`tests/core/test_x.py`).", "test path"),
        ("- A bug.", "- Faster: 0.54x plain XADD.", "benchmark figure '0.54x'"),
        ("- A bug.", "- Faster (was 0.51-0.69x).", "benchmark figure '0.51-0.69x'"),
        ("- A bug.", "- Drain 14.5\u00d7 the other.", "benchmark figure '14.5\u00d7'"),
        ("- A bug.", "- Faster (2.5\u20133x).", "benchmark figure '2.5\u20133x'"),
        ("- A bug.", "- A dropped span costs ~0.5 µs.", "benchmark figure"),
        ("- A bug.", "- Cold replay ~25 s.", "benchmark figure '~25 s'"),
        ("- A bug.", "- Lateness p99 2 ms.", "benchmark figure 'p99'"),
        ("- A bug.", "- 8,215 msg/s.", "benchmark figure"),
        ("- A bug.", "A bug.", "not an entry"),
        ("### Fixed\n\n- A bug.\n", "### Fixed\n", "has no entries"),
        ("Intro text.", "#### Details", "heading '#### Details'"),
    ],
)
def test_a_departure_is_named_with_what_to_fix(old: str, new: str, expected: str) -> None:
    # Given a changelog in form with one departure, when it is checked, then the
    # departure is named.
    assert old in GOOD
    text = GOOD.replace(old, new, 1)

    found = problems(text)

    assert any(expected in message for message in found), found


def main(argv: list[str]) -> int:
    """Check the changelogs named on the command line (default: the repository's).

    Args:
        argv: the file paths.

    Returns:
        0 when every file follows the form, else 1.
    """
    paths = [Path(a) for a in argv] or [CHANGELOG]
    found = [m for p in paths for m in problems(p.read_text(encoding="utf-8"), str(p))]
    print("\n".join(found) or "ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
