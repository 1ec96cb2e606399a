"""The fault tests' fixtures (tests/support/worker_fixtures.py)."""

from tests.support.worker_fixtures import broker, db_file, migrated_db, workers

__all__ = ["broker", "db_file", "migrated_db", "workers"]
