"""Elastic handler threads (``core/worker/crew.py``): a consumer's threads past the first
fetch only while its handlers wait and the process has CPU to spare. Real redis-server;
the worker in this process. The CPU measure is the process's own, except where a test
says it stands in a clock that reports a busy process (so that the outcome does not
depend on what else this machine runs)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter

from redisq_django.core import Broker, ConsumerSpec, Message
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.core.worker.crew import Crew, Crews


class Running:
    """Handlers running now, the most at once, and which thread handled what."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()
        self.by_thread: Counter[str] = Counter()
        self.ids: list[str] = []

    def handler(self, message: Message) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.by_thread[threading.current_thread().name] += 1
            self.ids.append(message.id)
        try:
            if self.sleep:
                time.sleep(self.sleep)  # waits, as a database or HTTP call does
        finally:
            with self.lock:
                self.now -= 1


def _publish(broker: Broker, queue: str, n: int) -> list[str]:
    return [broker.publish(queue, {"n": i}) for i in range(n)]


def _burst(broker: Broker, spec: ConsumerSpec) -> Worker:
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    assert worker.run() == 0
    return worker


def test_waiting_handlers_get_every_thread(broker: Broker, queue_name: str) -> None:
    # Given 120 messages whose handlers each wait 20 ms, and a consumer of 8 threads
    ids = _publish(broker, queue_name, 120)
    running = Running(sleep=0.02)
    spec = ConsumerSpec(queue_name, "billing", running.handler, start="earliest", concurrency=8)
    # When a burst worker drains them
    worker = _burst(broker, spec)
    # Then every message was handled once, and the crew grew to (nearly) all 8 threads
    assert sorted(running.ids) == sorted(ids)
    assert worker.totals()["handled"] == 120
    assert running.most >= 6, running.most
    assert len(running.by_thread) >= 6


def test_handlers_that_do_not_wait_run_on_one_thread(
    broker: Broker, queue_name: str, monkeypatch: object
) -> None:
    # Given 3,000 no-op messages, a consumer of 8 threads, and a process that (as the
    # clock standing in for its CPU time says) uses a whole core
    ids = _publish(broker, queue_name, 3000)
    running = Running(sleep=0)
    spec = ConsumerSpec(queue_name, "billing", running.handler, start="earliest", concurrency=8)
    worker = Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    worker.crews.cpu_clock = time.monotonic  # a busy core: CPU time = wall time
    worker.crews.restart_measure()
    # When it drains them
    assert worker.run() == 0
    # Then one thread handled them all, once each, and the burst ended (spares exited)
    assert sorted(running.ids) == sorted(ids)
    assert list(running.by_thread.values()) == [3000]
    assert not any(t.is_alive() for t in worker._all_threads())


def test_fixed_threads_keep_every_thread_fetching(broker: Broker, queue_name: str) -> None:
    # Given waiting handlers and a crew told to stay fixed (runconsumer --fixed-threads)
    ids = _publish(broker, queue_name, 60)
    running = Running(sleep=0.02)
    spec = ConsumerSpec(queue_name, "billing", running.handler, start="earliest", concurrency=4)
    worker = Worker(
        broker,
        [spec],
        WorkerOptions(block_ms=50, burst=True, stats_interval=0, elastic_threads=False),
    )
    worker.crews.cpu_clock = time.monotonic  # busy: an elastic crew would not grow
    assert worker.run() == 0
    # Then all 4 threads handled messages from the start
    assert sorted(running.ids) == sorted(ids)
    assert len(running.by_thread) == 4


def test_a_warm_stop_with_waiting_spares_returns_at_once(broker: Broker, queue_name: str) -> None:
    # Given a continuous worker of 8 threads on an empty queue (7 spares waiting)
    spec = ConsumerSpec(queue_name, "billing", Running(0).handler, concurrency=8)
    worker = Worker(broker, [spec], WorkerOptions(block_ms=100, stats_interval=0))
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(worker.run()))
    runner.start()
    time.sleep(0.5)
    # When it is asked to stop
    asked = time.monotonic()
    worker.stop()
    runner.join(timeout=10)
    # Then it stops cleanly, every thread gone
    assert result == [0]
    assert time.monotonic() - asked < 3
    assert not any(t.is_alive() for t in worker._all_threads())


def test_spares_of_a_higher_priority_level_hold_back_no_lower_one(
    broker: Broker, queue_name: str
) -> None:
    # Given two priority levels of 4 threads each (as the Tasks backend makes them), the
    # higher one empty and 30 messages on the lower one
    high, low = f"{queue_name}.high", f"{queue_name}.low"
    running = Running(sleep=0)
    specs = [
        ConsumerSpec(
            queue, "tasks", running.handler, start="earliest", concurrency=4, priority=("q", rank)
        )
        for rank, queue in enumerate((high, low))
    ]
    ids = _publish(broker, low, 30)
    # When a (continuous) worker runs them; the higher level's spares never fetch
    worker = Worker(broker, specs, WorkerOptions(block_ms=50, stats_interval=0))
    worker.crews.cpu_clock = time.monotonic  # busy: the spares stay spares
    worker.crews.restart_measure()
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 10
    while len(running.ids) < 30 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop()
    runner.join(timeout=10)
    # Then the lower level was handled all the same
    assert sorted(running.ids) == sorted(ids)
    assert not runner.is_alive()


# -- the rule, on threads that only say whether they are in a handler -------------------


class _Member:
    def __init__(self) -> None:
        self.held: list[object] = []
        self.finished = False
        self.retire = False


def _crews(cpu_per_tick: float, members: int = 4) -> tuple[Crews, Crew, list[_Member]]:
    """Crews whose clocks advance by 10 ms of wall and ``cpu_per_tick`` ms of CPU."""
    walls = itertools.count(0.0, 0.01)
    cpus = itertools.count(0.0, cpu_per_tick / 1000)
    crews = Crews()
    crews.wall_clock = lambda: next(walls)
    crews.cpu_clock = lambda: next(cpus)
    crews.restart_measure()
    crew = crews.crew(("q", "c"))
    threads = [_Member() for _ in range(members)]
    for t in threads:
        crew.join(t)
    return crews, crew, threads


def test_a_crew_grows_only_while_all_its_fetching_threads_wait_in_handlers() -> None:
    crews, crew, threads = _crews(cpu_per_tick=1)  # 10 % of a core: handlers wait
    for _ in range(10):
        crews.tick()
    assert crew.active == 1  # nobody in a handler (an idle queue): no growth
    for t in threads:
        t.held = ["message"]
    for _ in range(10):
        crews.tick()
    assert crew.active == 4  # every thread, never more
    threads[3].retire = True
    assert [crew.may_fetch(t) for t in threads[:3]] == [True] * 3


def test_every_crew_shrinks_while_the_process_uses_a_whole_core() -> None:
    crews, crew, threads = _crews(cpu_per_tick=10)  # 100 %: the GIL is the limit
    crew.active = 4
    for t in threads:
        t.held = ["message"]
    for _ in range(10):
        crews.tick()
    assert crew.active == 1
    assert [crew.may_fetch(t) for t in threads] == [True, False, False, False]


def test_a_spare_takes_the_place_of_a_thread_that_finished() -> None:
    _, crew, threads = _crews(cpu_per_tick=10)
    assert not crew.may_fetch(threads[1])
    threads[0].finished = True
    assert crew.may_fetch(threads[1])
