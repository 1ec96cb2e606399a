"""The worker: runs the handlers of one or more logical consumers in threads.

One process runs :class:`Worker`; each logical consumer gets ``concurrency`` handler
threads, each an instance (a :class:`~redisq_django.core.subscription.Subscription`);
one with an ``async def`` handler gets one instance keeping up to ``concurrency``
handlers in flight on the process's event loop (:mod:`~redisq_django.core.worker.coroutines`).
On a partitioned queue, each partition gets as many (``core/partitions/``).
A liveness thread heartbeats and extends the leases of long handlers
(:mod:`~redisq_django.core.worker.liveness`: it never waits behind database work). The
main thread runs the rest from one :class:`Ticker`: configuration refresh, retention,
a periodic summary and whatever jobs the caller adds. Django-free: the management
command builds it and installs the signal handlers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from redisq_django.core.clock import monotonic_ms
from redisq_django.core.errors import RedisRefused, RedisUnavailable
from redisq_django.core.groups import default_instance_name
from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.outcome import Outcome
from redisq_django.core.partitions import Place
from redisq_django.core.subscription import Subscription
from redisq_django.core.worker.coroutines import AsyncHandlerThread, EventLoop, is_async_handler
from redisq_django.core.worker.crew import Crews
from redisq_django.core.worker.flow import Flow
from redisq_django.core.worker.liveness import LivenessThread, lease_renewal_interval
from redisq_django.core.worker.middleware import Middleware, MiddlewareChain
from redisq_django.core.worker.priority import GateSlot, PriorityGate
from redisq_django.core.worker.refusals import Condition
from redisq_django.core.worker.state import Pace, Quota, StopSignal, Tally
from redisq_django.core.worker.stopping import shut_down
from redisq_django.core.worker.threads import HandlerThread
from redisq_django.core.worker.ticker import Every, Ticker
from redisq_django.core.worker.worker_options import WorkerOptions

if TYPE_CHECKING:
    from collections import Counter

    from redisq_django.core.broker import Broker

logger = logging.getLogger("redisq.worker")

__all__ = ["Worker", "WorkerOptions"]


class Worker:
    """Runs logical consumers until stopped (see :class:`WorkerOptions`).

    Args:
        broker: the broker.
        specs: the logical consumers to run (disabled ones are kept, not started, so a
            later ``refresh`` can enable them).
        options: timings and limits.
        middleware: hooks around each message.
        refresh: called every ``refresh_interval`` seconds; returns the current specs
            (e.g. read from the database) so pause, retries or concurrency changes apply
            without a restart. Its failures are logged, never fatal.
        periodic: more housekeeping jobs for the main thread (dead-letter sink, outbox
            relay...).
    """

    def __init__(
        self,
        broker: Broker,
        specs: Sequence[ConsumerSpec],
        options: WorkerOptions | None = None,
        *,
        middleware: Sequence[Middleware] = (),
        refresh: Callable[[], Iterable[ConsumerSpec]] | None = None,
        periodic: Sequence[Every] = (),
    ) -> None:
        self.broker = broker
        self.options = options or WorkerOptions()
        self.specs = {s.key: s for s in specs}
        self.middleware = MiddlewareChain(middleware)
        self.refresh = refresh
        self.periodic = list(periodic)
        self.instance_prefix = default_instance_name()
        self.quota = Quota(self.options.max_messages)
        self.tally = Tally()
        self.threads: dict[tuple[str, str], list[HandlerThread]] = {}
        #: One gate per priority ladder (its levels are read highest first).
        self.gates: dict[str, PriorityGate] = {}
        #: Each sync consumer's threads, its spares fetching only while handlers wait.
        self.crews = Crews(elastic=self.options.elastic_threads)
        #: Each limited consumer's rate and slots as this process's threads meet them.
        self.flows: dict[tuple[str, str], Flow] = {}
        self._stop = StopSignal()
        self.crashed = False  # a handler thread died of an unexpected error
        self.loop: EventLoop | None = None  # async handlers' (core/worker/coroutines.py)
        self._promotion = Condition("promotion of due delayed messages and retries", logger)
        self.started_at = time.monotonic()
        self._last_summary = (self.started_at, 0)
        opts = self.options
        self._pace = Pace(
            opts.prefetch, opts.block_ms, opts.burst, opts.reclaim_interval, opts.batch_ack
        )
        self.liveness = LivenessThread(
            threads=self._all_threads,
            heartbeat_interval=opts.heartbeat_interval,
            heartbeat_ttl=opts.heartbeat_ttl,
            renewal_interval=self._renewal_interval,
        )

    # -- control -----------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def cold(self) -> bool:
        return self._stop.cold

    def stop(self, *, cold: bool = False) -> None:
        """Request a stop. Warm (default): finish in-flight handlers within the grace
        period, ack them, hand back unstarted messages. Cold: return at once; what is
        in flight is redelivered after others notice this instance is gone. Safe in a
        signal handler (it takes no lock)."""
        self._stop.request(cold=cold)

    def totals(self) -> Counter[str]:
        """Handled, failed, retried, dead and lost counts over every consumer."""
        return self.tally.totals()

    # -- running -----------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped, drained (burst) or the message budget is spent.

        Returns:
            0 after a clean stop; 1 after a cold stop or when handlers outran the grace
            period (their messages are redelivered to other instances).
        """
        for spec in self.specs.values():
            self._register(spec)
        # Higher priority levels first: each joins its gate before a lower one may fetch.
        for spec in sorted(self.specs.values(), key=lambda s: s.priority or ("", 0)):
            if spec.enabled:
                self._scale(spec, spec.concurrency)
        self.liveness.start()
        try:
            self.middleware.on_worker_start(self)
            self._main_loop()
            self.crews.wake_all()  # waiting spares see the stop now, not in 0.2 s
            code = self._shutdown()
            if not self.cold:
                self._stop_periodic()
        finally:
            self.liveness.stop()  # last: after in-flight messages are settled
        if self.loop is not None and code == 0:  # else handlers may still run on it
            self.loop.stop()
        self.middleware.on_worker_stop(self)
        self._log_summary(final=True)
        return code

    def _stop_periodic(self) -> None:
        for job in self.periodic:
            if job.on_stop is None:
                continue
            try:
                job.on_stop()
            except Exception:  # leaving anyway: what it gives back expires by itself
                logger.debug("Stopping housekeeping job %r failed", job.name, exc_info=True)

    def _register(self, spec: ConsumerSpec) -> None:
        try:
            self.broker.consumers.ensure(spec.queue, spec.name, spec.start)
        except RedisRefused:
            # A full (or read-only) Redis refuses XGROUP CREATE even for a group that
            # exists; a worker of an existing group can still drain it, so it starts.
            if spec.name not in self.broker.consumers.names(spec.queue):
                raise
            logger.warning("Redis refuses writes; %s/%s starts anyway", spec.queue, spec.name)

    def _all_threads(self) -> list[HandlerThread]:
        return [t for threads in self.threads.values() for t in threads]

    def _on_crash(self, thread: HandlerThread, exc: BaseException) -> None:
        # Nothing restarts a thread: stop the whole worker (warm, exit code 1) so that
        # its supervisor restarts the process, instead of running on without a consumer.
        self.crashed = True
        logger.error(
            "Handler thread %s died of an unexpected error (%r): stopping this worker "
            "(exit code 1) so that its supervisor starts it again",
            thread.name,
            exc,
        )
        self._stop.request()

    def _scale(self, spec: ConsumerSpec, wanted: int) -> None:
        # A partitioned queue: `wanted` instances on each partition (each a consumer
        # group of its own), else the queue's one.
        count = self.broker.partitions.count(spec.queue)
        for partition in range(count) if count > 1 else (None,):
            self._scale_partition(spec, wanted, partition)

    def _scale_partition(self, spec: ConsumerSpec, wanted: int, partition: int | None) -> None:
        is_async = is_async_handler(spec.handler)
        if is_async:  # one instance, its concurrency the handlers it keeps in flight
            wanted = min(wanted, 1)
        running = [
            t
            for t in self.threads.get(spec.key, [])
            if t.is_alive() and not t.retire and t.sub.keys.part == partition
        ]
        for t in running[wanted:]:
            t.retire = True
        where = spec.name if partition is None else f"{spec.name}-p{partition}"
        for index in range(len(running), wanted):
            sub = self.broker.subscribe(
                Place(spec.queue, partition),
                spec.name,
                f"{self.instance_prefix}-{where}-{index}",
                policy=spec.policy,
                ordered=spec.ordered,
                wait_replicas=spec.wait_replicas,
            )
            parts: dict[str, Any] = dict(
                spec=spec,
                sub=sub,
                index=index if partition is None else f"p{partition}-{index}",
                stop=self._stop,
                pace=self._pace,
                quota=self.quota,
                hooks=self.middleware,
                tally=self.tally,
                on_crash=self._on_crash,
                gate=self._gate_slot(spec),
                flow=self._flow(spec, sub),
            )
            if is_async:
                thread: HandlerThread = AsyncHandlerThread(loop=self._event_loop(), **parts)
            else:
                # A crew per partition: each keeps at least one thread fetching.
                crew = self.crews.crew(spec.key if partition is None else (spec.key, partition))
                thread = HandlerThread(crew=crew, **parts)
                crew.join(thread)
            self.threads.setdefault(spec.key, []).append(thread)
            thread.start()

    def _event_loop(self) -> EventLoop:
        """The process's event loop for async handlers, started on first use."""
        if self.loop is None:
            self.loop = EventLoop()
        return self.loop

    def _flow(self, spec: ConsumerSpec, sub: Subscription) -> Flow:
        """The process's :class:`Flow` of ``spec``'s consumer (one for all its threads and
        partitions: the limits are the logical consumer's; one for the consumers that
        share theirs, ``ConsumerSpec.flow_queue``)."""
        shared = (spec.flow_queue or spec.queue, spec.name)
        flow = self.flows.get(shared)
        if flow is None:
            flow = self.flows[shared] = Flow(
                client=sub.client,
                scripts=sub.scripts,
                keys=self.broker.keys(shared[0]).group(spec.name),
                spec=spec,
                lease_ms=int(self.options.heartbeat_ttl * 1000),
            )
        return flow

    def _gate_slot(self, spec: ConsumerSpec) -> GateSlot | None:
        if spec.priority is None:
            return None
        ladder, rank = spec.priority
        return GateSlot(self.gates.setdefault(ladder, PriorityGate()), rank)

    def _main_loop(self) -> None:
        opts = self.options
        stats_every = opts.stats_interval or float("inf")
        ticker = Ticker(
            [
                Every("refresh", opts.refresh_interval, self._refresh, opts.refresh_interval),
                Every("trim", opts.trim_interval, self._trim),
                Every("stats", stats_every, self._log_summary, stats_every),
                *self.periodic,
            ]
        )
        while not self._stop.is_set():
            if not any(t.is_alive() for t in self._all_threads()) and not self._paused_only():
                return  # burst drained, message budget spent, or every thread gone
            ticker.run_due()
            self._watch_time_limits()
            self._stop.wait(min(self._promote_due(), self.crews.tick()))

    def _watch_time_limits(self) -> None:
        """Stop the handlers that ran past their consumer's time limit; replace this
        process when one is stuck past the grace period (``core/worker/time_limits.py``)."""
        if not any(s.time_limit is not None for s in self.specs.values()):
            return
        now = time.monotonic()
        for thread in self._all_threads():
            try:
                stuck = thread.watch_time(now, self.options.grace_period)
            except Exception as exc:  # Redis away or refusing: the watchdog must go on
                logger.warning(
                    "Could not settle a timed-out message of %s (%r): it stays pending and "
                    "comes back when its lease runs out, counting this delivery",
                    thread.name,
                    exc,
                )
                continue
            if stuck:
                self.crashed = True
                logger.error(
                    "Handler thread %s is still stuck %g s after its time limit, in a call "
                    "Python cannot interrupt: stopping this worker now (exit code 1) so "
                    "that its supervisor starts a new process; its other in-flight "
                    "messages come back to other instances as after a crash",
                    thread.name,
                    self.options.grace_period,
                )
                self._stop.request(cold=True)
                return

    def _promote_due(self) -> float:
        """Promote due delayed messages and retries on time; seconds until the next check.

        Handler threads blocked in a fetch would also promote, but an idle Redis ends a
        blocking read only on its timer tick (every 100 ms at the default ``hz 10``), so
        their wake-ups can be that late. The main thread keeps its own precise clock
        instead, and the XADD of a promotion wakes the blocked readers at once.
        """
        subs: dict[tuple[str, str, str], Subscription] = {}
        for t in self._all_threads():
            if t.is_alive() and not t.spec.paused:  # one per consumer and partition
                subs.setdefault((*t.spec.key, t.sub.keys.tag), t.sub)
        now = monotonic_ms()  # a local timer: a wall-clock step must not move it
        soonest = now + 100
        for sub in subs.values():
            if now >= sub.next_promote_ms:
                try:
                    sub.promote(now)
                    self._promotion.ok()
                except RedisRefused as exc:  # e.g. full: reads and acks still work
                    self._promotion.failed(exc)
                except RedisUnavailable:
                    continue  # the handler threads report it and reconnect
            soonest = min(soonest, sub.next_promote_ms)
        return max(0.0005, (soonest - monotonic_ms()) / 1000.0)

    def _paused_only(self) -> bool:
        # Keep running (to notice a resume) when every consumer is paused or disabled.
        return (
            bool(self.specs)
            and not self.options.burst
            and self.quota.limit is None
            and all(s.paused or not s.enabled for s in self.specs.values())
        )

    def _renewal_interval(self) -> float:
        return lease_renewal_interval([s.policy.visibility_timeout_ms for s in self.specs.values()])

    def _refresh(self) -> None:
        if self.refresh is None:
            return
        for spec in self.refresh():
            old = self.specs.get(spec.key)
            if old is None or old == spec:
                continue
            before, after = old.tunables(), spec.tunables()
            changes = [f"{f} {before[f]!r} -> {after[f]!r}" for f in after if before[f] != after[f]]
            logger.info(
                "Configuration of %s/%s changed: %s", spec.queue, spec.name, ", ".join(changes)
            )
            self.specs[spec.key] = spec
            shared = (spec.flow_queue or spec.queue, spec.name)
            if shared in self.flows:
                self.flows[shared].apply(spec)
            for t in self.threads.get(spec.key, []):
                t.apply(spec)
            self._scale(spec, spec.concurrency if spec.enabled else 0)

    def _trim(self) -> None:
        batch = self.broker.config.script_batch
        for queue in sorted({s.queue for s in self.specs.values()}):
            for _ in range(20):  # bounded: the rest waits for the next round
                removed, dropped = self.broker.trim(queue)
                if dropped:
                    logger.warning(
                        "Hard cap on %s dropped %d unacknowledged message(s)", queue, dropped
                    )
                if removed + dropped < batch:
                    break

    def _log_summary(self, final: bool = False) -> None:
        t = self.totals()
        now = time.monotonic()
        since, handled_then = self._last_summary
        self._last_summary = (now, t["handled"])
        if final:  # the whole run's average
            since, handled_then = self.started_at, 0
        rate = (t["handled"] - handled_then) / max(1e-9, now - since)
        logger.info(
            "%shandled=%d failed=%d retried=%d dead=%d lost=%d rate=%.1f/s",
            "stopped: " if final else "",
            t["handled"],
            t["failed"],
            t[Outcome.RETRIED],
            t[Outcome.DEAD],
            t[Outcome.LOST],
            rate,
        )

    def _shutdown(self) -> int:
        return shut_down(
            self._all_threads,
            self._stop,
            self.liveness,
            self.options.grace_period,
            lambda: self.crashed,
        )
