"""Priority levels read highest first: a gate shared by the threads of a priority ladder.

Redis Streams have no priorities, so a priority is a queue per level, and a **ladder** is
the levels of one thing, read highest first (the Django tasks backend makes each task
queue a ladder of three queues). A worker runs every level's threads; the gate
lets a level's threads fetch only while no thread of a higher level holds work, that is
while each higher-level thread's last fetch came back empty (or it has stopped). Every
thread counts as holding work until its first fetch, so a worker that starts on a
backlog begins with the highest level. Within one worker process, higher levels are
therefore always fetched first; across processes each one applies the same rule.
"""

from __future__ import annotations

import threading

#: How long a thread waits before asking the gate again (seconds).
GATE_POLL_S = 0.01


class PriorityGate:
    """Which levels of one ladder may fetch now. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[int, set[int]] = {}  # rank -> ids of threads that hold work

    def join(self, rank: int, member: int) -> None:
        """A thread of level ``rank`` starts: it holds work until its first fetch."""
        with self._lock:
            self._busy.setdefault(rank, set()).add(member)

    def report(self, rank: int, member: int, *, busy: bool) -> None:
        """What a thread's last fetch found (``busy``: it returned messages)."""
        with self._lock:
            members = self._busy.setdefault(rank, set())
            if busy:
                members.add(member)
            else:
                members.discard(member)

    def may_fetch(self, rank: int) -> bool:
        """Whether level ``rank`` may fetch: no thread of a higher level holds work."""
        with self._lock:
            return not any(members for r, members in self._busy.items() if r < rank)


class GateSlot:
    """One thread's place at a gate: its level and identity."""

    def __init__(self, gate: PriorityGate, rank: int) -> None:
        self.gate = gate
        self.rank = rank
        self.member = id(self)
        gate.join(rank, self.member)

    def may_fetch(self) -> bool:
        return self.gate.may_fetch(self.rank)

    def report(self, *, busy: bool) -> None:
        self.gate.report(self.rank, self.member, busy=busy)
