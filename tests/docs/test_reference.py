"""The reference pages cover what the code has: every setting, data source option and
system check id has its entry, and every link from the README into the site reaches a
page (and a heading of it)."""

from __future__ import annotations

import re
from pathlib import Path

from redisq_django.conf import DEFAULTS
from redisq_django.pipeline.source_options import OPTIONS
from tests.support.readme import DOCS, README, ROOT, blocks, pages

PACKAGE = ROOT / "redisq_django"
CHECK_ID = re.compile(r"""["']redisq_django\.([EWI]\d{3})["']""")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$", re.M)
#: The README's length the issue asks for ("at most ~200 lines").
README_LINES = 210


def _directive_entries(page: Path, directive: str) -> list[str]:
    """The keys of the ``KEY: meaning`` lines of a page's ``{directive}`` block."""
    found = [b for b in blocks(page.read_text(encoding="utf-8")) if b.lang == f"{{{directive}}}"]
    assert len(found) == 1, f"{page} must hold one {{{directive}}} block"
    return re.findall(r"^(\w+): ", found[0].code, re.M)


def test_every_setting_has_its_reference_entry() -> None:
    # Given the settings page's entries (the directive renders key and default from the code)
    documented = _directive_entries(DOCS / "reference" / "settings.md", "redisq-settings")
    # Then they are exactly the code's keys, and none twice
    assert sorted(documented) == sorted(DEFAULTS)
    assert len(documented) == len(set(documented))


def test_every_data_source_option_has_its_reference_entry() -> None:
    page = DOCS / "reference" / "datasource.md"
    documented = _directive_entries(page, "redisq-source-options")
    assert sorted(documented) == sorted(OPTIONS)


def test_every_system_check_id_is_on_the_checks_page() -> None:
    # Given every check id the package can report
    raised = {
        match[1]
        for path in PACKAGE.rglob("*.py")
        for match in CHECK_ID.finditer(path.read_text(encoding="utf-8"))
    }
    assert {"E001", "W010", "E030"} <= raised  # the scan finds ids where they are
    # Then the page has a row for each, and no row for an id the code lacks
    page = (DOCS / "reference" / "checks.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `redisq_django\.([EWI]\d{3})` \|", page, re.M))
    assert rows == raised


def _slug(title: str) -> str:
    """A heading's anchor as MyST (myst_heading_anchors) and GitHub make it."""
    text = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    for block in blocks(text):  # headings only outside code blocks
        text = text.replace(block.code, "")
    return {_slug(title) for title in HEADING.findall(text)}


def test_every_link_from_the_readme_resolves() -> None:
    # Given the README's relative links
    links = [
        target
        for target in LINK.findall(README.read_text(encoding="utf-8"))
        if not re.match(r"^[a-z]+:", target) and not target.startswith("#")
    ]
    into_site = [t for t in links if t.startswith("docs/")]
    assert len(into_site) >= 20, "the README links into the site"
    site = set(pages())
    for target in links:
        path, _, anchor = target.partition("#")
        file = ROOT / path
        # Then each names a file of the repository; into docs/, a page of the site...
        assert file.exists(), f"README links to {target}, which does not exist"
        if path.startswith("docs/") and not file.is_dir():
            assert file in site, f"README links to {target}, which is no page of the site"
        # ...and an anchor names a heading of that page
        if anchor:
            assert anchor in _anchors(file), f"README links to {target}: no such heading"


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines; move the detail to docs/"
