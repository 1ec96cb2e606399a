"""Elastic handler threads: a consumer's extra threads fetch only while they can help.

``concurrency`` N gives a consumer N handler threads, but in one Python process only one
of them runs Python at a time (the GIL). Extra threads pay off while handlers *wait*
(a database, an HTTP call, ``time.sleep``): one thread's wait is another's turn. When
handlers do not wait (no-op, or CPU-bound work), every extra thread only adds switching
and smaller batches: measured, ``--concurrency 8`` drained no-op messages at about half
the rate of ``--concurrency 1``.

So the threads of a consumer form a :class:`Crew`. Its first thread always fetches; the
others are *spares* that fetch only while the crew is *active* up to them. The worker's
main thread looks at every crew each :data:`TICK_S` (:meth:`Crews.tick`):

* a crew grows by one thread when all its fetching threads are inside a handler right
  now and the process used less than :data:`GROW_BELOW` of a core since the last look
  (its handlers are waiting, and there is CPU to spare for one more);
* every crew shrinks by one thread while the process uses more than
  :data:`SHRINK_ABOVE` of a core (the GIL is the limit: more threads cannot help).

A spare that stops being active finishes its batch first (like a thread retired by a
lower concurrency) and then waits, holding no message. I/O-bound handlers therefore get
all N threads within a few ticks; no-op and CPU-bound ones run on one thread, as fast as
``--concurrency 1``. ``WorkerOptions(elastic_threads=False)`` (``runconsumer
--fixed-threads``) keeps every thread fetching, for handlers that run outside the GIL
(C extensions that release it), which the CPU measure cannot tell from waiting ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

#: How often the main thread looks at the crews while a handler runs (seconds).
TICK_S = 0.01
#: How often it looks while no crew's thread is in a handler (seconds).
IDLE_TICK_S = 0.1
#: Below this share of one core (smoothed), a crew whose threads all wait may grow.
GROW_BELOW = 0.6
#: Above this share of one core (smoothed), every crew shrinks towards one thread.
SHRINK_ABOVE = 0.9
#: Weight of the latest measure in the smoothed CPU share.
SMOOTHING = 0.5
#: Longest a spare sleeps before looking at its turn again (stop requests, exits).
SPARE_WAIT_S = 0.2


class Member(Protocol):
    """What a crew knows of a handler thread (``threads.HandlerThread``)."""

    @property
    def held(self) -> Sequence[object]:
        """The messages it runs now (none: it is not in a handler)."""

    @property
    def finished(self) -> bool:
        """Whether it has stopped."""

    @property
    def retire(self) -> bool:
        """Whether it leaves after its batch (a lowered concurrency)."""


class Crew:
    """The handler threads of one logical consumer, the first ``active`` of which fetch."""

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.active = 1
        self.drained = False  # a burst thread found nothing left: idle spares may exit
        self._turn = threading.Condition()

    def join(self, thread: Member) -> None:
        self.members.append(thread)

    def _on_duty(self) -> list[Member]:
        # Threads that exited (a drained burst, a lowered concurrency) make room: the
        # next one takes their place, so a crew never waits on a thread that is gone.
        return [t for t in self.members if not t.finished and not t.retire]

    def may_fetch(self, thread: Member) -> bool:
        """Whether ``thread`` is among the crew's fetching threads now."""
        on_duty = self._on_duty()
        return thread not in on_duty or on_duty.index(thread) < self.active

    def wait_turn(self, stopping: Callable[[], bool]) -> None:
        """Sleep until the crew grows (or :data:`SPARE_WAIT_S`, to look at ``stopping``)."""
        with self._turn:
            if not stopping():
                self._turn.wait(SPARE_WAIT_S)

    def wake(self) -> None:
        """Let waiting spares look at their turn now (a thread left, or a stop)."""
        with self._turn:
            self._turn.notify_all()

    def fetching(self) -> list[Member]:
        return self._on_duty()[: self.active]

    def grow(self) -> None:
        if self.active < len(self._on_duty()):
            self.active += 1
            self.wake()

    def shrink(self) -> None:
        self.active = max(1, self.active - 1)


class Crews:
    """Every crew of a worker, sized on the main thread's clock (see the module)."""

    def __init__(self, *, elastic: bool = True) -> None:
        self.elastic = elastic
        #: By consumer (``spec.key``), or by consumer and partition.
        self.crews: dict[Hashable, Crew] = {}
        #: The clocks of the measure (tests stand in their own).
        self.wall_clock: Callable[[], float] = time.monotonic
        self.cpu_clock: Callable[[], float] = time.process_time
        self.restart_measure()

    def restart_measure(self) -> None:
        """Measure the CPU share from now on, as if the process were busy."""
        self._at, self._cpu = self.wall_clock(), self.cpu_clock()
        # Smoothed share of one core the process used; it starts as if busy, so that a
        # crew grows only once its handlers have been seen waiting.
        self.share = 1.0

    def crew(self, key: Hashable) -> Crew:
        crew = self.crews.get(key)
        if crew is None:
            crew = self.crews[key] = Crew()
            if not self.elastic:
                crew.active = 1 << 30  # every thread fetches
        return crew

    def tick(self) -> float:
        """Grow or shrink the crews; seconds until the next look."""
        if not self.elastic or not any(len(c.members) > 1 for c in self.crews.values()):
            return IDLE_TICK_S
        now, cpu = self.wall_clock(), self.cpu_clock()
        elapsed = now - self._at
        if elapsed <= 0:
            return TICK_S
        self.share += SMOOTHING * ((cpu - self._cpu) / elapsed - self.share)
        self._at, self._cpu = now, cpu
        handling = False
        for crew in self.crews.values():
            fetching = crew.fetching()
            busy = [t for t in fetching if t.held]
            handling = handling or bool(busy)
            if self.share > SHRINK_ABOVE:
                crew.shrink()
            elif self.share < GROW_BELOW and fetching and len(busy) == len(fetching):
                crew.grow()
        return TICK_S if handling else IDLE_TICK_S

    def wake_all(self) -> None:
        for crew in self.crews.values():
            crew.wake()
