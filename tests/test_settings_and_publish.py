"""The Django layer: settings.REDISQ, the shared broker, publish() and publish_many()."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy

import redisq_django
from redisq_django.conf import SettingsError, get_core_config
from redisq_django.connection import get_broker
from redisq_django.core import PayloadNotSerializable, PayloadTooLarge, RedisUnavailable

ROOT = Path(__file__).resolve().parents[1]


def receive_all(queue: str, group: str, expected: int) -> list[Any]:
    """Fetch until ``expected`` messages arrived (bounded by count and time)."""
    out: list[Any] = []
    with get_broker().subscribe(queue, group) as sub:
        for _ in range(50):
            batch = sub.fetch(count=100, block_ms=100)
            sub.ack(batch)
            out += batch
            if len(out) >= expected:
                break
    return out


def test_publish_reaches_every_logical_consumer(queue_name: str, redisq_settings: Any) -> None:
    # Given two logical consumers of one queue
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")

    # When one message and a batch are published through the package API
    first = redisq_django.publish(queue_name, {"order": 1}, headers={"source": "test"})
    batch = redisq_django.publish_many(queue_name, [{"order": 2}, {"order": 3}])

    # Then each consumer receives all three, with payload and headers
    for group in ("billing", "email"):
        got = receive_all(queue_name, group, 3)
        assert [m.id for m in got] == [first, *batch]
        assert [m.payload for m in got] == [{"order": 1}, {"order": 2}, {"order": 3}]
        assert got[0].headers == {"source": "test"}


def test_django_types_are_encoded_like_djangojsonencoder(
    queue_name: str, redisq_settings: Any
) -> None:
    get_broker().consumers.ensure(queue_name, "g")
    when = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    redisq_django.publish(
        queue_name,
        {
            "when": when,
            "day": when.date(),
            "price": decimal.Decimal("9.99"),
            "id": ident,
            "label": gettext_lazy("Orders"),
        },
    )
    (message,) = receive_all(queue_name, "g", 1)
    assert message.payload == {
        "when": "2024-05-01T12:00:00.123Z",
        "day": "2024-05-01",
        "price": "9.99",
        "id": str(ident),
        "label": "Orders",
    }


def test_connection_reuses_the_django_redis_cache_client(
    queue_name: str, settings: Any, redis_url: str
) -> None:
    # Given REDISQ pointing at a django-redis cache alias (no URL)
    settings.CACHES = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}
    }
    settings.REDISQ = {"CONNECTION": "default", "PREFIX": "shop"}
    from django_redis import get_redis_connection

    # When a message is published
    message_id = redisq_django.publish(queue_name, {"order": 7})

    # Then it went through that client, under the configured prefix
    client = get_redis_connection("default")
    assert get_broker().client is client
    entries = client.xrange(f"shop:{{{queue_name}}}:log")
    assert [e[0].decode() for e in entries] == [message_id]


def test_settings_changes_take_effect_without_restart(
    queue_name: str, settings: Any, redis_url: str
) -> None:
    settings.REDISQ = {"URL": redis_url, "MAX_PAYLOAD_BYTES": 100}
    assert get_core_config().max_payload_bytes == 100
    with pytest.raises(PayloadTooLarge) as info:
        redisq_django.publish(queue_name, {"blob": "x" * 200})
    assert "100" in str(info.value) and "MAX_PAYLOAD_BYTES" in str(info.value)
    settings.REDISQ = {"URL": redis_url, "MAX_PAYLOAD_BYTES": 1000}
    assert redisq_django.publish(queue_name, {"blob": "x" * 200})


def test_unserialisable_payload_names_the_type(queue_name: str, redisq_settings: Any) -> None:
    class Order:
        pass

    with pytest.raises(PayloadNotSerializable, match="Order"):
        redisq_django.publish(queue_name, {"order": Order()})


@pytest.mark.django_db  # model checks ask the database about its features
@pytest.mark.parametrize(
    ("redisq", "needle"),
    [
        ({"URLL": "redis://x"}, "Unknown key(s) in settings.REDISQ: URLL"),
        ({"MAX_RETRIES": -1}, "MAX_RETRIES must be an integer >= 0"),
        ({"VISIBILITY_TIMEOUT": "60"}, "VISIBILITY_TIMEOUT must be a number of seconds"),
        ({"URL": "http://localhost"}, "URL must be a redis://"),
        ({"CLUSTER": True}, "CLUSTER needs URL"),
        ({"CLUSTER": "yes", "URL": "redis://x"}, "CLUSTER must be True or False"),
        ({"PREFIX": "a{b}"}, "PREFIX must be a non-empty string"),
        ({"ARCHIVE_NAME": "nightly:2"}, "ARCHIVE_NAME must be a name"),
        ({"JSON_ENCODER": "nowhere.Encoder"}, "JSON_ENCODER"),
        (
            {"PARTITIONS": {"orders": 65}},
            "must be an integer between 1 and 64, got 65",
        ),
        ({"PARTITIONS": {"a:b": 2}}, "PARTITIONS: 'a:b' is no queue name"),
        ({"PARTITIONS": [("orders", 2)]}, "PARTITIONS must be a dict of queue name"),
        ("redis://localhost", "must be a dict"),
    ],
)
def test_bad_settings_are_reported_by_checks_and_at_use(
    settings: Any, redisq: Any, needle: str
) -> None:
    settings.REDISQ = redisq
    errors = [e for e in run_checks() if e.id == "redisq_django.E001"]
    assert len(errors) == 1 and needle in errors[0].msg
    assert errors[0].hint
    with pytest.raises(ImproperlyConfigured, match=needle.replace("(", r"\(").replace(")", r"\)")):
        get_core_config()


@pytest.mark.django_db
def test_good_settings_pass_the_checks(redisq_settings: Any) -> None:
    assert [e for e in run_checks() if e.id.startswith("redisq_django")] == []


def test_partitions_reach_the_core_config(redisq_settings: Any) -> None:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {"orders": 4}}
    assert dict(get_core_config().partitions) == {"orders": 4}
    assert get_broker().partitions.count("orders") == 4
    assert get_broker().partitions.count("emails") == 1


def test_missing_cache_alias_says_what_to_do(queue_name: str, settings: Any) -> None:
    settings.REDISQ = {"CONNECTION": "queues"}
    with pytest.raises(SettingsError, match=r"settings\.CACHES does not have\. Add a django-redis"):
        redisq_django.publish(queue_name, {})


def test_unreachable_redis_is_one_clear_error(queue_name: str, settings: Any) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.REDISQ = {"URL": f"redis://:secret-password@127.0.0.1:{port}/0"}
    with pytest.raises(RedisUnavailable) as info:
        redisq_django.publish(queue_name, {})
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "secret-password" not in str(info.value)


def test_importing_the_package_reads_no_settings() -> None:
    # Reusable apps must not touch settings at import time.
    code = "import redisq_django, redisq_django.core; print('ok')"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_example_project_refuses_to_start_without_the_demo_redis_url(tmp_path: Path) -> None:
    # Given a terminal that did not source example_project/.demo/env (no REDISQ_URL)
    env = {k: v for k, v in os.environ.items() if k not in {"REDISQ_URL", "DJANGO_SETTINGS_MODULE"}}
    env["EXAMPLE_DB"] = str(tmp_path / "db.sqlite3")
    cwd = ROOT / "example_project"

    # When it runs a command of the example project, or imports its settings otherwise
    command = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    imported = subprocess.run(
        [sys.executable, "-c", "import example_project.settings"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then both stop, saying how to reach the demo's Redis, never guessing 127.0.0.1:6379;
    # manage.py says it in one message, without a traceback
    assert command.returncode == 1
    assert "REDISQ_URL is not set" in command.stderr
    assert "source example_project/.demo/env" in command.stderr
    assert "Traceback" not in command.stderr
    assert imported.returncode == 1
    assert "ImproperlyConfigured: REDISQ_URL is not set" in imported.stderr
    assert not (tmp_path / "db.sqlite3").exists()


@pytest.mark.slow
# The example project declares its consumers in code, on the fixed queue "orders".
@pytest.mark.usefixtures("empty_redis")
def test_example_project_demo_runs_end_to_end(redis_url: str, tmp_path: Path) -> None:
    # The steps `make demo` runs (example_project/demo.sh), against the session Redis.
    env = {**os.environ, "REDISQ_URL": redis_url, "EXAMPLE_DB": str(tmp_path / "db.sqlite3")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    cwd = ROOT / "example_project"
    register = (
        "from redisq_django.connection import get_broker\n"
        "for n in ('billing', 'email', 'fraud-check'):\n"
        "    get_broker().consumers.ensure('orders', n)\n"
    )
    outputs = []
    for args in (
        ["migrate", "--verbosity", "0"],
        ["shell", "--verbosity", "0", "-c", register],
        ["shop_demo", "setup"],
        ["runconsumer", "orders", "--burst", "--stats-interval", "0"],
        ["shop_demo", "report"],
    ):
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    report = outputs[-1]
    # 6 orders committed, 1 rolled back; billing and email handle all, fraud-check
    # holds the two over the limit, which end as dead letters after 3 attempts.
    assert "orders: 6" in report
    assert "billing      handled 6 of 6" in report
    assert "email        handled 6 of 6" in report
    assert "fraud-check  handled 4 of 6" in report
    assert "dead letters: 2" in report
    assert report.count("after 3 attempts: SuspiciousOrder") == 2
    client = redis.Redis.from_url(redis_url)
    assert client.xlen("redisq:{orders}:log") == 6
