"""The tutorial (docs/tutorial) runs as written, as a new user runs it: in an empty
directory outside the source tree, a fresh virtualenv, the wheel of this tree installed
where the page says ``pip install redisq-django``, every file and command taken from the
pages themselves (tests/support/tutorial.py), on a private redis-server; its last page
runs the project's own tests, written with redisq_django.testing, with ``pytest -n 2``
against that one Redis."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer
from tests.support.tutorial import Step, outputs, script, steps
from tests.support.wheel import ROOT, session_wheel

# The wheel is built once per session (shared); the venv's install comes from pip's
# cache: the whole run takes about a minute on 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT_TIMEOUT = 420

# What the tutorial does not show but a user would see: the view it wires, and the
# admin's dead-letter page, on the project the tutorial built.
AFTERWARDS = """\
from django.contrib.auth.models import User
from django.test import Client

client = Client(HTTP_HOST="localhost")
response = client.post("/orders/", {"total": "12.50"})
print("view", response.status_code, response.content.decode().strip())
client.force_login(User.objects.create_superuser("staff", "staff@example.com", "x"))
page = client.get("/admin/redisq_django/deadletter/?status=retried").content.decode()
print("admin", "fraud-check" in page, "SuspiciousOrder" in page)
"""


#: A key prefix the redisq test helpers give a test (testing/isolation.py: new_prefix),
#: from the tutorial's settings, which leave REDISQ["PREFIX"] at "redisq".
TEST_PREFIX = re.compile(r"redisq-test-[0-9a-f]{12}(?=:)")
#: pytest's last line: "==== 4 passed, 1 warning in 5.30s ====".
PYTEST_SUMMARY = re.compile(r"^=+ (?P<counts>.+) in [\d.]+s(?: \([\d:]+\))? =+$", re.M)


def _tests_of_the_page(found: list[Step]) -> int:
    """How many test functions the tutorial's test file defines."""
    (tests,) = [s for s in found if s.kind == "file" and s.arg == "shop/tests.py"]
    return len(re.findall(r"^def test_", tests.code, re.M))


def _user_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """A user's shell: nothing of this checkout, this venv, the test's Django or the
    suite's own pytest run (xdist's worker variables, PYTEST_ADDOPTS); the suite's
    Python as ``python3``."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    path = [p for p in path if not Path(p).resolve().is_relative_to(ROOT)]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PATH"}
        and not k.startswith(("DJANGO_", "REDISQ_", "PYTEST_"))
    }
    env.update(PATH=os.pathsep.join([str(bin_dir), *path]), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


@pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="the tutorial's last step, a Django task, needs Django 6, which needs Python 3.12",
)
def test_the_tutorial_runs_as_written_from_the_wheel(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    fresh_redis_server: RedisServer,
    redis_cli_binary: str,
) -> None:
    # Given the tutorial's steps, the wheel of this tree, an empty directory outside the
    # tree, and the suite's interpreter as the user's python3
    found = steps()
    wheel = session_wheel(tmp_path_factory)
    project = tmp_path / "tutorial"
    project.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys._base_executable)
    env = _user_env(bin_dir, REDIS_URL=fresh_redis_server.url)
    # Every command the server runs, to see whose keys the project's tests wrote there
    # (connected long before the project's first command, which follows a pip install)
    monitor_log = tmp_path / "monitor.log"
    with open(monitor_log, "wb") as sink:
        monitor = subprocess.Popen(
            [redis_cli_binary, "-u", fresh_redis_server.url, "monitor"], stdout=sink
        )

    # When bash takes every step of the pages, in order
    try:
        done = subprocess.run(
            ["bash", "-c", script(found, wheel)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)

    # Then every command succeeded, and printed what the pages say it prints
    log = f"{done.stdout}\n{done.stderr[-6000:]}"
    assert done.returncode == 0, log
    printed = done.stdout.splitlines()
    for line in outputs(found):
        assert line in printed, f"{line!r} not printed\n{log}"

    # And the project's tests all passed, in two pytest-xdist processes, on the Redis of
    # REDIS_URL: each under a prefix of its own, none of whose keys is left
    expected = _tests_of_the_page(found)
    assert expected >= 4, "the page tests the view, both consumers and the task"
    (summary,) = PYTEST_SUMMARY.findall(done.stdout)
    assert summary.split(", ")[0] == f"{expected} passed", summary
    assert not re.search(r"failed|error|skipped|xfail", summary), summary
    assert "created: 2/2 workers" in printed
    assert f"2 workers [{expected} items]" in printed
    prefixes = set(TEST_PREFIX.findall(monitor_log.read_text(errors="replace")))
    assert len(prefixes) == expected, prefixes
    with fresh_redis_server.client() as client:
        assert client.keys("redisq-test-*") == []

    # And the project holds what the tutorial says: the package from the wheel, in the
    # project's venv; an invoice per order; the one dead letter retried, none waiting
    python = project / ".venv" / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import redisq_django; print(redisq_django.__file__)"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert Path(where.stdout.strip()).is_relative_to(project / ".venv"), where
    with closing(sqlite3.connect(project / "db.sqlite3")) as db:
        assert db.execute("select count(*) from shop_invoice").fetchone() == (3,)
        dead = db.execute("select consumer, status, error_class from redisq_django_deadletter")
        assert dead.fetchall() == [("fraud-check", "retried", "SuspiciousOrder")]

    # And the view it wires publishes, the worker handles it, the admin shows the retry
    def manage(*args: str) -> str:
        out = subprocess.run(
            [python, "manage.py", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"{args}: {out.stdout}\n{out.stderr}"
        return out.stdout

    shown = manage("shell", "-c", AFTERWARDS).splitlines()
    assert "view 201 order 4 placed" in shown
    assert "admin True True" in shown
    manage("runconsumer", "orders", "--burst")
    with closing(sqlite3.connect(project / "db.sqlite3")) as db:
        assert db.execute("select count(*) from shop_invoice").fetchone() == (4,)
