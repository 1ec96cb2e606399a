"""The pytest plugin as a user gets it: found through the package's ``pytest11`` entry
point (no conftest.py, no ``-p``), inert for tests that do not ask for ``redisq``; and
the example project's tests, written with the helpers, in parallel on one Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import redis

import redisq_django

ROOT = Path(redisq_django.__file__).parent.parent


def _env(**more: str) -> dict[str, str]:
    """This process's environment for a pytest of another project: without our suite's
    DJANGO_SETTINGS_MODULE (pytest-django exports it), which would win over its ini."""
    return {**{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}, **more}


def test_the_plugin_is_registered_as_an_entry_point() -> None:
    (found,) = [e for e in entry_points(group="pytest11") if e.name == "redisq_django"]
    assert found.value == "redisq_django.testing.plugin"
    assert callable(found.load().redisq)


TINY_SETTINGS = """
import os
SECRET_KEY = "tiny"
INSTALLED_APPS = ["django.contrib.contenttypes", "redisq_django"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
USE_TZ = True
REDISQ = {"URL": os.environ["TINY_REDIS_URL"]}
"""

TINY_TESTS = """
import sys

from django.conf import settings

from redisq_django import publish
from redisq_django.testing import capture


def test_a_test_without_the_fixture_is_left_alone():
    assert "redisq_django.testing.kit" not in sys.modules
    assert "PREFIX" not in settings.REDISQ


def test_the_fixture_comes_from_the_entry_point(redisq):
    assert redisq.prefix.startswith("redisq-test-")
    with capture(on_commit=False) as published:
        publish("orders", {"order": 1}, delay=30)
    assert [(m.queue, m.payload) for m in published] == [("orders", {"order": 1})]
    assert 29 <= published[0].delay <= 31
"""


@pytest.mark.slow  # a pytest session in a fresh process
def test_a_project_of_its_own_gets_the_fixture_from_the_installed_package(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    # Given a project with no conftest.py, whose settings name our session Redis
    (tmp_path / "tiny_settings.py").write_text(TINY_SETTINGS)
    (tmp_path / "test_tiny.py").write_text(TINY_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = tiny_settings\n")

    # When pytest runs there (plugins from entry points only)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:valkey", "-q"],
        cwd=tmp_path,
        env=_env(TINY_REDIS_URL=redis_url, PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Then both tests pass, and the isolated test left no key behind
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert redis_client.keys("redisq-test-*") == []


SETTINGS_TESTS = """
from django.conf import settings as django_settings

from redisq_django import publish


def test_a_setting_changed_in_a_test_that_lists_settings_first(settings, redisq):
    settings.TINY_LIMIT = "1.00"
    assert django_settings.REDISQ["PREFIX"] == redisq.prefix
    publish("orders", {"order": 1})


def test_the_next_test_has_the_projects_settings_back():
    assert "PREFIX" not in django_settings.REDISQ
    assert not hasattr(django_settings, "TINY_LIMIT")


def test_a_setting_changed_in_a_test_that_lists_redisq_first(redisq, settings):
    settings.TINY_LIMIT = "1.00"
    assert django_settings.REDISQ["PREFIX"] == redisq.prefix
    publish("orders", {"order": 2})


def test_and_the_one_after_it_too():
    assert "PREFIX" not in django_settings.REDISQ
    assert not hasattr(django_settings, "TINY_LIMIT")
"""


@pytest.mark.slow  # a pytest session in a fresh process
def test_a_test_changing_settings_through_pytest_django_leaves_no_prefix_behind(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    # Given tests that change a setting with pytest-django's `settings` fixture in their
    # body, listed before and after `redisq` (overrides undone out of turn once left the
    # finished test's prefix in force for the rest of the session)
    (tmp_path / "tiny_settings.py").write_text(TINY_SETTINGS)
    (tmp_path / "test_tiny.py").write_text(SETTINGS_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = tiny_settings\n")

    # When pytest runs them in order, in one process
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:valkey", "-q"],
        cwd=tmp_path,
        env=_env(TINY_REDIS_URL=redis_url, PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Then each test after one of them has the project's settings, and no key is left
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout
    assert redis_client.keys("redisq-test-*") == []


#: Two test processes (pytest-xdist), quiet.
XDIST = ("-n", "2", "-q")


@pytest.mark.slow  # the example project's suite in two processes
def test_the_example_project_passes_its_tests_in_parallel_on_one_redis(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # Given the example project's tests (a test per consumer, task and schedule)
    # When they run in two processes against the session Redis
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:valkey", *XDIST],
        cwd=ROOT / "example_project",
        env=_env(REDISQ_URL=redis_url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then all pass, and every test's keys are gone
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout
    assert redis_client.keys("redisq-test-*") == []
