"""A bulk retry of dead letters SIGKILLed between Redis's acceptance of a chunk and the
commit of its rows (issue 36, point 7; the write order in
``redisq_django/deadletters/triage.py``): nothing is lost, and only that chunk is sent a
second time when the retry runs again.

The retries run as ``manage.py shell -c`` (the product's code) on the workers' SQLite
file, with a failpoint around ``redrive_envelopes``, as the relay's in
tests/faults/test_exactly_once_faults.py.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections import Counter
from typing import Any

import pytest

from redisq_django.deadletters import CHUNK
from tests.support.reading import read_all
from tests.support.workers import Workers

pytestmark = [pytest.mark.slow, pytest.mark.django_db, pytest.mark.site_broker]

SEED = """
import json
from redisq_django.connection import get_broker
from redisq_django.models import DeadLetter
get_broker().consumers.ensure(QUEUE, "billing")
DeadLetter.objects.bulk_create(
    DeadLetter(queue=QUEUE, consumer="billing", message_id=f"m-{i:05}", reason="failed",
               payload=json.dumps({"n": i}),
               envelope={"id": f"m-{i:05}", "payload": json.dumps({"n": i})})
    for i in range(N)
)
"""

RETRY = """
import os, signal
from redisq_django.connection import get_broker
from redisq_django.deadletters import retry_matching
from redisq_django.models import DeadLetter
broker = get_broker()
if DIE:
    redrive = broker.dead_letters.redrive_envelopes
    calls = []

    def dies_on_the_second(targets, **options):
        replies = redrive(targets, **options)
        calls.append(len(targets))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # Redis has the chunk; its rows say dead
        return replies

    broker.dead_letters.redrive_envelopes = dies_on_the_second
result = retry_matching(DeadLetter.objects.filter(queue=QUEUE), broker=broker)
print(json.dumps([result.done, result.remaining, result.error]))
"""


def _code(body: str, **names: Any) -> str:
    return "import json\n" + "".join(f"{k} = {v!r}\n" for k, v in names.items()) + body


def test_a_process_killed_between_redis_and_the_commit_loses_nothing_and_resends_one_chunk(
    workers: Workers, broker: Any, queue_name: str
) -> None:
    # Given 1,300 dead letters (3 chunks) in the database the processes share
    n = 1300
    seeded = workers.run("shell", "-c", _code(SEED, QUEUE=queue_name, N=n))
    assert seeded.returncode == 0, seeded.stderr

    # When a retry is SIGKILLed after Redis accepted its second chunk, before the commit
    killed = workers.run("shell", "-c", _code(RETRY, QUEUE=queue_name, DIE=True))
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    # Then the first chunk is retried, the second and third are still dead
    def statuses() -> Counter[str]:
        conn = sqlite3.connect(workers.db_path, timeout=30)
        try:
            found = conn.execute(
                "SELECT status FROM redisq_django_deadletter WHERE queue = ?", (queue_name,)
            )
            return Counter(status for (status,) in found)
        finally:
            conn.close()

    assert statuses() == {"retried": CHUNK, "dead": n - CHUNK}

    # When the retry runs again, it finishes
    again = workers.run("shell", "-c", _code(RETRY, QUEUE=queue_name, DIE=False))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == [n - CHUNK, 0, ""]
    assert statuses() == {"retried": n}

    # Then no message was lost, and the chunk in flight at the kill, only it, came twice
    got = Counter(m.id for m in read_all(broker, queue_name, "billing"))
    assert set(got) == {f"m-{i:05}" for i in range(n)}
    twice = sorted(m for m, count in got.items() if count == 2)
    assert twice == [f"m-{i:05}" for i in range(CHUNK, 2 * CHUNK)]
    assert max(got.values()) == 2
