"""Ordered consumers under SIGKILL chaos: real ``runconsumer`` processes, killed at random
and started again, never break the order of an ordering key, and lose nothing — on one
server, and on the suite's 3-master Redis Cluster with the queue in 4 partitions.

The handlers (tests/faultapp/consumers.py, ``sequencer`` and its async twin) record each
run's start and end in one Redis list, so the checker reads every run in the order Redis
saw it; the test adds a line for each worker it killed (after reaping it: no line of that
process can follow). What must hold, per ordering key:

* every message is handled (returns normally) at least once: nothing lost;
* starts never go back: once message n+1 started, no run of message n (a retry, a
  duplicate after a crash) starts again;
* no two runs overlap, except two runs of the same message when the first one's process
  was killed (at-least-once; counted and printed: with the kill recorded before the
  takeover it should be none).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from tests.faultapp.consumers import ordered_key
from tests.support.workers import Workers, wait_for

pytestmark = [
    pytest.mark.slow,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

KEYS = [f"k{i:02d}" for i in range(30)]  # 30 keys x 40 messages, 2 per key and round
DELAYED_KEYS = ["d0", "d1", "d2"]  # 1 delayed message per key and round
ROUNDS, ROUND_S = 20, 0.6  # a SIGKILL every round but the first
INSTANCES = 3


@dataclass(frozen=True)
class Kind:
    """The ordered consumer a test drives: thread handlers or their async twin."""

    queue: str
    name: str


THREADS, ASYNC = Kind("ordered", "sequencer"), Kind("aordered", "asequencer")


@dataclass
class Verdict:
    """What the checker found in the recorded runs."""

    handled: set[tuple[str, int]] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    starts: int = 0
    failures: int = 0
    killed_runs: int = 0
    same_message_overlaps: int = 0
    reruns: int = 0  # starts of a message handled already (at-least-once duplicates)


def check(lines: list[bytes]) -> Verdict:
    """Read the runs in Redis's order (see the module docstring)."""
    verdict = Verdict()
    running: dict[str, set[tuple[int, int]]] = defaultdict(set)  # key -> {(pid, seq)}
    highest: dict[str, int] = {}
    for raw in lines:
        mark, key, seq_text, pid_text, _ = raw.decode().split()
        pid = int(pid_text)
        if mark == "K":  # that process is dead: its open runs ended
            for runs in running.values():
                killed = {run for run in runs if run[0] == pid}
                verdict.killed_runs += len(killed)
                runs -= killed
            continue
        seq = int(seq_text)
        if mark == "S":
            verdict.starts += 1
            verdict.reruns += (key, seq) in verdict.handled
            if key == "-":  # no key: no order to keep
                continue
            if seq < highest.get(key, -1):
                verdict.problems.append(f"{key}: {seq} started after {highest[key]} had started")
            for other_pid, other_seq in running[key]:
                if other_seq == seq:
                    verdict.same_message_overlaps += 1
                else:
                    verdict.problems.append(
                        f"{key}: {seq} (pid {pid}) started while {other_seq} ran (pid {other_pid})"
                    )
            running[key].add((pid, seq))
            highest[key] = max(seq, highest.get(key, -1))
        else:
            running[key].discard((pid, seq))
            verdict.failures += mark == "F"
            if mark == "E":
                verdict.handled.add((key, seq))
    return verdict


def publish_round(to: Broker, queue: str, r: int, rng: random.Random) -> set[tuple[str, int]]:
    """Round ``r`` of the messages (2 per key, a keyless few, delayed ones); returns their
    ``(key or "-", seq)``."""

    def payload(key: str, seq: int) -> dict[str, object]:
        fail = rng.choice([0] * 8 + [1, 2])  # one in five fails once or twice first
        return {"k": key, "s": seq, "fail": fail, "sleep": rng.uniform(0.005, 0.03)}

    sent: set[tuple[str, int]] = set()
    for key in KEYS:
        seqs = [2 * r, 2 * r + 1]
        if r % 2:
            to.publish_many(queue, [payload(key, s) for s in seqs], key=key)
        else:
            for s in seqs:
                to.publish(queue, payload(key, s), key=key)
        sent.update((key, s) for s in seqs)
    for key in DELAYED_KEYS:  # due in publish order: one per key and round
        to.publish(queue, payload(key, r), key=key, delay=0.3)
        sent.add((key, r))
    for j in range(4):  # no key; one of them delayed
        seq = 10 * r + j
        to.publish(queue, payload("-", seq), delay=0.2 if j == 0 else None)
        sent.add(("-", seq))
    return sent


@pytest.mark.servers
@pytest.mark.timeout(150)
@pytest.mark.parametrize(
    "kind", [pytest.param(THREADS, id="threads"), pytest.param(ASYNC, id="async")]
)
def test_sigkill_chaos_keeps_each_keys_order_and_loses_nothing(
    workers: Workers,
    broker: Broker,
    redis_client: redis.Redis,
    kind: Kind,
) -> None:
    run_chaos(workers, broker, redis_client, kind)


@pytest.mark.servers
@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_on_a_cluster_a_partitioned_queue_keeps_each_keys_order_under_sigkill_chaos(
    redis_cluster: Any,
    db_file: Path,
    tmp_path: Path,
) -> None:
    # The same chaos on the suite's 3-master cluster, the queue in 4 partitions: each
    # key's messages go to one partition, whose ordered consumer keeps their order
    redis_cluster.flushall()
    host, port = redis_cluster.startup_nodes[0]
    pool = Workers(f"redis://{host}:{port}/0", db_file, tmp_path / "logs")
    pool.extra_env.update(REDISQ_TEST_CLUSTER="1", REDISQ_TEST_PARTITIONS=f"{THREADS.queue}=4")
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig(partitions={THREADS.queue: 4}))
        run_chaos(pool, broker, client, THREADS)
    finally:
        pool.close()
        client.close()


def run_chaos(workers: Workers, broker: Broker, redis_client: Any, kind: Kind) -> None:
    """Start 3 instances, publish rounds while killing one a round, drain, check."""
    runs = ordered_key(kind.queue, kind.name)
    broker.consumers.ensure(kind.queue, kind.name, "earliest")
    args = ("--prefetch", "10", "--stats-interval", "0")
    pool = [workers.start(kind.queue, *args) for _ in range(INSTANCES)]
    for w in pool:
        w.wait_ready()

    # Given 1,200 keyed messages (30 keys) published over 12 s with keyless and delayed
    # ones, while every round a random instance is SIGKILLed and a new one started
    rng = random.Random(2026)
    sent: set[tuple[str, int]] = set()
    kills = 0
    t0 = time.monotonic()
    for r in range(ROUNDS):
        sent |= publish_round(broker, kind.queue, r, rng)
        if r:
            slot = rng.randrange(INSTANCES)
            victim = pool[slot]
            victim.kill()
            if victim.proc.returncode is not None:  # reaped: nothing of it can follow
                redis_client.rpush(runs, f"K - - {victim.pid} -")
                kills += 1
            pool[slot] = workers.start(kind.queue, *args)
        time.sleep(max(0.0, t0 + (r + 1) * ROUND_S - time.monotonic()))
    chaos_s = time.monotonic() - t0

    # When they drain
    def drained() -> bool:
        return sent <= check(redis_client.lrange(runs, 0, -1)).handled

    wait_for(
        drained,
        timeout=60,
        what=f"every one of {len(sent)} messages handled",
        interval=0.25,
        describe=lambda: (
            f"{len(sent - check(redis_client.lrange(runs, 0, -1)).handled)} "
            f"unhandled\n{workers.report()}"
        ),
    )
    drained_s = time.monotonic() - t0

    # Then each key's messages ran one at a time, in order, and none was lost
    verdict = check(redis_client.lrange(runs, 0, -1))
    print(
        f"\nordered chaos ({kind.name}): {len(sent)} messages, {kills} SIGKILLs in "
        f"{chaos_s:.1f}s, drained after {drained_s:.1f}s; {verdict.starts} starts, "
        f"{verdict.failures} failed runs, {verdict.killed_runs} runs killed, "
        f"{verdict.reruns} re-runs of handled messages, "
        f"{verdict.same_message_overlaps} overlapping runs of one message"
    )
    assert verdict.problems == [], verdict.problems[:20]
    assert sent <= verdict.handled
    assert kills >= ROUNDS - 1 - 2  # (a kill that could not be reaped is not counted)
    assert broker.dead_letters.read(kind.queue, kind.name) == []
    # And every key is free again, nothing waits behind one
    gkeys = broker.keys(kind.queue).group(kind.name)
    wait_for(
        lambda: redis_client.hlen(gkeys.holders) == 0,
        timeout=10,
        what="every ordering key freed",
        describe=lambda: str(redis_client.hgetall(gkeys.holders)),
    )
    assert list(redis_client.scan_iter(match=gkeys.waiting("*"), count=1000)) == []
