"""How a worker runs: :class:`WorkerOptions`."""

from __future__ import annotations

from dataclasses import dataclass

from redisq_django.core.worker.liveness import DEFAULT_HEARTBEAT_INTERVAL_S, DEFAULT_HEARTBEAT_TTL_S


@dataclass(frozen=True)
class WorkerOptions:
    """How a worker runs (times in seconds unless the name says otherwise).

    Attributes:
        prefetch: most messages fetched per round trip by each handler thread. Each
            thread starts at 10 (or less) and doubles its batch while batches come back
            full and are handled quickly, halving it when a batch is slow, so fast
            handlers get big batches and slow ones don't hoard messages. An ``async def``
            consumer fetches ``concurrency`` messages instead, its handlers in flight.
        block_ms: longest wait for messages in one fetch; also bounds how long a
            stop request waits for an idle thread.
        burst: exit once nothing is left to do (no new message, no retry waiting).
        max_messages: exit after handling this many messages (None: no limit).
        grace_period: on a warm stop, how long in-flight handlers may take to finish.
        heartbeat_interval: how often instances announce they are alive.
        heartbeat_ttl: an instance silent this long is dead; others take its messages.
            Also how long a stall of liveness (e.g. a frozen Redis) may last, minus one
            interval, before live instances look dead (see ``liveness``).
        reclaim_interval: how often each thread looks for expired leases.
        trim_interval: how often retention runs on each queue.
        refresh_interval: how often ``refresh`` is asked for configuration changes.
        stats_interval: how often a summary line is logged (0: never).
        batch_ack: acknowledge once per batch instead of as each handler returns, and
            record no starts: faster for tiny handlers, but a crash then repeats the
            whole batch and counts a delivery for each of its messages (a message that
            kills its process can take others to the dead letters with it).
        elastic_threads: a consumer's threads past the first fetch only while its
            handlers wait and the process has CPU to spare, so ``concurrency`` costs
            nothing for handlers that do not wait (:mod:`~redisq_django.core.worker.crew`).
            False: every thread always fetches (handlers that run outside the GIL).
    """

    prefetch: int = 100
    block_ms: int = 500
    burst: bool = False
    max_messages: int | None = None
    grace_period: float = 30.0
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL_S
    heartbeat_ttl: float = DEFAULT_HEARTBEAT_TTL_S
    reclaim_interval: float = 2.0
    trim_interval: float = 10.0
    refresh_interval: float = 2.0
    stats_interval: float = 30.0
    batch_ack: bool = False
    elastic_threads: bool = True
