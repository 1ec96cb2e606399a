"""A bulk retry of dead letters at scale (issue 36, point 7), through the real path
(``retry_matching``, what the admin's "Retry group" and the operator command call) on the
real Redis: several chunks' worth sent exactly once each, one Redis round trip per chunk
whatever its size (task dead letters too), Redis stopped mid-way, and two operators at
once. The process SIGKILLed between Redis's acceptance of a chunk and the commit:
tests/faults/test_bulk_retry_faults.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core import Broker
from redisq_django.deadletters import CHUNK, triage
from redisq_django.models import DeadLetter
from redisq_django.signals import dead_letters_retried
from tests.support.console_data import many_dead
from tests.support.reading import read_all
from tests.support.redis_server import RedisServer
from tests.support.round_trips import round_trips

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

#: Several chunks' worth, the last one short: 2 consumers x 1,300.
PER_CONSUMER = 1300
CONSUMERS = ("billing", "email")


def received(broker: Broker, queue: str, consumer: str) -> Counter[str]:
    """How many times each message id reached ``consumer`` (everything waiting, read)."""
    return Counter(m.id for m in read_all(broker, queue, consumer))


def test_several_chunks_are_each_sent_once_marked_and_recorded(
    queue_name: str, broker: Any
) -> None:
    # Given 2,600 dead letters of two consumers (6 chunks) and a staff user
    ids = {c: many_dead(broker, queue_name, c, PER_CONSUMER) for c in CONSUMERS}
    ops = User.objects.create(username="ops", is_staff=True)

    # When the user retries every one (what "Retry group" runs)
    result = deadletters.retry_matching(DeadLetter.objects.filter(queue=queue_name), ops)

    # Then every message reached its own consumer exactly once, as a first attempt
    assert (result.done, result.skipped, result.remaining, result.error) == (2600, 0, 0, "")
    for consumer in CONSUMERS:
        got = read_all(broker, queue_name, consumer)
        assert Counter(m.id for m in got) == Counter(ids[consumer])
        assert {m.attempts for m in got} == {1}
    # And each row is retried once, by the user, with one history entry each
    rows = DeadLetter.objects.filter(queue=queue_name)
    assert set(rows.values_list("status", "retry_count", "retried_by")) == {
        (DeadLetter.Status.RETRIED, 1, ops.pk)
    }
    assert Counter(LogEntry.objects.values_list("change_message", flat=True)) == {
        f"Retried: sent again to {queue_name}/{c}": PER_CONSUMER for c in CONSUMERS
    }
    assert LogEntry.objects.values("object_id").distinct().count() == 2600

    # When it is run again, nothing is left to send
    again = deadletters.retry_matching(DeadLetter.objects.filter(queue=queue_name), ops)
    assert (again.done, again.remaining) == (0, 0)
    assert all(received(broker, queue_name, c) == Counter() for c in CONSUMERS)


def test_one_redis_round_trip_per_chunk_whatever_its_size_task_results_included(
    queue_name: str, broker: Any, settings: Any
) -> None:
    # Given 1 + 10 + 500 dead letters of a Django task queue whose results are FAILED
    # (the tasks backend makes them READY again when they are retried)
    settings.TASKS = {
        "default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": [queue_name]}
    }
    queue = f"tasks.{queue_name}"
    ids = many_dead(broker, queue, "tasks", 1 + 10 + CHUNK)
    rows = DeadLetter.objects.filter(queue=queue)
    rows.filter(message_id__in=ids[:1]).update(error_class="Warm")
    rows.filter(message_id__in=ids[1:11]).update(error_class="KeyError")
    keys = broker.keys(queue)
    for message_id in ids:
        broker.client.hset(keys.task_result(message_id), "status", "FAILED")

    # When one is retried (the scripts loaded), then a chunk of 10 and one of 500, each
    # counting its writes to Redis
    trips = []
    for error_class in ("Warm", "KeyError", "ValueError"):
        with round_trips(broker.client) as counted:
            done = deadletters.retry_matching(rows.filter(error_class=error_class)).done
        trips.append((done, counted[0]))

    # Then the two chunks cost the same 2 round trips (the re-drive, the results), and
    # every result is READY again
    assert [(done, n) for done, n in trips[1:]] == [(10, 2), (CHUNK, 2)], trips
    assert {broker.client.hget(keys.task_result(m), "status") for m in ids} == {b"READY"}


def test_redis_stopped_mid_way_leaves_the_rest_dead_and_the_next_run_sends_each_once(
    settings: Any, redis_server_binary: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a Redis that keeps what it acknowledged across a restart (AOF, fsync always)
    server = RedisServer(
        redis_server_binary,
        tmp_path / "redis",
        extra_args=("--appendonly", "yes", "--appendfsync", "always"),
    ).start()
    try:
        settings.REDISQ = {"URL": server.url}
        broker = get_broker()
        ids = {c: many_dead(broker, queue_name, c, PER_CONSUMER) for c in CONSUMERS}

        # When Redis stops once the second chunk is committed
        def stop_after_two(sender: Any, rows: Any, **kwargs: Any) -> None:
            chunks.append(len(rows))
            if len(chunks) == 2:
                server.stop()

        chunks: list[int] = []
        dead_letters_retried.connect(stop_after_two)
        try:
            first = deadletters.retry_matching(DeadLetter.objects.filter(queue=queue_name))
        finally:
            dead_letters_retried.disconnect(stop_after_two)

        # Then it says so; the chunks done stay done, the others stay dead
        assert (first.done, first.remaining) == (2 * CHUNK, 2600 - 2 * CHUNK)
        assert "Cannot reach Redis" in first.error
        rows = DeadLetter.objects.filter(queue=queue_name)
        assert rows.filter(status=DeadLetter.Status.DEAD).count() == 2600 - 2 * CHUNK

        # When Redis is back and the retry runs again
        server.restart()
        second = deadletters.retry_matching(DeadLetter.objects.filter(queue=queue_name))

        # Then it sent the rest, and each message reached its consumer exactly once
        assert (second.done, second.remaining, second.error) == (2600 - 2 * CHUNK, 0, "")
        for consumer in CONSUMERS:
            assert received(broker, queue_name, consumer) == Counter(ids[consumer])
        assert not rows.filter(status=DeadLetter.Status.DEAD).exists()
    finally:
        server.stop()


def test_rows_another_operator_retried_meanwhile_are_not_sent_again(
    queue_name: str, broker: Any
) -> None:
    # Given 600 dead letters an operator has on screen (read, all dead)
    ids = many_dead(broker, queue_name, "billing", 600)
    seen = list(DeadLetter.objects.filter(queue=queue_name).order_by("pk"))
    # And another operator retries 250 of them in between
    others = DeadLetter.objects.filter(pk__in=[r.pk for r in seen[::2]][:250])
    assert deadletters.retry(others) == 250

    # When the first one retries what they saw (their objects still say "dead")
    done = deadletters.retry(seen)

    # Then only the 350 still dead were sent: each message reached billing once
    assert done == 350
    assert received(broker, queue_name, "billing") == Counter(ids)
    rows = DeadLetter.objects.filter(queue=queue_name)
    assert set(rows.values_list("status", "retry_count")) == {("retried", 1)}


def test_a_claim_that_keeps_losing_to_other_operators_gives_up_without_sending(
    queue_name: str, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given dead letters, and other operators who retry one of them between every read
    # and every claim of this retry (as many times as it claims)
    many_dead(broker, queue_name, "billing", 5)
    rows = list(DeadLetter.objects.filter(queue=queue_name).order_by("pk"))
    claim = triage._claim_and_redrive

    def others_first(todo: list[DeadLetter], *args: Any) -> list[DeadLetter]:
        DeadLetter.objects.filter(pk=todo[0].pk).update(status=DeadLetter.Status.DISCARDED)
        return claim(todo, *args)

    monkeypatch.setattr(triage, "_claim_and_redrive", others_first)

    # When this retry runs, then it stops with an error that says what to do
    with pytest.raises(deadletters.RetryConflict, match="Run the retry again"):
        deadletters.retry(rows)
    # And nothing was sent: the rows not taken by the others are still dead
    assert received(broker, queue_name, "billing") == Counter()
    assert DeadLetter.objects.filter(queue=queue_name, status="dead").count() == 5 - 3
