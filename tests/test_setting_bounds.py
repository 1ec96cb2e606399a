"""One table of bounds for every numeric setting (``core/bounds.py``), and every place a
value can come from refusing a bad one in the same words: ``settings.REDISQ``
(``manage.py check`` and ``get_settings()``, so also a worker at start), ``@consumer``,
``@task`` and a ``TASKS`` backend's ``OPTIONS``, the admin's consumer overrides and
``runconsumer``'s arguments. Every default passes."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import task, task_backends
from django.tasks.exceptions import InvalidTask
from django.test import Client
from django.urls import reverse

from redisq_django import consumer
from redisq_django.conf import DEFAULTS, NUMBERS, SettingsError, get_core_config, get_settings
from redisq_django.core import bounds
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.retry import RetryPolicy
from redisq_django.management.commands.runconsumer import Command as RunConsumer
from redisq_django.models import TUNABLES, Consumer, Queue
from redisq_django.models.queues import LIMITS
from redisq_django.tasks.backend_options import OPTION_DEFAULTS, option_problems

ROOT = Path(__file__).resolve().parents[1]
BACKEND = "redisq_django.tasks.RedisqBackend"

#: Bad visibility timeouts: none (0), negative, not a number, not finite, a bool.
BAD_LEASES = [0, 0.5, -1, "60", math.nan, math.inf, True]


def _words(value: Any) -> str:
    """What every place says of ``value`` as a visibility timeout, after its own label."""
    said = bounds.problem("visibility_timeout", value, "")
    assert said is not None
    return said


def test_the_table_bounds_what_it_should() -> None:
    lease = bounds.BOUNDS["visibility_timeout"]
    assert (lease.unit, lease.minimum, lease.above, lease.maximum) == ("seconds", 1, False, None)
    assert _words(0) == (
        "must be a number of seconds >= 1, got 0 (the lease of a delivery, renewed every "
        "third of it with Redis round trips in between: a shorter one lets other instances "
        "take messages a live one still handles)"
    )
    assert bounds.problem("metrics_port", 65536, "--metrics-port") == (
        "--metrics-port must be an integer between 0 and 65535, got 65536 (a TCP port; 0: "
        "any free one)"
    )
    assert bounds.problem("poll_interval", 0) is not None  # above 0, not at it
    assert bounds.problem("max_retries", 2.0) is not None  # an integer, not a float
    assert [bounds.problem("visibility_timeout", v) for v in (1, 1.5, 86_400)] == [None] * 3


def test_every_default_is_within_its_bounds() -> None:
    # Every numeric REDISQ key is bounded, and its default passes
    numeric = {
        k for k, v in DEFAULTS.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    assert numeric == set(NUMBERS)
    assert {k: bounds.problem(k.lower(), DEFAULTS[k]) for k in NUMBERS} == dict.fromkeys(NUMBERS)
    # The TASKS options' defaults (None: the REDISQ setting applies)
    options = {k: v for k, v in OPTION_DEFAULTS.items() if k.lower() in bounds.BOUNDS}
    assert set(options) == {"RESULT_TTL", "MAX_RETRIES", "BACKOFF", "MAX_BACKOFF",
                            "VISIBILITY_TIMEOUT", "CONCURRENCY", "TIME_LIMIT", "BURST",
                            "MAX_IN_FLIGHT"}  # fmt: skip
    assert option_problems({}) == []
    # A consumer's tunables when nothing overrides them (the core's defaults)
    defaults = {**RetryPolicy().to_seconds(), "concurrency": 1}
    bounded = [f for f in TUNABLES if f not in LIMITS]  # limits default to none
    assert {f: bounds.problem(f, defaults[f]) for f in bounded} == dict.fromkeys(bounded)
    # runconsumer's option defaults
    parser = RunConsumer().create_parser("manage.py", "runconsumer")
    for action in parser._actions:
        name = action.dest
        # (--burst is a flag, not the rate's burst of the same name)
        if name in bounds.BOUNDS and isinstance(action.default, int | float) and name != "burst":
            assert bounds.problem(name, action.default) is None, name


@pytest.mark.django_db  # model checks ask the database about its features
@pytest.mark.parametrize("value", BAD_LEASES, ids=repr)
def test_settings_refuse_a_bad_visibility_timeout_in_check_and_at_use(
    settings: Any, value: Any
) -> None:
    settings.REDISQ = {"VISIBILITY_TIMEOUT": value}
    expected = f"Invalid settings.REDISQ: VISIBILITY_TIMEOUT {_words(value)}."

    # manage.py check: one error with a stable id, a hint, and the words
    [error] = [e for e in run_checks() if e.id.startswith("redisq_django")]
    assert (error.id, error.msg) == ("redisq_django.E001", expected)
    assert error.hint
    # Reading the settings (what publishing and the worker do) says the same
    with pytest.raises(SettingsError) as raised:
        get_settings()
    assert str(raised.value) == expected
    with pytest.raises(SettingsError, match="VISIBILITY_TIMEOUT must be"):
        get_core_config()
    # And a worker refuses to start, with the same words
    with pytest.raises(CommandError) as refused:
        call_command("runconsumer", "anything", "--burst")
    assert str(refused.value) == expected


@pytest.mark.slow
def test_a_worker_process_refuses_to_start_with_a_zero_visibility_timeout(tmp_path: Path) -> None:
    # Given settings with VISIBILITY_TIMEOUT = 0 (and Redis nowhere: never reached)
    settings_module = tmp_path / "zero_lease_settings.py"
    settings_module.write_text(
        "from tests.settings import *  # noqa: F403\n"
        "REDISQ = {'URL': 'redis://127.0.0.1:1/0', 'VISIBILITY_TIMEOUT': 0}\n"
    )
    expected = f"Invalid settings.REDISQ: VISIBILITY_TIMEOUT {_words(0)}."
    for extra in ([], ["--skip-checks"]):
        # When runconsumer starts (with the system checks, or without them)
        done = subprocess.run(
            [sys.executable, "-m", "django", "runconsumer", "orders", "--burst", *extra],
            cwd=ROOT,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": f"{ROOT}:{tmp_path}",
                "DJANGO_SETTINGS_MODULE": "zero_lease_settings",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # Then it exits 1 before consuming anything, saying why in the same words
        assert done.returncode == 1, done.stderr
        assert expected in done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("ORDERED_WAIT_REPLICAS", -1, "must be an integer >= 0, got -1"),
        ("ORDERED_WAIT_REPLICAS", 1.0, "must be an integer >= 0, got 1.0"),
        ("ORDERED_WAIT_TIMEOUT", 0, "must be a number of seconds > 0, got 0"),
    ],
)
def test_settings_refuse_a_bad_replica_wait(
    settings: Any, key: str, value: Any, words: str
) -> None:
    settings.REDISQ = {key: value}
    with pytest.raises(SettingsError, match=f"{key} {words}"):
        get_settings()


def test_the_replica_wait_settings_reach_the_core(settings: Any) -> None:
    settings.REDISQ = {"ORDERED_WAIT_REPLICAS": 1, "ORDERED_WAIT_TIMEOUT": 0.05}
    config = get_core_config()
    assert (config.ordered_wait_replicas, config.ordered_wait_timeout_ms) == (1, 50)
    settings.REDISQ = {}
    config = get_core_config()
    assert (config.ordered_wait_replicas, config.ordered_wait_timeout_ms) == (0, 1000)


@pytest.mark.parametrize("value", BAD_LEASES, ids=repr)
def test_consumer_refuses_a_bad_visibility_timeout(queue_name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        consumer(queue_name, visibility_timeout=value)
    assert str(raised.value) == f"@consumer visibility_timeout {_words(value)}"


@pytest.mark.parametrize("value", BAD_LEASES, ids=repr)
def test_task_and_tasks_options_refuse_a_bad_visibility_timeout(
    settings: Any, redis_url: str, value: Any
) -> None:
    settings.REDISQ = {"URL": redis_url}
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"]}}

    # @task(visibility_timeout=...)
    with pytest.raises(InvalidTask) as raised:
        task(visibility_timeout=value)(_a_task)
    assert str(raised.value) == f"@task visibility_timeout {_words(value)}."

    # OPTIONS["VISIBILITY_TIMEOUT"]: manage.py check's E030, in the same words
    settings.TASKS = {
        "default": {
            "BACKEND": BACKEND,
            "QUEUES": ["default"],
            "OPTIONS": {"VISIBILITY_TIMEOUT": value},
        }
    }
    [error] = task_backends["default"].check()
    assert error.id == "redisq_django.E030"
    assert error.msg == (
        f"TASKS['default']['OPTIONS'] is invalid: VISIBILITY_TIMEOUT {_words(value)}."
    )


def _a_task() -> None:
    """A task function for the decorator to refuse."""


@pytest.mark.django_db
@pytest.mark.parametrize("value", [0, 0.5, -1, "x"], ids=repr)
def test_the_admin_refuses_a_bad_visibility_timeout_override(queue_name: str, value: Any) -> None:
    row = Consumer.objects.create(
        queue=Queue.objects.create(name=queue_name), name="billing", handler="x.y"
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    data = {"enabled": "on", **dict.fromkeys(TUNABLES, ""), "visibility_timeout": value}

    page = client.post(reverse("admin:redisq_django_consumer_change", args=[row.pk]), data)

    # The form again, with the error on the field, in the same words (a number the form
    # read: the form's own message for text that is none)
    assert page.status_code == 200
    [said] = page.context["adminform"].form.errors["visibility_timeout"]
    if value == "x":
        assert said == "Enter a number."
    else:
        assert said == f"visibility timeout {_words(float(value))}"
    row.refresh_from_db()
    assert row.visibility_timeout is None


@pytest.mark.parametrize(
    ("option", "text", "name", "value"),
    [
        ("--concurrency", "0", "concurrency", 0),
        ("--concurrency", "two", "concurrency", "two"),
        ("--grace-period", "-1", "grace_period", -1.0),
        ("--prefetch", "0", "prefetch", 0),
        ("--max-messages", "0", "max_messages", 0),
        ("--stats-interval", "inf", "stats_interval", math.inf),
        ("--processes", "0", "processes", 0),
        ("--metrics-port", "70000", "metrics_port", 70000),
    ],
)
def test_runconsumer_refuses_bad_numbers_in_the_same_words(
    option: str, text: str, name: str, value: Any
) -> None:
    words = bounds.problem(name, value, "")
    assert words is not None
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        bounds.argument(name)(text)
    assert str(raised.value) == words

    with pytest.raises(CommandError) as refused:
        call_command("runconsumer", "orders", option, text)
    assert f"argument {option}: {words}" in str(refused.value)
