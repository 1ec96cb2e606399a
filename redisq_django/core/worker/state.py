"""What a worker's threads share: the stop request, the message budget, the counters, and
how they fetch."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

#: Longest a :meth:`StopSignal.wait` sleeps before looking at the request again, seconds.
WAKE_S = 0.1


class StopSignal:
    """A stop request: warm (finish in-flight work) or cold (leave now).

    :meth:`request` only sets attributes, so a signal handler may call it. Setting a
    ``threading.Event`` there can hang the process for good: the handler runs in the main
    thread between two bytecodes, possibly while that thread holds the event's own lock
    (inside ``Event.wait``), and waits for it forever. Waiters therefore look at the
    request at least every :data:`WAKE_S`, and the first one to see it wakes the others.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._requested = False
        self.cold = False

    def request(self, *, cold: bool = False) -> None:
        """Ask every thread to stop; ``cold`` makes it a cold stop. Safe in a signal
        handler."""
        if cold:
            self.cold = True
        self._requested = True

    def is_set(self) -> bool:
        return self._requested

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking within :data:`WAKE_S` of a stop request; True
        when stopping. Never call it from a signal handler."""
        deadline = time.monotonic() + seconds
        while not self._requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._event.wait(min(left, WAKE_S))
        self._event.set()  # outside any handler: wakes the other waiters at once
        return True


class Quota:
    """The ``max_messages`` budget shared by all threads (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take one message from the budget; False when it is spent."""
        if self.limit is None:
            return True
        with self._lock:
            if self.taken >= self.limit:
                return False
            self.taken += 1
            return True

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.taken >= self.limit


class Tally:
    """Thread-safe counts per (queue, consumer, what): handled, failed, retried, dead, lost,
    reclaimed."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, queue: str, consumer: str, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[(queue, consumer, what)] += n

    def totals(self) -> Counter[str]:
        """Counts summed over every consumer."""
        with self._lock:
            out: Counter[str] = Counter()
            for (_, _, what), n in self._counts.items():
                out[what] += n
            return out

    def snapshot(self) -> Counter[tuple[str, str, str]]:
        with self._lock:
            return Counter(self._counts)


@dataclass(frozen=True)
class Pace:
    """How a handler thread fetches (from ``WorkerOptions``)."""

    prefetch: int
    block_ms: int
    burst: bool
    reclaim_interval: float
    batch_ack: bool = False
