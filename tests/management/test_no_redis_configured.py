"""A project whose ``REDISQ`` names no Redis redisq can use (issue 32, point 9): a cache
alias ``CACHES`` lacks, a cache that is not django-redis, or nothing configured at all
(Django's default cache, a ``LocMemCache``). ``manage.py check`` and ``check --deploy``
name the problem in one line (``redisq_django.E005``), and every entry point that needs
Redis fails with that same line, never a traceback: ``runconsumer`` (with and without
the checks), ``manage.py redisq``, ``migrate`` (refused by the check; without it, it
succeeds and warns), the admin's banner and ``publish()``."""

from __future__ import annotations

import html
from collections.abc import Callable
from subprocess import CompletedProcess
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse

import redisq_django
from redisq_django.admin import live
from redisq_django.conf import SettingsError
from tests.support.command_runner import CommandRunner
from tests.support.workers import REPO_ROOT, Workers

SETTINGS = "tests.settings_no_redis"
URL_FIX = "set REDISQ['URL'] instead (e.g. 'redis://localhost:6379/0')."

#: The one line of each mistake (tests/settings_no_redis.py), word for word.
LINES = {
    "zero": "redisq has no Redis to use: REDISQ sets no URL, and the cache it falls back "
    "on, CACHES['default'], is django.core.cache.backends.locmem.LocMemCache, not a "
    f"django-redis cache. Make its BACKEND django_redis.cache.RedisCache, or {URL_FIX}",
    "missing": "redisq has no Redis to use: REDISQ['CONNECTION'] names the cache 'queues', "
    "which settings.CACHES does not have. Add a django-redis cache 'queues' to CACHES, or "
    f"{URL_FIX}",
    "locmem": "redisq has no Redis to use: REDISQ['CONNECTION'] names the cache "
    "CACHES['queues'], which is django.core.cache.backends.locmem.LocMemCache, not a "
    f"django-redis cache. Make its BACKEND django_redis.cache.RedisCache, or {URL_FIX}",
}
LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(LINES))
def test_every_command_says_the_same_one_line(case: str, redis_url: str, tmp_path: Any) -> None:
    line = LINES[case]
    # The commands run one after the other in one process of the project, as a shell
    # runs them (tests/support/command_runner.py)
    project = Workers(redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    env = project.env(DJANGO_SETTINGS_MODULE=SETTINGS, REDISQ_TEST_NO_REDIS=case)
    runner = CommandRunner(REPO_ROOT, env, tmp_path / "runner.err", spark=False, timeout=60)
    try:
        _every_command_says(line, lambda *argv: runner.run(["manage.py", *argv]))
    finally:
        runner.stop()


def _every_command_says(line: str, run: Callable[..., CompletedProcess[str]]) -> None:
    # When the checks run, with and without --deploy: E005 with the line, exit code 1
    # (and no "cannot reach Redis" guess on top of it)
    for argv in (("check",), ("check", "--deploy")):
        done = run(*argv)
        assert done.returncode == 1, done.stderr
        assert f"?: (redisq_django.E005) {line}\n" in done.stderr
        assert "redisq_django.E004" not in done.stderr

    # And every command that needs Redis stops at the check with the line, no traceback
    for argv in (("runconsumer", "together", "--burst"), ("migrate", "-v", "0")):
        done = run(*argv)
        assert done.returncode == 1, done.stderr
        assert f"?: (redisq_django.E005) {line}\n" in done.stderr
        assert "Traceback" not in done.stderr

    # And past the checks (--skip-checks), the worker and the operator command fail with
    # exactly that line
    for argv in (
        ("runconsumer", "together", "--burst", "--skip-checks"),
        ("redisq", "status", "--skip-checks"),
    ):
        done = run(*argv)
        assert (done.returncode, done.stderr) == (1, f"CommandError: {line}\n"), argv

    # And migrate past the check succeeds (its tables need no Redis) and warns with it
    done = run("migrate", "-v", "0", "--skip-checks")
    assert done.returncode == 0, done.stderr
    assert line in done.stderr and "Traceback" not in done.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("case", sorted(LINES))
def test_the_check_publish_and_the_admin_say_the_same_line(
    case: str, settings: Any, admin_client: Client, queue_name: str
) -> None:
    line = LINES[case]
    # Given the settings of that mistake, in this process
    if case == "zero":
        settings.REDISQ = {}
        settings.CACHES = {"default": LOCMEM}
    else:
        settings.REDISQ = {"CONNECTION": "queues"}
        settings.CACHES = {"default": LOCMEM, **({"queues": LOCMEM} if case == "locmem" else {})}
    # Then the check says it (without connecting anywhere)
    found = [e for e in run_checks() if e.id.startswith("redisq_django")]
    assert [(e.id, e.msg) for e in found] == [("redisq_django.E005", line)]
    assert found[0].hint
    # And publish() from a view raises it, the same sentence
    with pytest.raises(SettingsError) as raised:
        redisq_django.publish(queue_name, {"n": 1})
    assert str(raised.value) == line
    # And the admin's overview answers, with the line in its banner
    live.clear()
    page = admin_client.get(reverse("admin:redisq_django_overview_changelist"))
    assert page.status_code == 200
    assert html.escape(line) in page.content.decode()


@pytest.mark.django_db
def test_a_url_or_a_django_redis_cache_passes_the_check(settings: Any, redis_url: str) -> None:
    settings.REDISQ = {"URL": redis_url}
    settings.CACHES = {"default": LOCMEM}  # not used: the URL wins
    assert [e.id for e in run_checks() if e.id == "redisq_django.E005"] == []
    settings.REDISQ = {"CONNECTION": "queues"}
    settings.CACHES = {
        "default": LOCMEM,
        "queues": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url},
    }
    assert [e.id for e in run_checks() if e.id == "redisq_django.E005"] == []
