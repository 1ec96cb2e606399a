"""The tutorial (docs/tutorial) runs as written, as a new user runs it: in an empty
directory outside the source tree, a fresh virtualenv, the wheel of this tree installed
where the page says ``pip install redisq-django``, every file and command taken from the
pages themselves (tests/support/tutorial.py), on a private redis-server."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer
from tests.support.tutorial import outputs, script, steps
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


def _user_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """A user's shell: nothing of this checkout, this venv or the test's Django; the
    suite's Python as ``python3``."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    path = [p for p in path if not Path(p).resolve().is_relative_to(ROOT)]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PATH"}
        and not k.startswith(("DJANGO_", "REDISQ_"))
    }
    env.update(PATH=os.pathsep.join([str(bin_dir), *path]), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


@pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="the tutorial's last step, a Django task, needs Django 6, which needs Python 3.12",
)
def test_the_tutorial_runs_as_written_from_the_wheel(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, fresh_redis_server: RedisServer
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

    # When bash takes every step of the pages, in order
    done = subprocess.run(
        ["bash", "-c", script(found, wheel)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )

    # Then every command succeeded, and printed what the pages say it prints
    log = f"{done.stdout}\n{done.stderr[-6000:]}"
    assert done.returncode == 0, log
    printed = done.stdout.splitlines()
    for line in outputs(found):
        assert line in printed, f"{line!r} not printed\n{log}"

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
