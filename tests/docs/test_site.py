"""The documentation site builds with no warning (``make docs``), its generated
command reference shows every option of every command, and its widest tables fit the
page's column at 1,280 px."""

from __future__ import annotations

import argparse
import concurrent.futures
import html
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import load_command_class

from tests.support.readme import DOCS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The browser (Debian's package, as for tests/browser); REDISQ_CHROMIUM overrides it.
CHROMIUM = os.environ.get("REDISQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
#: The pages whose tables were widest (955 to 1,043 px in Furo's 736 px column before
#: docs/_static/tables.css), and a screen width of a laptop.
WIDE_PAGES = (
    "reference/settings",
    "reference/commands",
    "reference/metrics",
    "howto/migrating",
    "howto/protecting",
    "background/performance",
)
SCREEN_WIDTH = 1280
#: Each table of the page that is wider than its box (it would scroll inside it).
TABLES_WIDER_THAN_THEIR_BOX = """() => [...document.querySelectorAll("article table")]
    .filter(t => t.getBoundingClientRect().width > t.parentElement.clientWidth + 1)
    .map(t => [Math.round(t.getBoundingClientRect().width), t.parentElement.clientWidth,
               t.innerText.slice(0, 60)])"""

COMMANDS = ("runconsumer", "redisq", "redisq_pipeline")
#: Django's options on every command: the page lists them once, in prose.
DJANGO_OPTIONS = {"--settings", "--pythonpath", "--traceback", "--no-color"}
DJANGO_OPTIONS |= {"--force-color", "--skip-checks", "--verbosity", "--help", "--version"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as ``make docs`` builds it (warnings are errors), into a temporary
    directory."""
    out = tmp_path_factory.mktemp("docs-html")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    build = ["-W", "--keep-going", "-q", "-b", "html", "-d", str(out / ".doctrees")]
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", *build, str(DOCS), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=540,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def test_the_site_builds_without_a_warning(site: Path) -> None:
    # Then every page of the toctrees is there, the generated references among them
    for page in ("index", "reference/settings", "reference/commands", "reference/api"):
        assert (site / f"{page}.html").is_file()
    settings = (site / "reference" / "settings.html").read_text(encoding="utf-8")
    assert "VISIBILITY_TIMEOUT" in settings and "DjangoJSONEncoder" in settings


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _options(sub)
        elif not set(action.option_strings) & DJANGO_OPTIONS:
            yield from action.option_strings


def test_every_command_option_is_on_the_commands_page(site: Path) -> None:
    page = html.unescape((site / "reference" / "commands.html").read_text(encoding="utf-8"))
    for name in COMMANDS:
        parser = load_command_class("redisq_django", name).create_parser("manage.py", name)
        options = set(_options(parser))
        assert options, name
        missing = sorted(o for o in options if o not in page)
        assert not missing, f"manage.py {name}: {missing} not on the commands page"


@pytest.mark.browser
def test_the_widest_tables_fit_the_page_at_1280_px(site: Path) -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"No chromium at {CHROMIUM} (make test installs it)", pytrace=False)
    # In a thread of its own: a browser test that ran before in this process may have left
    # pytest-playwright's event loop running in this one, where the sync API refuses to run.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(_check_table_widths, site).result(timeout=300)


def _check_table_widths(site: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": SCREEN_WIDTH, "height": 900})
            for name in WIDE_PAGES:
                # Given a page with tables, at 1,280 px
                page.goto((site / f"{name}.html").as_uri())
                assert page.locator("article table").count() > 0, name

                # Then the page does not scroll sideways, and no table inside its box
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= SCREEN_WIDTH, f"{name}: {width} px wide"
                assert page.evaluate(TABLES_WIDER_THAN_THEIR_BOX) == [], name
        finally:
            browser.close()
