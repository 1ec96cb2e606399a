"""Per-minute trends (``core/trends.py``): the counters equal what was published,
handled, failed, retried and dead; they ride in the same write as the work they count;
every minute's hash expires after 48 h; the worker samples backlogs; instances report
who they are and what they run."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from redisq_django.core import (
    Broker,
    ConsumerSpec,
    CoreConfig,
    Message,
    Reject,
    RetryPolicy,
    trends,
)
from redisq_django.core.instances import read_instances
from redisq_django.core.pipelining import skipping_replies
from redisq_django.core.scripts import SCRIPT_NAMES
from redisq_django.core.worker import Worker, WorkerOptions
from tests.core.guarantee_helpers import drain
from tests.support.round_trips import round_trips

FAST_RETRIES = RetryPolicy(max_retries=2, backoff_s=0.01, max_backoff_s=0.02)


def totals(client: redis.Redis, broker: Broker, queue: str) -> dict[str, int]:
    """Every trend field of ``queue`` summed over the last hour."""
    (trend,) = trends.read_trends(client, [broker.keys(queue)], 60)
    out: dict[str, int] = {}
    for minute in trend.minutes:
        for name, value in minute.items():
            out[name] = out.get(name, 0) + value
    return out


def test_the_counters_equal_what_was_published_handled_failed_retried_and_dead(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a queue whose consumer handles most messages, fails some once, and can never
    # handle the poison ones (dead after 3 attempts) or the rejected one
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=10))
    broker.consumers.ensure(queue_name, "billing")
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def handler(message: Message) -> None:
        n = message.payload["n"]
        with lock:
            attempts[n] = attempts.get(n, 0) + 1
        if n % 10 == 1 and attempts[n] == 1:
            raise ValueError("flaky, once")
        if n in (5, 15):
            raise ValueError("poison")
        if n == 7:
            raise Reject("never")
        if n == 0:
            time.sleep(0.05)  # handler time shows in the trends

    # When 40 messages are published in every way (one by one, in a batch, delayed)
    ids = [broker.publish(queue_name, {"n": n}) for n in range(10)]
    ids += broker.publish_many(queue_name, [{"n": n} for n in range(10, 38)])
    ids += [broker.publish(queue_name, {"n": n}, delay=0.05) for n in (38, 39)]
    # ... and a worker runs until everything is settled
    spec = ConsumerSpec(queue_name, "billing", handler, policy=FAST_RETRIES)
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    time.sleep(0.1)  # the delayed ones are due before the burst could end
    # (with no script loaded: a write answered NOSCRIPT is sent again, not counted again)
    redis_client.script_flush()
    assert Worker(broker, [spec], options).run() == 0

    # Then the trends say exactly that
    got = totals(redis_client, broker, queue_name)
    flaky = [n for n in range(40) if n % 10 == 1]
    assert got["published"] == len(ids) == 40
    assert got["handled:billing"] == 40 - 3  # all but two poison and one rejected
    assert got["retried:billing"] == len(flaky) + 2 * 2  # each poison retried twice
    assert got["dead:billing"] == 3
    assert got["failed:billing"] == len(flaky) + 2 * 3 + 1
    assert got["failed:billing"] == sum(attempts.values()) - got["handled:billing"]
    assert got["ms:billing"] >= 50  # at least message 0's sleep
    assert broker.stats(queue_name).consumers[0].dead == 3


def test_a_subscription_counts_acks_and_failures_it_settles_itself(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(retry=FAST_RETRIES))
    broker.consumers.ensure(queue_name, "email")
    broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    with broker.subscribe(queue_name, "email") as sub:
        got = sub.fetch(count=10, block_ms=200)
        for m in got[:3]:
            m.duration_ms = 7
        sub.ack(got[:3])
        sub.fail(got[3], ValueError("again"))
        sub.reject(got[4], ValueError("never"))
        report = (sub.report.handled, sub.report.failed)
    counts = totals(redis_client, broker, queue_name)
    assert {k: v for k, v in counts.items() if k.endswith(":email")} == {
        "handled:email": 3,
        "ms:email": 21,
        "failed:email": 2,
        "retried:email": 1,
        "dead:email": 1,
    }
    assert report == (3, 2)


def test_counters_ride_in_the_same_write_as_the_work_they_count(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given the same work done with trends off and on
    def work(on: bool, queue: str) -> int:
        broker = Broker(redis_client, CoreConfig(trends=on, retry=FAST_RETRIES))
        broker.consumers.ensure(queue, "billing")
        broker.publish(queue, {"n": 0})  # registers the queue name (a write of its own)
        sub = broker.subscribe(queue, "billing")
        for name in SCRIPT_NAMES:  # loaded: no NOSCRIPT round trips in either run
            broker.scripts.load(name)
        with round_trips(redis_client) as writes:
            broker.publish(queue, {"n": 1})
            broker.publish_many(queue, [{"n": 2}, {"n": 3}])
            broker.publish(queue, {"n": 4}, delay=0.01)
            batch = sub.fetch(count=10, block_ms=100)
            sub.ack(batch[:2])
            sub.fail(batch[2], ValueError("x"))
        sub.leave()
        return writes[0]

    off = work(False, f"{queue_name}.off")
    on = work(True, f"{queue_name}.on")
    # Then counting costs no write, no round trip of its own
    assert on == off
    counts = totals(redis_client, Broker(redis_client), f"{queue_name}.on")
    assert (counts["published"], counts["handled:billing"], counts["retried:billing"]) == (5, 2, 1)
    assert totals(redis_client, Broker(redis_client), f"{queue_name}.off") == {}


def test_every_minute_expires_after_48_hours(redis_client: redis.Redis, queue_name: str) -> None:
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1})
    now = trends.minute_of(int(time.time() * 1000))
    keys = [broker.keys(queue_name).trend(m) for m in (now - 1, now)]
    ttls = [redis_client.ttl(k) for k in keys if redis_client.exists(k)]
    assert ttls and all(trends.TTL_S - 60 <= t <= trends.TTL_S for t in ttls)


def test_a_write_that_failed_sends_the_expire_again(
    redis_client: redis.Redis, queue_name: str
) -> None:
    keys = Broker(redis_client).keys(queue_name)
    counter = trends.Counter(keys)
    assert [c[0] for c in counter.commands({"published": 1}, now=0)] == ["HINCRBY", "EXPIRE"]
    assert [c[0] for c in counter.commands({"published": 1}, now=1)] == ["HINCRBY"]
    counter.forget()
    assert [c[0] for c in counter.commands({"published": 1}, now=2)] == ["HINCRBY", "EXPIRE"]
    assert [c[0] for c in counter.commands({"published": 1}, now=60_000)] == ["HINCRBY", "EXPIRE"]
    assert counter.commands({"published": 0}) == []


def test_the_publish_counter_is_built_once_a_minute_and_sends_the_expire_again_after_a_failure(
    redis_client: redis.Redis, queue_name: str
) -> None:
    keys = Broker(redis_client).keys(queue_name)
    counter = trends.Counter(keys)
    first = counter.published(1)
    assert [c[0] for c in first] == ["HINCRBY", "EXPIRE"]
    again = counter.published(1)
    assert [c[0] for c in again] == ["HINCRBY"]
    assert counter.published(1) is again  # the same commands, packed once (below)
    assert skipping_replies(again) is skipping_replies(again)
    assert skipping_replies(again) == skipping_replies(list(again))
    assert [c[0] for c in counter.published(3)] == ["HINCRBY"]
    assert counter.published(3)[0][-1] == 3
    counter.forget()
    assert [c[0] for c in counter.published(1)] == ["HINCRBY", "EXPIRE"]


def test_the_worker_samples_backlog_in_flight_retrying_and_delayed(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    broker.publish_many(queue_name, [{"n": n} for n in range(6)])
    broker.publish(queue_name, {"late": True}, delay=3600)
    with broker.subscribe(queue_name, "email") as sub:
        held = sub.fetch(count=2, block_ms=100)
        trends.sample(redis_client, [broker.keys(queue_name)])
        sub.ack(held)
    (trend,) = trends.read_trends(redis_client, [broker.keys(queue_name)], 2)
    (bucket,) = trend.buckets(2)
    assert bucket.sample("backlog", ["billing"]) == 6
    assert bucket.sample("backlog", ["email"]) == 4
    assert bucket.sample("in_flight", ["email"]) == 2
    assert bucket.sample("backlog", ["billing", "email"]) == 10
    assert bucket.sample("delayed") == 1
    assert bucket.sample("retrying", ["billing"]) == 0


def test_buckets_sum_counters_and_keep_the_largest_sample() -> None:
    trend = trends.Trend(
        "q",
        100,
        [{"published": 2, "backlog:a": 5}, {}, {"published": 3, "backlog:a": 9, "backlog:b": 1}],
    )
    first, second = trend.buckets(2)
    assert (first.first_minute, first.size, second.size) == (100, 2, 1)
    assert (first.total("published"), second.total("published")) == (2, 3)
    assert (first.sample("backlog", ["a"]), second.sample("backlog", ["a", "b"])) == (5, 10)
    assert trends.Trend("q", 0, [{}, {}]).buckets(5)[0].sample("backlog", ["a"]) is None
    assert trend.consumers() == ["a", "b"]


def test_instances_report_host_pid_counts_and_what_they_run(
    redis_client: redis.Redis, queue_name: str
) -> None:
    import os
    import socket

    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": n} for n in range(3)])
    sub = broker.subscribe(queue_name, "billing", "w-1")
    idle = broker.subscribe(queue_name, "billing", "w-2")
    batch = sub.fetch(count=3, block_ms=100)
    sub.ack(batch[:1])
    sub.heartbeat(15_000, running=batch[1])
    idle.heartbeat(15_000)
    redis_client.hset(broker.keys(queue_name).group("billing").running, "w-1",
                      f"log:{batch[1].entry_id.decode()}")  # fmt: skip

    one, two = read_instances(redis_client, broker.keys(queue_name).group("billing"))

    assert (one.name, one.alive, one.in_flight, one.busy) == ("w-1", True, 2, True)
    assert one.report["host"] == socket.gethostname() and one.report["pid"] == os.getpid()
    assert (one.report["handled"], one.report["failed"]) == (1, 0)
    assert one.report["running"] == f"log:{batch[1].entry_id.decode()}"
    assert one.last_heartbeat_ms is not None and abs(one.last_heartbeat_ms / 1000 - time.time()) < 5
    assert (two.name, two.in_flight, two.busy, two.report["running"]) == ("w-2", 0, False, "")
    # A clean leave takes the instance and its report away
    idle.leave()
    assert [
        i.name for i in read_instances(redis_client, broker.keys(queue_name).group("billing"))
    ] == ["w-1"]
    report_key = broker.keys(queue_name).group("billing").instance("w-1")
    assert 0 < redis_client.pttl(report_key) <= 15_000 + 60_000
    assert json.loads(redis_client.get(report_key))["started"] <= time.time() * 1000


def test_a_retry_carries_its_last_error_for_the_operators(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(retry=FAST_RETRIES))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1})
    with broker.subscribe(queue_name, "billing") as sub:
        (m,) = drain(sub, expected=1, ack=False)
        sub.fail(m, ValueError("tax service answered 503"))
    (member,) = redis_client.zrange(broker.keys(queue_name).group("billing").retry, 0, -1)
    assert json.loads(member)["last_error"] == "ValueError: tax service answered 503"


@pytest.mark.parametrize("on", [True, False])
def test_the_trends_setting_turns_the_counters_on_and_off(
    redis_client: redis.Redis, queue_name: str, on: bool
) -> None:
    broker = Broker(redis_client, CoreConfig(trends=on))
    broker.publish(queue_name, {"n": 1})
    assert bool(totals(redis_client, broker, queue_name)) is on
