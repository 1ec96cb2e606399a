"""Django's common options (--settings, --pythonpath, --traceback, -v…) work after a
``redisq`` sub-command, as after any other command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def run_django(redis_url: str, db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m django ARGS`` with no DJANGO_SETTINGS_MODULE in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(REDISQ_TEST_URL=redis_url, REDISQ_TEST_DB=str(db), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow  # a fresh Python process
@pytest.mark.parametrize(
    "args",
    [
        ("status", "{queue}", "--settings", "tests.settings"),
        ("status", "{queue}", "--settings=tests.settings", "--traceback", "-v", "2", "--no-color"),
        ("status", "{queue}", "--pythonpath", ".", "--settings", "tests.settings"),
        ("dead", "list", "--queue", "{queue}", "--settings", "tests.settings", "--skip-checks"),
    ],
    ids=["settings", "several", "pythonpath", "nested"],
)
def test_common_options_after_a_sub_command_are_accepted(
    volatile_redis_server: RedisServer, tmp_path: Path, queue_name: str, args: tuple[str, ...]
) -> None:
    # A Redis of its own: other tests' queues (some broken on purpose) stay out of it
    redis_url = volatile_redis_server.url
    db = tmp_path / "db.sqlite3"
    migrated = run_django(redis_url, db, "migrate", "-v", "0", "--settings", "tests.settings")
    assert migrated.returncode == 0, migrated.stderr
    done = run_django(redis_url, db, "redisq", *(a.format(queue=queue_name) for a in args))
    assert done.returncode == 0, done.stderr
    assert "unrecognized arguments" not in done.stderr
    assert done.stdout.strip()
