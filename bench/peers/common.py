"""What every peer's driver shares: the job's body and the driver's command line.

Imported by the job modules (``peer_*.py``) in the worker processes and by the drivers
the harness runs; needs only the standard library and redis-py, so it works in the
peers' virtualenv and in the project's alike.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import redis

#: The counter every job increments (the harness polls it).
COUNTER = "peers:counter"
#: Each latency job pushes ``now - t0`` (seconds) here.
LATENCY = "peers:latency"
#: Jobs per round trip of a bulk enqueue (``enqueue_many``, ``publish_many``).
BULK_CHUNK = 1000

_client: redis.Redis | None = None


def url() -> str:
    """The private redis-server the harness started (``PEERS_REDIS_URL``)."""
    try:
        return os.environ["PEERS_REDIS_URL"]
    except KeyError:
        raise SystemExit(
            "PEERS_REDIS_URL is not set: run the peers through bench/peers/run.py "
            "(make bench-peers), which starts their redis-server"
        ) from None


def client() -> redis.Redis:
    """This process's connection for the job's own command (made on first use, so a
    forked worker makes its own)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(url())
    return _client


def record(t0: float) -> None:
    """The job: one ``INCR``; a latency job (``t0`` set, the enqueuer's ``time.time()``)
    also pushes how long it waited."""
    now = time.time()
    conn = client()
    conn.incr(COUNTER)
    if t0:
        conn.rpush(LATENCY, now - t0)


def paced(rate: float, seconds: float, send: Callable[[float], object]) -> int:
    """Call ``send(time.time())`` ``rate`` times a second for ``seconds``, on a fixed
    schedule (a late call is not followed by a burst to catch up beyond the schedule)."""
    n = int(rate * seconds)
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(time.time())
    return n


def main(argv: list[str] | None = None) -> None:
    """The driver's command line (``python common.py MODULE COMMAND``); prints one JSON
    object.

    ``MODULE`` (``peer_celery``, ``peer_ours``, ...) provides ``one(t0)`` (enqueue one
    job, the library's normal call), optionally ``bulk(n)`` (N drain jobs through its
    bulk API, in chunks of :data:`BULK_CHUNK`) and ``setup()`` (run once, untimed).
    ``enqueue --n N`` enqueues N drain jobs (``t0`` 0) one call each and reports the
    seconds; ``bulk --n N`` the same through ``bulk`` (``"seconds": null`` when the
    library has none); ``latency --rate R --seconds S`` enqueues latency jobs at R a
    second. ``queued`` says how many jobs the queue holds after it, counting the one
    warm-up job sent before any timing.
    """
    import importlib

    ap = argparse.ArgumentParser()
    ap.add_argument("module")
    ap.add_argument("command", choices=["enqueue", "bulk", "latency"])
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args(argv)
    peer = importlib.import_module(args.module)
    if hasattr(peer, "setup"):
        peer.setup()
    one: Callable[[float], object] = peer.one
    bulk: Callable[[int], object] | None = getattr(peer, "bulk", None)
    one(0.0)  # warm-up: connection, first-call caches
    out: dict[str, float | int | None]
    started = time.perf_counter()
    if args.command == "enqueue":
        for _ in range(args.n):
            one(0.0)
        out = {"seconds": time.perf_counter() - started, "n": args.n, "queued": args.n + 1}
    elif args.command == "bulk" and bulk is None:
        out = {"seconds": None, "n": args.n, "queued": 1}
    elif args.command == "bulk":
        bulk(args.n)
        out = {"seconds": time.perf_counter() - started, "n": args.n, "queued": args.n + 1}
    else:
        sent = paced(args.rate, args.seconds, one)
        out = {"seconds": time.perf_counter() - started, "n": sent, "queued": sent + 1}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
