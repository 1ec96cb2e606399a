"""Consumers of the benchmark.

* ``bench/noop``: does nothing but note when it ran. The times of the first and the
  last handled message and the count are written as JSON to ``$BENCH_DRAIN_OUT`` (where
  ``{pid}`` becomes the process id) when the process exits (``runconsumer --burst``
  exits normally once drained).
* ``bench_cpu/spin``: the same, after burning :data:`SPIN_S` of CPU (a CPU-bound
  handler, which more processes speed up and more threads do not).
* ``bench_latency/latency``: records, for each message, handler start minus
  ``published_at`` / ``due_at`` (and minus the publisher's own ``time.time()`` carried
  in the payload as ``t0``) into the Redis list ``bench:latency``.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

import redis

from redisq_django import Message, consumer

_lock = threading.Lock()
_drain = {"first": None, "last": None, "count": 0}


#: CPU time each ``bench_cpu/spin`` message burns in its handler (seconds).
SPIN_S = 0.0005


@consumer("bench", name="noop", concurrency=1)
def noop(message: Message) -> None:
    _note_drained()


@consumer("bench_cpu", name="spin", concurrency=1)
def spin(message: Message) -> None:
    end = time.thread_time() + SPIN_S  # CPU time: the GIL makes threads no faster here
    while time.thread_time() < end:
        pass
    _note_drained()


def _note_drained() -> None:
    now = time.time()
    with _lock:
        if _drain["first"] is None:
            _drain["first"] = now
        _drain["last"] = now
        _drain["count"] += 1


def _write_drain() -> None:
    path = os.environ.get("BENCH_DRAIN_OUT", "").replace("{pid}", str(os.getpid()))
    if path and _drain["count"]:
        with open(path, "w") as fh:
            json.dump(_drain, fh)


atexit.register(_write_drain)

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _client


@consumer("bench_latency", name="latency")
def latency(message: Message) -> None:
    start = time.time()
    published = message.published_at.timestamp()
    due = message.due_at.timestamp() if message.due_at is not None else None
    payload = message.payload if isinstance(message.payload, dict) else {}
    record = {
        "kind": payload.get("kind", "?"),
        "published": start - published,
        "due": None if due is None else start - due,
        "t0": None if "t0" not in payload else start - payload["t0"],
    }
    _redis().rpush("bench:latency", json.dumps(record))
