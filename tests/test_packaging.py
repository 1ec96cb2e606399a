"""The built wheel carries everything an installed app needs (the suite itself runs
against an editable install, which would hide missing package data)."""

from __future__ import annotations

import zipfile
from email import message_from_string
from email.message import Message
from pathlib import Path

import pytest

import redisq_django
from tests.support.wheel import session_wheel

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "redisq_django"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from this tree (no sdist, no install: tests/test_release.py
    does those), shared with the other tests of the session that need it."""
    return session_wheel(tmp_path_factory)


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return message_from_string(archive.read(name).decode("utf-8"))


@pytest.mark.slow
def test_wheel_ships_scripts_templates_migrations_and_types(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())

    expected = {
        str(p.relative_to(ROOT))
        for pattern in (
            "core/scripts/*.lua",  # assembled: what every client loads
            "core/scripts/source/*.lua",  # what our loader assembles them from
            "core/scripts/fragments/*.lua",
            "templates/**/*.html",
            "migrations/0*.py",
        )
        for p in PACKAGE.glob(pattern)
    }
    assert len([n for n in expected if n.endswith(".lua")]) >= 9
    assert expected <= names, sorted(expected - names)
    assert "redisq_django/py.typed" in names
    # The history report inlines the chart code from the package (report_assets).
    from redisq_django.pipeline.report_assets import SCRIPTS, STYLES

    assets = {f"redisq_django/static/redisq_django/{name}" for name in (*SCRIPTS, *STYLES)}
    assert assets <= names, sorted(assets - names)
    assert not any(n.startswith(("tests/", "example_project/", "bench/")) for n in names)


@pytest.mark.slow
def test_wheel_metadata_is_complete_for_pypi(wheel: Path) -> None:
    meta = _metadata(wheel)
    assert meta["Name"] == "redisq-django"
    assert meta["Version"] == redisq_django.__version__
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Summary"]
    # PyPI shows README.md as the project's page.
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (ROOT / "README.md").read_text().strip()
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Changelog", "Issues", "Source"} <= set(urls)
    assert all(u.startswith("https://") for u in urls.values())
    classifiers = set(meta.get_all("Classifier") or [])
    assert {"Framework :: Django", "Typing :: Typed", "Intended Audience :: Developers"} <= (
        classifiers
    )
    # The development status follows the version (docs/background/versioning.md): a 0.x
    # release is Beta, 1.0 and later Production/Stable.
    major = int(redisq_django.__version__.split(".")[0])
    status = "5 - Production/Stable" if major >= 1 else "4 - Beta"
    assert f"Development Status :: {status}" in classifiers
    for extra in ("pipeline", "metrics", "otel"):
        assert extra in (meta.get_all("Provides-Extra") or [])
