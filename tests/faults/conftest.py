"""The fault tests' fixtures (tests/support/worker_fixtures.py)."""

from tests.support.worker_fixtures import db_file, migrated_db, workers

__all__ = ["db_file", "migrated_db", "workers"]
