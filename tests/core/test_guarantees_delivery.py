"""Delivery guarantees of the core: C1 fan-out, C2 competing instances, C3 at-least-once,
C4 retries and dead letters, C5 delayed delivery. Real redis-server, no mocks."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Message
from redisq_django.core.outcome import Outcome
from tests.core.guarantee_helpers import age_pending, drain, fetch_nothing, ids, wait_for

pytestmark = pytest.mark.core_config(poll_interval_ms=20)


# -- C1: fan-out with persistence -------------------------------------------------------


def test_c1_each_logical_consumer_gets_every_message_also_when_offline(
    queue_name: str, broker: Broker
) -> None:
    # Given two logical consumers registered before publishing
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    n = 1_000
    payloads = [{"n": i, "text": f"order {i} ✓", "items": [i, {"x": None}]} for i in range(n)]

    # When N messages are published, in batches and one by one, mixed
    published: list[str] = []
    i = 0
    while i < n:
        if (i // 100) % 2 == 0:
            published += broker.publish_many(queue_name, payloads[i : i + 100])
            i += 100
        else:
            for _ in range(25):
                published.append(broker.publish(queue_name, payloads[i], headers={"i": i}))
                i += 1
    assert len(published) == n
    assert len(set(published)) == n
    # and a third consumer, offline during publishing, starts from the earliest entry
    broker.consumers.ensure(queue_name, "analytics", start="earliest")

    # Then each of the three receives exactly the N messages, payloads intact
    expected = dict(zip(published, payloads, strict=True))
    for group in ("billing", "email", "analytics"):
        with broker.subscribe(queue_name, group, f"{group}-1") as sub:
            got = drain(sub, expected=n, timeout_s=20, count=200)
            assert len(got) == n, group
            assert set(ids(got)) == set(published), group
            assert {m.id: m.payload for m in got} == expected, group
            assert all(m.attempts == 1 and m.consumer == group for m in got)
            assert fetch_nothing(sub, wait_ms=50) == []
    stats = broker.stats(queue_name)
    assert [(c.name, c.lag, c.in_flight) for c in stats.consumers] == [
        ("analytics", 0, 0),
        ("billing", 0, 0),
        ("email", 0, 0),
    ]


def test_c1_consumer_registered_latest_sees_only_later_messages(
    queue_name: str, broker: Broker
) -> None:
    # Given messages published before a consumer registered with the default start
    broker.publish_many(queue_name, [1, 2, 3])
    broker.consumers.ensure(queue_name, "late")
    # When more are published
    later = broker.publish_many(queue_name, [4, 5])
    # Then it gets only those
    with broker.subscribe(queue_name, "late", "i1") as sub:
        got = drain(sub, expected=2, timeout_s=5)
        assert ids(got) == later
        assert fetch_nothing(sub, wait_ms=50) == []


# -- C2: competing instances --------------------------------------------------------------


def test_c2_four_threads_split_the_work_without_duplicates(queue_name: str, broker: Broker) -> None:
    # Given one logical consumer with four instances (threads, one Subscription each)
    broker.consumers.ensure(queue_name, "billing")
    n = 10_000
    received: list[list[str]] = [[] for _ in range(4)]
    producer_done = threading.Event()
    errors: list[BaseException] = []
    deadline = time.monotonic() + 40

    def instance(index: int) -> None:
        try:
            sub = broker.subscribe(queue_name, "billing", f"worker-{index}")
            for _ in range(20_000):
                if time.monotonic() > deadline:
                    break
                batch = sub.fetch(count=50, block_ms=50)
                if batch:
                    received[index].extend(m.id for m in batch)
                    sub.ack(batch)
                elif producer_done.is_set() and sum(map(len, received)) >= n:
                    break
            sub.leave()
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=instance, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()

    # When N messages are published while they run
    published: list[str] = []
    for start in range(0, n, 500):
        published += broker.publish_many(queue_name, list(range(start, start + 500)))
    producer_done.set()
    for t in threads:
        t.join(timeout=max(1.0, deadline - time.monotonic() + 5))

    # Then the union is all N, none twice, and every instance took a share
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    everything = [i for part in received for i in part]
    duplicates = [i for i, c in Counter(everything).items() if c > 1]
    assert duplicates == []
    assert set(everything) == set(published)
    assert len(everything) == n
    assert all(part for part in received), [len(p) for p in received]
    consumer = broker.stats(queue_name).consumers[0]
    assert (consumer.lag, consumer.in_flight) == (0, 0)


def _process_instance(
    url: str, queue: str, index: int, out_path: str, stop: Any, ready: Any, timeout_s: float
) -> None:
    """One competing instance in its own process: writes each id it handled to a file."""
    client = redis.Redis.from_url(url)
    sub = Broker(client, CoreConfig(poll_interval_ms=20)).subscribe(
        queue, "billing", f"proc-{index}"
    )
    deadline = time.monotonic() + timeout_s
    ready.set()
    with open(out_path, "w") as out:
        for _ in range(100_000):
            if time.monotonic() > deadline:
                break
            batch = sub.fetch(count=50, block_ms=50)
            if batch:
                out.write("".join(f"{m.id}\n" for m in batch))
                out.flush()
                sub.ack(batch)
            elif stop.is_set():
                break
    sub.leave()
    client.close()


@pytest.mark.slow
def test_c2_four_processes_split_the_work_without_duplicates(
    queue_name: str, broker: Broker, redis_server: Any, tmp_path: Path
) -> None:
    # Given one logical consumer and four instances, each its own (spawned) process
    broker.consumers.ensure(queue_name, "billing")
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    readies = [ctx.Event() for _ in range(4)]
    files = [tmp_path / f"proc-{i}.ids" for i in range(4)]
    procs = [
        ctx.Process(
            target=_process_instance,
            args=(redis_server.url, queue_name, i, str(files[i]), stop, readies[i], 60.0),
            daemon=True,
        )
        for i in range(4)
    ]
    for p in procs:
        p.start()
    try:
        for ready in readies:
            assert ready.wait(30), "an instance process did not start"

        # When N messages are published
        n = 10_000
        published: list[str] = []
        for start in range(0, n, 500):
            published += broker.publish_many(queue_name, list(range(start, start + 500)))

        # and the consumer has drained (nothing undelivered, nothing in flight)
        def drained() -> bool:
            c = broker.stats(queue_name).consumers[0]
            return c.lag == 0 and c.in_flight == 0

        assert wait_for(drained, timeout_s=45, interval_s=0.1)
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=15)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)

    # Then the union of what the processes handled is all N, none twice
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    per_process = [f.read_text().split() for f in files]
    everything = [i for part in per_process for i in part]
    assert [i for i, c in Counter(everything).items() if c > 1] == []
    assert set(everything) == set(published)
    assert len(everything) == n
    assert sum(1 for part in per_process if part) >= 2, [len(p) for p in per_process]


# -- C3: at-least-once ------------------------------------------------------------------


def test_c3_unacked_message_is_reclaimed_after_visibility_timeout(
    queue_name: str, broker: Broker
) -> None:
    # Given a consumer whose instance A fetched a message and never acks it
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, {"order": 1})
    a = broker.subscribe(queue_name, "billing", "a", visibility_timeout_ms=300)
    b = broker.subscribe(queue_name, "billing", "b", visibility_timeout_ms=300)
    [first] = drain(a, expected=1, ack=False)
    assert (first.id, first.attempts) == (mid, 1)

    # When B looks before the visibility timeout: nothing; after it: the message
    assert b.reclaim() == []
    age_pending(broker.client, broker.keys(queue_name).log, "billing", 350)
    [again] = b.reclaim()

    # Then it is the same message, second delivery
    assert (again.id, again.payload, again.attempts) == (mid, {"order": 1}, 2)
    # A's late outcome no longer counts; B settles it
    assert a.fail(first, RuntimeError("late")).outcome is Outcome.LOST
    assert b.ack([again]) == 1
    assert broker.stats(queue_name).consumers[0].in_flight == 0
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_c3_dead_instance_heartbeat_releases_its_messages_before_the_timeout(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given instance A that announced itself alive for 200 ms, fetched, then went silent
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, "x")
    a = broker.subscribe(queue_name, "billing", "a", visibility_timeout_ms=60_000)
    b = broker.subscribe(queue_name, "billing", "b", visibility_timeout_ms=60_000)
    a.heartbeat(200)
    b.heartbeat(10_000)
    [held] = drain(a, expected=1, ack=False)
    assert broker.stats(queue_name).consumers[0].instances_alive == 2
    assert b.reclaim() == []  # A is still alive: its message stays with it

    # When A's heartbeat has expired (well before the 60 s visibility timeout)
    a.heartbeat(-1)  # its 200 ms ran out: the same score a silent instance ends with
    got = b.reclaim()

    # Then B took the message over, as its second delivery
    assert [(m.id, m.attempts) for m in got] == [(mid, 2)]
    assert held.id == mid
    assert broker.stats(queue_name).consumers[0].instances_alive == 1
    b.ack(got)
    assert broker.stats(queue_name).consumers[0].in_flight == 0


def test_c3_extend_keeps_a_long_handler_lease(queue_name: str, broker: Broker) -> None:
    # Given instance A handling a message longer than the 400 ms visibility timeout
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, "long")
    a = broker.subscribe(queue_name, "billing", "a", visibility_timeout_ms=400)
    b = broker.subscribe(queue_name, "billing", "b", visibility_timeout_ms=400)
    [msg] = drain(a, expected=1, ack=False)

    # When the lease keeps running out (the entry looks idle for 500 ms) but A extends it
    # each time before B tries to reclaim
    stolen: list[Message] = []
    for _ in range(10):
        age_pending(broker.client, broker.keys(queue_name).log, "billing", 500)
        assert a.extend([msg]) == []
        stolen += b.reclaim()

    # Then nobody else got it; A acks it as its only delivery
    assert stolen == []
    assert a.ack([msg]) == 1
    assert broker.stats(queue_name).consumers[0].in_flight == 0

    # And once a holder stops extending, the lease does expire
    mid2 = broker.publish(queue_name, "stuck")
    [msg2] = drain(a, expected=1, ack=False)
    age_pending(broker.client, broker.keys(queue_name).log, "billing", 450)
    [taken] = b.reclaim()
    assert (taken.id, taken.attempts) == (mid2, 2)
    assert a.extend([msg2]) == [msg2]  # A is told it no longer holds it
    assert mid != mid2


def test_c3_released_messages_go_to_another_instance_without_counting_an_attempt(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given instance A fetched three messages it will not start (shutting down)
    broker.consumers.ensure(queue_name, "billing")
    published = broker.publish_many(queue_name, ["a", "b", "c"])
    a = broker.subscribe(queue_name, "billing", "a")
    b = broker.subscribe(queue_name, "billing", "b")
    fetched = drain(a, expected=3, ack=False)
    assert ids(fetched) == published

    # When A releases them
    t0 = time.monotonic()
    assert a.release(fetched) == 3
    got = drain(b, expected=3, timeout_s=5, block_ms=500)
    elapsed = time.monotonic() - t0

    # Then B receives them within about a poll interval, still as first deliveries
    assert sorted(ids(got)) == sorted(published)
    assert [m.attempts for m in got] == [1, 1, 1]
    assert [m.payload for m in sorted(got, key=lambda m: published.index(m.id))] == list("abc")
    assert elapsed < 0.5
    stats = broker.stats(queue_name).consumers[0]
    assert (stats.in_flight, stats.waiting_retry, stats.direct, stats.dead) == (0, 0, 0, 0)


# -- C4: retries and dead letters ---------------------------------------------------------


def test_c4_poison_message_is_retried_with_backoff_then_dead_after_max_retries_plus_one(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given a consumer with max_retries=3, backoff 50 ms, and a handler that always
    # raises on the poison message while others keep arriving
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "billing", "i1", max_retries=3, backoff_s=0.05)
    poison = broker.publish(queue_name, {"poison": True}, headers={"trace": "t-1"})
    deliveries: list[tuple[float, int]] = []  # (time, attempts) of the poison message
    failures: list[float] = []
    outcomes: list[Outcome] = []
    others: list[str] = []
    others_received: list[tuple[str, float]] = []
    deadline = time.monotonic() + 10

    for _ in range(2_000):
        if time.monotonic() > deadline or Outcome.DEAD in outcomes:
            break
        for msg in sub.fetch(count=10, block_ms=50):
            now = time.time()
            if msg.id != poison:
                others_received.append((msg.id, now))
                assert msg.attempts == 1
                sub.ack([msg])
                continue
            deliveries.append((now, msg.attempts))
            try:
                raise ValueError(f"cannot bill order, attempt {msg.attempts}")
            except ValueError as exc:
                failures.append(time.time())
                outcomes.append(sub.fail(msg, exc).outcome)
            # another message published while the poison one waits for its retry
            others.append(broker.publish(queue_name, {"normal": len(others)}))

    # Then: 4 deliveries (attempts 1..4), retried 3 times, dead on the 4th failure
    assert [a for _, a in deliveries] == [1, 2, 3, 4]
    assert outcomes == [Outcome.RETRIED] * 3 + [Outcome.DEAD]
    # each redelivery came no sooner than the lower bound of its backoff
    for k in (1, 2, 3):
        lower = 0.05 / 2 * 2 ** (k - 1)
        gap = deliveries[k][0] - failures[k - 1]
        assert gap >= lower - 0.002, (k, gap, lower)  # 2 ms: ms rounding of due times
    # the other messages kept flowing meanwhile: all but the last arrived before the
    # poison message's next delivery
    drain(sub, expected=1, timeout_s=2)  # the one published after the final failure
    received = dict(others_received)
    assert set(others[:3]) <= set(received)
    for k in range(3):
        assert received[others[k]] <= deliveries[k + 1][0] + 0.001

    # And the dead letter carries everything
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert dead.id == poison
    assert dead.payload == {"poison": True}
    assert dead.headers == {"trace": "t-1"}
    assert dead.attempts == 4
    assert dead.reason == "failed"
    assert dead.error_class == "ValueError"
    assert dead.error_message == "cannot bill order, attempt 4"
    assert "Traceback" in dead.traceback and "ValueError: cannot bill order" in dead.traceback
    assert dead.first_failed_at is not None and dead.last_failed_at is not None
    assert dead.first_failed_at <= dead.last_failed_at
    assert dead.first_failed_at.timestamp() == pytest.approx(failures[0], abs=0.05)
    assert dead.last_failed_at.timestamp() == pytest.approx(failures[-1], abs=0.05)
    stats = broker.stats(queue_name).consumers[0]
    assert (stats.dead, stats.in_flight, stats.waiting_retry, stats.direct) == (1, 0, 0, 0)


def test_c4_reject_dead_letters_at_once(queue_name: str, broker: Broker) -> None:
    # Given a consumer with retries left
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "billing", "i1", max_retries=5)
    mid = broker.publish(queue_name, {"bad": "input"})
    [msg] = drain(sub, expected=1, ack=False)

    # When the handler rejects the message
    assert sub.reject(msg, ValueError("malformed order")).outcome is Outcome.DEAD

    # Then it is a dead letter at once, never retried
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert (dead.id, dead.reason, dead.attempts) == (mid, "rejected", 1)
    assert (dead.error_class, dead.error_message) == ("ValueError", "malformed order")
    assert fetch_nothing(sub, wait_ms=150) == []
    stats = broker.stats(queue_name).consumers[0]
    assert (stats.in_flight, stats.waiting_retry, stats.dead) == (0, 0, 1)


def test_c4_message_whose_instances_keep_crashing_is_dead_as_lease_expired(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given max_retries=2 and instances that fetch the message and crash (never settle)
    max_retries = 2
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, "crashy")
    subs = [
        broker.subscribe(
            queue_name, "billing", f"i{k}", max_retries=max_retries, visibility_timeout_ms=100
        )
        for k in range(6)
    ]
    deliveries = [m.attempts for m in drain(subs[0], expected=1, ack=False)]

    # When each next instance reclaims it after the visibility timeout, and crashes too
    for k in range(1, 6):
        age_pending(broker.client, broker.keys(queue_name).log, "billing", 130)
        got = subs[k].reclaim()
        if not got:
            break
        deliveries += [m.attempts for m in got]

    # Then it was delivered max_retries + 1 times, then became a dead letter
    assert deliveries == [1, 2, 3]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert dead.id == mid
    assert dead.reason == "lease_expired"
    assert dead.attempts == max_retries + 1
    assert dead.payload == "crashy"
    assert dead.first_failed_at is not None and dead.last_failed_at is not None
    stats = broker.stats(queue_name).consumers[0]
    assert (stats.in_flight, stats.dead) == (0, 1)


def test_c4_settled_failures_are_not_crashes_in_the_lease_expired_budget(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given max_retries=2 and a message whose envelope counts 3 deliveries, all failures
    # its handler settled (as a Django task's retry carries them: `failures`)
    max_retries = 2
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    broker.client.xadd(
        broker.keys(queue_name).log,
        {"payload": '"flaky"', "id": "m-1", "attempts": "3", "failures": "3"},
    )
    subs = [
        broker.subscribe(
            queue_name, "billing", f"i{k}", max_retries=max_retries, visibility_timeout_ms=100
        )
        for k in range(6)
    ]
    got = drain(subs[0], expected=1, ack=False)
    deliveries = [(m.attempts, m.failures) for m in got]

    # When instances keep crashing on it (each next one reclaims it, and crashes too)
    for k in range(1, 6):
        age_pending(broker.client, broker.keys(queue_name).log, "billing", 130)
        got = subs[k].reclaim()
        if not got:
            break
        deliveries += [(m.attempts, m.failures) for m in got]

    # Then only the crashes count against max_retries: it runs max_retries + 1 = 3 times
    # more, crashing each time, before it is a dead letter
    assert deliveries == [(4, 3), (5, 3), (6, 3)]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert (dead.id, dead.reason, dead.attempts) == ("m-1", "lease_expired", 6)
    assert dead.error_message == (
        "delivered 6 times without being acknowledged: the handler crashed or outran the "
        "visibility timeout 3 times (and failed 3 times)"
    )


def test_c4_redrive_goes_to_that_consumer_only_starting_at_attempt_one(
    queue_name: str, broker: Broker
) -> None:
    # Given a message one consumer dead-lettered and another handled
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    mid = broker.publish(queue_name, {"order": 7}, headers={"h": 1})
    billing = broker.subscribe(queue_name, "billing", "b1", max_retries=0)
    email = broker.subscribe(queue_name, "email", "e1")
    [msg] = drain(billing, expected=1, ack=False)
    assert billing.fail(msg, KeyError("customer")).outcome is Outcome.DEAD
    assert ids(drain(email, expected=1)) == [mid]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert dead.attempts == 1

    # When an operator re-drives it
    assert broker.dead_letters.redrive(queue_name, "billing", dead.entry_id) is not None

    # Then billing receives it again, same id and content, attempts from 1
    [again] = drain(billing, expected=1, ack=False)
    assert (again.id, again.payload, again.headers, again.attempts) == (
        mid,
        {"order": 7},
        {"h": 1},
        1,
    )
    billing.ack([again])
    # email does not see it again; the dead letter is gone; a second re-drive is a no-op
    assert fetch_nothing(email, wait_ms=150) == []
    assert broker.dead_letters.read(queue_name, "billing") == []
    assert broker.dead_letters.redrive(queue_name, "billing", dead.entry_id) is None
    stats = {c.name: c for c in broker.stats(queue_name).consumers}
    assert (stats["billing"].in_flight, stats["billing"].direct, stats["billing"].dead) == (
        0,
        0,
        0,
    )


# -- C5: delayed delivery -----------------------------------------------------------------


def test_c5_delayed_messages_are_never_early_and_arrive_soon_after_due(
    queue_name: str, broker: Broker
) -> None:
    # Given a consumer and messages delayed by 0.2-0.6 s, by delay= and eta=
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "billing", "i1")
    now = dt.datetime.now(dt.UTC)
    expected: dict[str, float] = {}  # id -> due (epoch seconds) as asked by the producer
    by_delay: set[str] = set()
    for k, delay in enumerate((0.2, 0.35, 0.5, 0.6)):
        t = time.time()
        mid = broker.publish(queue_name, {"delay": delay}, delay=delay)
        expected[mid] = t + delay
        by_delay.add(mid)
        eta = now + dt.timedelta(seconds=0.25 + k * 0.1, microseconds=777)
        expected[broker.publish(queue_name, {"eta": k}, eta=eta)] = eta.timestamp()
    immediate = broker.publish(queue_name, "now")
    assert broker.stats(queue_name).delayed == 8

    # When the consumer fetches until all arrived
    arrivals: dict[str, tuple[float, Message]] = {}
    deadline = time.monotonic() + 5
    for _ in range(500):
        if len(arrivals) == 9 or time.monotonic() > deadline:
            break
        for msg in sub.fetch(count=10, block_ms=100):
            arrivals[msg.id] = (time.time(), msg)
            sub.ack([msg])

    # Then each arrived at or after its due time, and not much later
    assert set(arrivals) == {*expected, immediate}
    assert arrivals[immediate][1].due_at is None
    for mid, due in expected.items():
        at, msg = arrivals[mid]
        assert msg.due_at is not None
        assert msg.due_at.timestamp() >= due - 0.002  # due_at is what the producer asked
        assert at >= msg.due_at.timestamp(), (mid, at, msg.due_at)
        # delay= is counted from the publish call (ms clock); eta= is exact
        assert at >= due - (0.002 if mid in by_delay else 0), (mid, at, due)
        assert at - due < 1.0, (mid, at - due)
        assert msg.attempts == 1
    assert broker.stats(queue_name).delayed == 0


def test_c5_eta_is_never_rounded_early(queue_name: str, broker: Broker) -> None:
    # Given an eta with sub-millisecond precision
    broker.consumers.ensure(queue_name, "billing")
    eta = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.3)
    eta = eta.replace(microsecond=(eta.microsecond // 1000) * 1000 + 999)
    # When it is published and received
    mid = broker.publish(queue_name, "later", eta=eta)
    sub = broker.subscribe(queue_name, "billing", "i1")
    [msg] = drain(sub, expected=1, timeout_s=3)
    # Then its due time is not before the eta
    assert msg.id == mid
    assert msg.due_at is not None and msg.due_at >= eta


def test_c5_publish_many_with_delay(queue_name: str, broker: Broker) -> None:
    # Given a batch published with delay=0.3 s and one published at once
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "billing", "i1")
    t = time.time()
    delayed = broker.publish_many(queue_name, [{"k": k} for k in range(20)], delay=0.3)
    assert len(set(delayed)) == 20
    now_id = broker.publish(queue_name, "first")

    # When consuming
    first = drain(sub, expected=1, timeout_s=2, block_ms=20)
    rest = drain(sub, expected=20, timeout_s=5)
    arrived = time.time()

    # Then the immediate one came first; the batch only once due, all of it, intact
    assert ids(first) == [now_id]
    assert first[0].due_at is None
    assert set(ids(rest)) == set(delayed) and len(rest) == 20
    assert {m.id: m.payload for m in rest} == {d: {"k": k} for k, d in enumerate(delayed)}
    due = {m.due_at for m in rest}
    assert len(due) == 1  # one due time for the batch
    [due_at] = due
    assert due_at is not None and due_at.timestamp() >= t + 0.3 - 0.002
    assert arrived - due_at.timestamp() < 1.0
    assert broker.stats(queue_name).delayed == 0
