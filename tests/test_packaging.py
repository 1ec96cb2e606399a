"""The built wheel carries everything an installed app needs (the suite itself runs
against an editable install, which would hide missing package data)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "redisq_django"


@pytest.mark.slow
def test_wheel_ships_scripts_templates_migrations_and_types(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("redisq_django-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    expected = {
        str(p.relative_to(ROOT))
        for pattern in ("core/scripts/*.lua", "templates/**/*.html", "migrations/0*.py")
        for p in PACKAGE.glob(pattern)
    }
    assert len([n for n in expected if n.endswith(".lua")]) >= 9
    assert expected <= names, sorted(expected - names)
    assert "redisq_django/py.typed" in names
    assert not any(n.startswith(("tests/", "example_project/", "bench/")) for n in names)
