"""Redis saying no: publishers get a RedisRefused naming the condition, and a worker
waits every refusal out (a full Redis, a removed consumer group) instead of dying, while
a handler thread that dies of something unexpected stops its worker (exit code 1).

Real redis-server processes: a private one per test (they break it, or leave keys that
no other test should meet).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message, RedisRefused
from redisq_django.core.clock import monotonic_ms
from redisq_django.core.errors import refusal_condition
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.subscription import PROMOTE_RETRY_MS
from redisq_django.core.worker import Worker, WorkerOptions
from tests.core.guarantee_helpers import wait_for
from tests.support.redis_server import RedisServer, free_port

FILLER = "test:filler"


@pytest.fixture
def client(volatile_redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = volatile_redis_server.client()
    try:
        yield conn
    finally:
        conn.close()


def make_full(client: redis.Redis) -> None:
    """Make Redis refuse writes (OOM) until the filler key is deleted."""
    client.config_set("maxmemory-policy", "noeviction")
    # Written in small pieces: a big command's input buffer would count in used_memory
    # for a moment, and Redis would no longer be full once it is released.
    for _ in range(40):
        client.append(FILLER, b"x" * 100_000)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used - 1_000_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("test:probe", b"x")


# -- publishers ---------------------------------------------------------------------------


def test_publishers_get_redis_refused_naming_oom_when_redis_is_full(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a queue published to before, and then a full Redis (noeviction)
    broker = Broker(client)
    broker.publish(queue_name, {"before": True})
    make_full(client)

    # When publishing in every way, then each raises RedisRefused naming the condition
    calls = {
        "publish": lambda: broker.publish(queue_name, {"n": 1}),
        "publish delayed": lambda: broker.publish(queue_name, {"n": 2}, delay=5),
        "publish_many": lambda: broker.publish_many(queue_name, [{"n": 3}, {"n": 4}]),
        "send once": lambda: broker.send(
            [broker.prepare(queue_name, {"n": 5}, id="order-5")], once=True
        ),
    }
    for name, call in calls.items():
        with pytest.raises(RedisRefused) as info:
            call()
        assert info.value.condition == "oom", name
        text = str(info.value)
        assert "out of memory" in text and "maxmemory" in text, text
        assert not isinstance(info.value.__cause__, RedisRefused)

    # And once memory is freed, publishing works again (nothing half-written before)
    client.delete(FILLER)
    broker.publish(queue_name, {"after": True})
    assert client.xlen(broker.keys(queue_name).log) == 2


def test_publish_to_a_read_only_replica_raises_redis_refused_readonly(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a Redis that became a replica (of a master that is not there)
    broker = Broker(client)
    client.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))
    try:
        # When publishing, then the refusal names the condition and what to do
        with pytest.raises(RedisRefused) as info:
            broker.publish(queue_name, {"n": 1})
        assert info.value.condition == "readonly"
        assert "read-only replica" in str(info.value) and "master" in str(info.value)
    finally:
        client.execute_command("REPLICAOF", "NO", "ONE")


@pytest.mark.parametrize(
    ("error", "condition"),
    [
        (redis.exceptions.OutOfMemoryError("command not allowed when used memory > "), "oom"),
        (redis.exceptions.ReadOnlyError("You can't write against a replica."), "readonly"),
        (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "loading"),
        (redis.exceptions.MasterDownError("Link with MASTER is down"), "masterdown"),
        (redis.exceptions.ClusterDownError("The cluster is down"), "clusterdown"),
        (redis.ResponseError("BUSY Redis is busy running a script."), "busy"),
        (redis.ResponseError("NOREPLICAS Not enough good replicas to write."), "noreplicas"),
        (redis.ResponseError("BUSYGROUP Consumer Group name already exists"), None),
        (redis.ResponseError("WRONGTYPE Operation against a key"), None),
        (redis.ConnectionError("Connection refused"), None),
    ],
)
def test_each_refusal_of_redis_has_its_condition(
    error: redis.RedisError, condition: str | None
) -> None:
    assert refusal_condition(error) == condition


# -- the worker ---------------------------------------------------------------------------


class Recorder:
    """A handler that records message ids; ``gate`` holds handlers while it is clear."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.started: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_first: set[str] = set()  # payload "tag"s that raise on their first delivery

    def __call__(self, message: Message) -> None:
        self.started.append(message.id)
        self.gate.wait(10)
        tag = message.payload.get("tag") if isinstance(message.payload, dict) else None
        if tag in self.fail_first and message.attempts == 1:
            raise RuntimeError(f"first delivery of {tag} fails")
        self.ids.append(message.id)


def run_in_thread(worker: Worker) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    thread.start()
    return thread, codes


class _Caught(logging.Handler):
    """The WARNING and higher records of the logger it is added to."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def options() -> WorkerOptions:
    return WorkerOptions(block_ms=100, reclaim_interval=0.5, stats_interval=0, grace_period=5)


def spec(queue: str, name: str, handler: Recorder) -> ConsumerSpec:
    policy = RetryPolicy(backoff_s=0.05, max_backoff_s=0.1)
    return ConsumerSpec(queue, name, handler, policy=policy, start="earliest")


@pytest.mark.slow
def test_worker_under_oom_keeps_acking_and_promotes_once_memory_is_freed(
    client: redis.Redis, queue_name: str
) -> None:
    # The worker's lines, caught on its own logger: whatever an earlier test of this
    # process did to propagation (caplog listens on the root), this test sees them
    caught = _Caught()
    worker_logger = logging.getLogger("redisq.worker")
    saved = (worker_logger.level, worker_logger.disabled)
    worker_logger.setLevel(logging.WARNING)
    worker_logger.disabled = False
    worker_logger.addHandler(caught)
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    handler = Recorder()
    worker = Worker(broker, [spec(queue_name, "billing", handler)], options())
    thread, codes = run_in_thread(worker)
    try:
        warm = broker.publish(queue_name, {"warm": 1})
        assert wait_for(lambda: warm in handler.ids, timeout_s=10)

        # Given messages waiting, delayed ones due in 1 s, and then a full Redis
        handler.gate.clear()
        waiting = broker.publish_many(queue_name, [{"n": i} for i in range(30)])
        delayed = [broker.publish(queue_name, {"d": i}, delay=1.0) for i in range(5)]
        assert wait_for(lambda: set(waiting) & set(handler.started), timeout_s=10)
        make_full(client)
        handler.gate.set()

        # Then the worker handles and acks every waiting message, stays alive, and the
        # delayed ones wait (their promotion is refused) without being lost
        assert wait_for(lambda: set(waiting) <= set(handler.ids), timeout_s=15), handler.ids
        time.sleep(1.5)  # past the due time
        assert thread.is_alive() and not worker.crashed
        assert not set(delayed) & set(handler.ids)
        log = broker.keys(queue_name).log
        assert client.xpending(log, "billing")["pending"] == 0
        assert client.zcard(broker.keys(queue_name).delayed) == 5

        # When memory is freed, then the delayed messages are promoted and handled
        client.delete(FILLER)
        assert wait_for(lambda: set(delayed) <= set(handler.ids), timeout_s=10), handler.ids
        assert thread.is_alive()
    finally:
        handler.gate.set()
        worker.stop()
        thread.join(15)
        worker_logger.removeHandler(caught)
        worker_logger.setLevel(saved[0])
        worker_logger.disabled = saved[1]
    assert codes == [0]
    lines = [r.getMessage() for r in caught.records]
    refused = [line for line in lines if "promotion" in line and "out of memory" in line]
    assert len(refused) == 1, lines  # logged once, not once per retry
    assert any("oom is over" in line for line in lines)


@pytest.mark.slow
def test_a_worker_starts_on_a_full_redis_and_drains_it(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a registered consumer with messages waiting, and a full Redis (which refuses
    # XGROUP CREATE and SADD even for a group and a queue that exist)
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    waiting = broker.publish_many(queue_name, [{"n": i} for i in range(20)])
    make_full(client)

    # When a worker (re)starts, as a supervisor would start it after a crash
    handler = Recorder()
    worker = Worker(
        Broker(client, CoreConfig(poll_interval_ms=50)),
        [spec(queue_name, "billing", handler)],
        options(),
    )
    thread, codes = run_in_thread(worker)
    try:
        # Then it runs and handles (and acks) what is waiting
        assert wait_for(lambda: set(waiting) <= set(handler.ids), timeout_s=10), codes
        assert client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0
    finally:
        worker.stop()
        thread.join(15)
    assert codes == [0]


@pytest.mark.slow
def test_a_consumer_whose_group_is_removed_mid_handler_consumes_again(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a worker running two logical consumers of one queue; billing's handler is
    # held on a message that fails
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    billing, email = Recorder(), Recorder()
    billing.fail_first = {"m1"}
    worker = Worker(
        broker, [spec(queue_name, "billing", billing), spec(queue_name, "email", email)], options()
    )
    thread, codes = run_in_thread(worker)
    try:
        billing.gate.clear()
        m1 = broker.publish(queue_name, {"tag": "m1"})
        assert wait_for(lambda: m1 in billing.started, timeout_s=10)

        # When billing's consumer group is removed while its handler runs
        client.execute_command("XGROUP", "DESTROY", broker.keys(queue_name).log, "billing")
        billing.gate.set()  # the handler fails: settling it meets NOGROUP

        # Then billing is registered again and consumes what comes next (and, from the
        # start of the log, m1 again); email never noticed
        m2 = broker.publish(queue_name, {"tag": "m2"})
        assert wait_for(lambda: {m1, m2} <= set(billing.ids), timeout_s=15), billing.ids
        assert wait_for(lambda: {m1, m2} <= set(email.ids), timeout_s=5), email.ids
        assert thread.is_alive() and not worker.crashed
        assert "billing" in broker.consumers.names(queue_name)
    finally:
        billing.gate.set()
        worker.stop()
        thread.join(15)
    assert codes == [0]


@pytest.mark.slow
def test_a_handler_thread_that_dies_stops_its_worker_with_exit_code_1(
    client: redis.Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a worker running two logical consumers of one queue
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    billing, email = Recorder(), Recorder()
    worker = Worker(
        broker, [spec(queue_name, "billing", billing), spec(queue_name, "email", email)], options()
    )
    thread, codes = run_in_thread(worker)
    try:
        first = broker.publish(queue_name, {"n": 1})
        assert wait_for(lambda: first in billing.ids and first in email.ids, timeout_s=10)

        # When billing's thread meets an error nobody expects (its input is not a stream)
        direct = broker.keys(queue_name).group("billing").direct
        client.delete(direct)
        client.set(direct, "not a stream")

        # Then the whole worker stops, warm, with exit code 1 (for its supervisor)
        thread.join(15)
        assert not thread.is_alive()
    finally:
        worker.stop()
        thread.join(15)
    assert codes == [1]
    assert not any(t.is_alive() for ts in worker.threads.values() for t in ts)
    assert "died of an unexpected error" in caplog.text


def test_a_promotion_in_progress_never_shows_the_refusal_backoff(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a subscription with delayed messages due 0.2 s apart, whose next promotion
    # the worker's main thread reads while a handler thread promotes
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    broker.consumers.ensure(queue_name, "billing")
    for i in range(3):
        broker.publish(queue_name, {"d": i}, delay=0.2 * (i + 1))
    sub = broker.subscribe(queue_name, "billing", "billing-0")
    seen_during: list[int] = []
    real_scripts = sub.scripts

    def scripts_spy(*args: object, **kwargs: object) -> object:
        seen_during.append(sub.next_promote_ms)  # what another thread would read now
        return real_scripts(*args, **kwargs)

    sub.scripts = scripts_spy  # type: ignore[method-assign]
    # When it promotes twice (the second with nothing due yet)
    sub.promote()
    first = sub.next_promote_ms
    sub.promote()
    # Then while each promotion ran, the schedule showed the previous promotion's
    # answer (at most a poll interval ahead), never the 1 s backoff kept for refusals
    assert len(seen_during) == 2
    assert seen_during[0] == 0  # before the first promotion
    assert seen_during[1] == first
    assert first - monotonic_ms() <= 50 + 5


def test_a_refused_promotion_is_tried_again_after_the_backoff(
    client: redis.Redis, queue_name: str
) -> None:
    # Given a delayed message and a full Redis
    broker = Broker(client, CoreConfig(poll_interval_ms=50))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"d": 1}, delay=0.05)
    sub = broker.subscribe(queue_name, "billing", "billing-0")
    time.sleep(0.1)
    make_full(client)
    try:
        # When a promotion is refused
        before = monotonic_ms()
        with pytest.raises(RedisRefused):
            sub.promote(before)
        # Then the next one waits PROMOTE_RETRY_MS, not a poll interval
        assert sub.next_promote_ms == before + PROMOTE_RETRY_MS
    finally:
        client.delete(FILLER)
