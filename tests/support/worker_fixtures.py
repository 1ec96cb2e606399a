"""Fixtures of the tests that run worker processes (tests/faults, and the metrics
endpoints): a migrated SQLite file per test and the workers on the session's server (the
broker is tests/conftest.py's). ``tests/faults/conftest.py`` offers them to the fault
tests; elsewhere, import them by name."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer
from tests.support.workers import Workers


@pytest.fixture(scope="module")
def migrated_db(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (migrating once saves seconds)."""
    root = tmp_path_factory.mktemp("faults-db")
    path = root / "template.sqlite3"
    Workers(redis_server.url, path, root / "logs").migrate()
    return path


@pytest.fixture
def db_file(migrated_db: Path, tmp_path: Path) -> Path:
    path = tmp_path / "worker.sqlite3"
    shutil.copyfile(migrated_db, path)
    return path


@pytest.fixture
def workers(redis_url: str, db_file: Path, tmp_path: Path) -> Iterator[Workers]:
    """Workers on the flushed session server; all killed at teardown."""
    pool = Workers(redis_url, db_file, tmp_path / "logs")
    try:
        yield pool
    finally:
        pool.close()
