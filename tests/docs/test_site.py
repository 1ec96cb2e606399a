"""The documentation site builds with no warning (``make docs``), and its generated
command reference shows every option of every command."""

from __future__ import annotations

import argparse
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
