"""A schedule never overruns the limits of what it feeds (issue 34): a schedule catching up
on its missed ticks (``missed="all"``) publishes them at once into a queue whose consumer
is limited to 2/s, and the worker that evaluates the schedule and consumes the queue
(``build_worker``, as ``runconsumer``, in this process on the session's Redis) handles
every tick once, at that rate. The schedule publishes; the consumer's limit applies."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from django.utils import timezone

from redisq_django import Message, consumer
from redisq_django.consuming.declarations import registry as consumer_registry
from redisq_django.core.worker import WorkerOptions
from redisq_django.models import Schedule
from redisq_django.runner import build_worker
from redisq_django.schedules import periodic
from tests.support.flow import most_allowed, most_in_any_window, run_in_thread
from tests.support.ticks import published_ids, published_ticks
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

#: How far back the schedule's start is moved: the ticks it missed meanwhile, one a second.
MISSED_S = 6.5


class Handled:
    """What the limited consumer handled: each message id with when it began (this
    process's monotonic clock), and the most handlers running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: list[tuple[str, float]] = []
        self.running = 0
        self.most = 0

    def __call__(self, message: Message) -> None:
        with self.lock:
            self.at.append((message.id, time.monotonic()))
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.02)
        with self.lock:
            self.running -= 1

    def ids(self) -> list[str]:
        with self.lock:
            return [i for i, _ in self.at]


@pytest.fixture
def limited(queue_name: str, declarations: None) -> Iterator[Handled]:
    """A consumer of ``queue_name`` limited to 2/s (burst 1), four threads; the only
    declared consumer while the test runs."""
    saved = dict(consumer_registry._declarations)
    consumer_registry._declarations.clear()
    handled = Handled()

    @consumer(queue_name, name="limited", rate="2/s", burst=1, concurrency=4, start="earliest")
    def limited(message: Message) -> None:
        handled(message)

    try:
        yield handled
    finally:
        consumer_registry._declarations.clear()
        consumer_registry._declarations.update(saved)


def test_a_schedule_catching_up_feeds_a_limited_consumer_at_its_rate(
    limited: Handled, redisq_settings: object, queue_name: str, redis_client: redis.Redis
) -> None:
    # Given a schedule ticking every second into the limited consumer's queue, catching
    # up on every missed tick, that missed the last 6 (its start moved 6.5 s back, as
    # after a downtime of every worker)
    periodic(queue_name, every=1, queue=queue_name, missed="all", payload={"kind": "tick"})
    worker = build_worker([queue_name], options=WorkerOptions(stats_interval=0, block_ms=100))
    moved = Schedule.objects.filter(name=queue_name).update(
        since=timezone.now() - dt.timedelta(seconds=MISSED_S)
    )
    assert moved == 1
    # When the worker that evaluates the schedule and consumes the queue runs, until the
    # missed ticks are out; then the schedule is disabled (as in the admin), and the
    # worker runs on until it publishes no more and every tick is handled
    thread = run_in_thread(worker)
    try:
        wait_for(
            lambda: len(published_ids(redis_client, queue_name)) >= 6,
            timeout=10,
            what="the 6 missed ticks published",
        )
        Schedule.objects.filter(name=queue_name).update(enabled=False)
        time.sleep(2.5)  # the rows are read again every 2 s
        published = published_ids(redis_client, queue_name)
        wait_for(
            lambda: sorted(limited.ids()) == sorted(published),
            timeout=12,
            what="every published tick handled",
            describe=lambda: f"{len(limited.ids())} of {len(published)} handled",
        )
    finally:
        worker.stop()
        thread.join(timeout=15)
    assert not thread.is_alive()
    # Then the missed ticks went out together (within a second of each other), and no
    # tick was published after the schedule was disabled and read again
    ticks = published_ticks(redis_client, queue_name)
    assert len(ticks) >= 7
    catch_up = [appended for _, appended in ticks[:6]]
    assert max(catch_up) - min(catch_up) < 1000
    assert published_ids(redis_client, queue_name) == published
    # And the consumer handled each of them once
    assert sorted(limited.ids()) == sorted(published)
    assert len(set(limited.ids())) == len(limited.ids())
    # And at its rate, not at the schedule's burst: never more than 3 in any second (2/s,
    # +1: a window's two ends), one after another half a second apart
    times = [t for _, t in limited.at]
    assert most_in_any_window(times, 1.0) <= most_allowed(2, 1), sorted(
        t - min(times) for t in times
    )
    assert max(times) - min(times) >= (len(times) - 1) / 2 - 0.2
    assert limited.most == 1
