"""What a worker's threads share: the stop request, the message budget, the counters."""

from __future__ import annotations

import threading
from collections import Counter


class StopSignal:
    """A stop request: warm (finish in-flight work) or cold (leave now)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.cold = False

    def request(self, *, cold: bool = False) -> None:
        """Ask every thread to stop; ``cold`` makes it a cold stop."""
        if cold:
            self.cold = True
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on a stop request; True when stopping."""
        return self._event.wait(seconds)


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
