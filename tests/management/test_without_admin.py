"""A project without ``django.contrib.admin`` (a worker-only or API-only service) runs
every management command of ours: each ``manage.py redisq`` sub-command (listed from the
command's parser, so that a new one must be added here), ``runconsumer`` and
``redisq_pipeline``, one after the other in a process of that project
(tests/settings_without_admin.py; ``tests/support/command_runner.py``) against a real
Redis and a migrated SQLite file; and its ``/metrics`` view answers."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.management.commands.redisq import Command as RedisqCommand
from tests.support.command_runner import CommandRunner
from tests.support.redis_server import RedisServer
from tests.support.workers import REPO_ROOT, Workers
from tests.workeronly.consumers import QUEUE

pytestmark = pytest.mark.slow

SETTINGS = "tests.settings_without_admin"
#: The /metrics view's bearer token in the project's settings (tests/settings.py).
TOKEN = "worker-only-scraper-token"
METRICS_SCRAPE = (
    "from django.test import Client; "
    f"r = Client().get('/redisq/metrics', headers={{'authorization': 'Bearer {TOKEN}'}}); "
    "print(r.status_code, b'redisq_redis_up 1.0' in r.content)"
)


@dataclass(frozen=True)
class Step:
    """One command run: its ``redisq`` sub-command (None: another command), arguments,
    exit status and a pattern its stdout (or, failing, its stderr) matches."""

    sub_command: tuple[str, ...] | None
    argv: tuple[str, ...]
    expect: str
    code: int = 0


#: In this order: the state each one finds is what the ones before left.
STEPS = [
    Step(None, ("check",), r"System check identified no issues"),
    Step(None, ("runconsumer", QUEUE, "--burst"), rf"redisq worker .*\n  {QUEUE}/keeper \["),
    Step(("status",), ("redisq", "status"), rf"{QUEUE}\s+\(all\)\s+0 .*\n\s+keeper\s+0 "),
    Step(("schedules",), ("redisq", "schedules"), r"No schedules"),
    Step(("dead", "sink"), ("redisq", "dead", "sink"), r"Moved \d+ dead letter\(s\) from Redis"),
    Step(("dead", "list"), ("redisq", "dead", "list"), r"(?m)^\d+\s+workeronly\s+keeper\s+"),
    Step(("dead", "causes"), ("redisq", "dead", "causes"), r"(?m)^2\s+workeronly\s+keeper\s+"),
    # The deprecated name of 'dead causes' (0.9) still works.
    Step(("dead", "groups"), ("redisq", "dead", "groups"), r"(?m)^2\s+workeronly\s+keeper\s+"),
    Step(
        None,
        ("redisq", "dead", "retry", "--all", "--user", "ops"),
        r"--user records the change in the admin history, which needs django.contrib.admin",
        code=1,
    ),
    Step(("dead", "retry"), ("redisq", "dead", "retry", "{dead_id}"), r"Re-drove 1 dead letter"),
    Step(
        ("dead", "discard"),
        ("redisq", "dead", "discard", "--all", "--queue", QUEUE),
        r"Discarded 1 dead letter\(s\)\.",
    ),
    Step(
        ("replay",),
        ("redisq", "replay", QUEUE, "keeper", "--from", "earliest"),
        rf"{QUEUE}/keeper now reads from earliest\.",
    ),
    # keeper reads the log again from the start: its first message waits there
    Step(
        ("end",),
        ("redisq", "end", QUEUE, "keeper", "{first_id}"),
        rf"Marked 1 message\(s\) waiting in the log for {QUEUE}/keeper: ",
    ),
    Step(("deliver-now",), ("redisq", "deliver-now", QUEUE, "--list"), r"(?m)^ID\s+KEY\s+DUE"),
    Step(None, ("redisq", "deliver-now", QUEUE, "--all"), r"Delivered 1 delayed message"),
    Step(("held",), ("redisq", "held", QUEUE, "keeper"), r"No ordering key of \S+ holds back"),
    Step(
        ("release-key",),
        ("redisq", "release-key", QUEUE, "keeper", "cart-1"),
        r"Ordering key 'cart-1' holds back nothing on",
        code=1,
    ),
    Step(("partitions",), ("redisq", "partitions", QUEUE), rf"{QUEUE}: 1 partition\(s\) in Redis"),
    Step(("relay",), ("redisq", "relay", "--once"), r"Sent 0 outbox message\(s\); 0 waiting\."),
    Step(("inbox", "count"), ("redisq", "inbox", "count"), r"The inbox is empty\."),
    Step(("inbox", "prune"), ("redisq", "inbox", "prune"), r"Deleted 0 inbox row\(s\)\."),
    Step(
        ("archives", "list"),
        ("redisq", "archives", "list"),
        rf"(?m)^{QUEUE}\s+nightly\s+messages\s",
    ),
    Step(
        ("archives", "remove"),
        ("redisq", "archives", "remove", "nightly", "--queue", QUEUE, "--yes"),
        rf"Removed archive 'nightly' from {QUEUE}\.",
    ),
    Step(
        None,
        ("redisq", "purge", QUEUE, "--consumer", "keeper", "--yes"),
        rf"Purged {QUEUE}/keeper: skipped",
    ),
    Step(("purge",), ("redisq", "purge", QUEUE, "--yes"), rf"Purged {QUEUE}\."),
    Step(None, ("redisq_pipeline", "--help"), r"archive,report,replay,compact|JOB"),
    # Not a command: the /metrics view, for a scraper with the bearer token
    Step(None, ("shell", "-c", METRICS_SCRAPE), r"200 True"),
]


def _sub_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> set[Any]:
    """The leaves of ``parser``'s tree of sub-commands: ``("dead", "list")``..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path}
    return set().union(*(_sub_commands(p, (*path, n)) for n, p in subs[0].choices.items()))


def test_every_redisq_sub_command_is_run_without_the_admin() -> None:
    parser = RedisqCommand().create_parser("manage.py", "redisq")

    # A sub-command added to the parser fails here until STEPS runs it.
    assert {("dead", "list"), ("status",)} <= _sub_commands(parser)
    assert _sub_commands(parser) == {s.sub_command for s in STEPS if s.sub_command}


def test_a_project_without_the_admin_runs_every_command(
    volatile_redis_server: RedisServer, tmp_path: Path
) -> None:
    # Given a migrated worker-only project and messages for its consumer: three it
    # handles, two it refuses (dead at once), one delayed for an hour
    project = Workers(volatile_redis_server.url, tmp_path / "db.sqlite3", tmp_path)
    env = project.env(DJANGO_SETTINGS_MODULE=SETTINGS, REDISQ_TEST_METRICS_TOKEN=TOKEN)
    runner = CommandRunner(REPO_ROOT, env, tmp_path / "runner.err", spark=False, timeout=120)
    migrated = runner.run(["manage.py", "migrate", "--verbosity", "0"])
    assert migrated.returncode == 0, migrated.stderr
    client = redis.Redis.from_url(volatile_redis_server.url)
    broker = Broker(client, CoreConfig())
    first_id = broker.publish_many(QUEUE, [{"n": n, "fail": n >= 3} for n in range(5)])[0]
    broker.publish(QUEUE, {"n": 5}, delay=3600)
    broker.archives.register(QUEUE, "nightly", "messages", "earliest")  # a named archive
    found = {"{first_id}": first_id}  # placeholders in STEPS, and what they stand for

    try:
        # When each command runs, in order, in the project's process
        for step in STEPS:
            argv = [found.get(a, a) for a in step.argv]  # "{dead_id}": found by 'dead list'

            done = runner.run(["manage.py", *argv])

            # Then it exits as expected and says what it did
            shown = done.stdout if step.code == 0 else done.stderr
            assert done.returncode == step.code, f"{argv}: {done.stdout}\n{done.stderr}"
            assert re.search(step.expect, shown), f"{argv}: {shown}"
            if step.sub_command == ("dead", "list"):
                ids = re.findall(rf"(?m)^(\d+)\s+{QUEUE}\s+keeper\s+", done.stdout)
                assert len(ids) == 2
                found["{dead_id}"] = ids[0]
    finally:
        runner.stop()
    # And Redis saw what the commands did: the consumer purged, the queue emptied
    assert client.xlen(broker.keys(QUEUE).log) == 0
    client.close()
