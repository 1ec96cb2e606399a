"""What each running instance tells the operators, and reading it back.

With every heartbeat an instance writes a small JSON report to
``redisq:{q}:g:<g>:instance:<name>`` (``heartbeat.lua``, same call): its host, pid,
start time, how many deliveries it handled and failed, which entry its handler runs and
since when. The report expires :data:`REPORT_GRACE_MS` after the heartbeat, so a
stopped instance's report stays readable for a minute and then goes by itself.

:func:`read_instances` lists the instances of a logical consumer with their reports,
what each holds in flight and whether its heartbeat is alive, in two pipelined round
trips.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from redisq_django.core.clock import now_ms
from redisq_django.core.delivery import Delivery
from redisq_django.core.keys import GroupKeys
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import json_object_or_reason, to_str

#: A report outlives its instance's last heartbeat by this much, ms.
REPORT_GRACE_MS = 60_000
#: At most this many instances of one logical consumer are listed.
MAX_LISTED = 500


def started_tag(delivery: Delivery) -> str:
    """``log:<entry id>`` or ``direct:<entry id>``: how ``running`` names an entry."""
    return f"{delivery.stream.value}:{to_str(delivery.entry_id)}"


class Report:
    """The report of one instance, kept up to date between heartbeats.

    Args:
        gkeys: its logical consumer's keys.
        instance: its name.
    """

    def __init__(self, gkeys: GroupKeys, instance: str) -> None:
        self.gkeys = gkeys
        self.instance = instance
        self.host = socket.gethostname()
        self.started_ms = now_ms()
        self.handled = 0
        self.failed = 0
        self._running = ""
        self._since = 0

    def heartbeat_call(
        self, ttl_ms: int, running: Delivery | None = None
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of ``heartbeat.lua``: alive for ``ttl_ms``, with the report
        (none with a negative ``ttl_ms``: the instance is being marked dead)."""
        if ttl_ms <= 0:
            return [self.gkeys.instances], [self.instance, ttl_ms]
        tag = started_tag(running) if running is not None else ""
        if tag != self._running:
            self._running, self._since = tag, now_ms()
        report = {
            "host": self.host,
            "pid": os.getpid(),  # read each time: a worker process may have forked
            "started": self.started_ms,
            "handled": self.handled,
            "failed": self.failed,
            "running": tag,
            "since": self._since if tag else None,
            "ttl": ttl_ms,
        }
        text = json.dumps(report, separators=(",", ":"))
        return (
            [self.gkeys.instances, self.gkeys.instance(self.instance)],
            [self.instance, ttl_ms, text, ttl_ms + REPORT_GRACE_MS],
        )


@dataclass(frozen=True)
class Instance:
    """One instance of a logical consumer, as the operators' pages show it.

    Attributes:
        name: the instance (consumer) name.
        alive: its heartbeat has not expired.
        expiry_ms: when its heartbeat expires (ms, Redis's clock).
        in_flight: deliveries it holds, not yet acknowledged.
        running: the entry its handler started last (``log:<id>``), "" for none.
        report: what it reported with its last heartbeat ({} when none is left:
            another language's client, or gone for more than a minute).
        unreadable: why its report could not be read ("" when it was, or is missing).
    """

    name: str
    alive: bool
    expiry_ms: int
    in_flight: int
    running: str
    report: dict[str, Any]
    unreadable: str = ""

    @property
    def last_heartbeat_ms(self) -> int | None:
        ttl = self.report.get("ttl")
        return self.expiry_ms - int(ttl) if isinstance(ttl, int) else None

    @property
    def busy(self) -> bool:
        """Its handler runs a message now: it holds the entry it last started."""
        return bool(self.running) and self.report.get("running") == self.running


def read_instances(client: RedisClient, gkeys: GroupKeys) -> list[Instance]:
    """The instances of ``gkeys``' logical consumer, by name (at most :data:`MAX_LISTED`),
    in two pipelined round trips.

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
    """
    log, group = gkeys.queue_keys.log, gkeys.group
    with client.pipeline(transaction=False) as pipe:
        pipe.zrange(gkeys.instances, 0, MAX_LISTED - 1, withscores=True)
        pipe.hgetall(gkeys.running)
        pipe.xpending(log, group)
        pipe.xpending(gkeys.direct, group)
        pipe.time()
        members, running, p_log, p_direct, now = pipe.execute(raise_on_error=False)
    members = members if isinstance(members, list) else []
    running = (
        {to_str(k): to_str(v) for k, v in running.items()} if isinstance(running, dict) else {}
    )
    held = _held(p_log)
    for name, n in _held(p_direct).items():
        held[name] = held.get(name, 0) + n
    names = sorted(to_str(m) for m, _ in members)
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(gkeys.instance(name))
        reports = pipe.execute(raise_on_error=False)
    redis_now = (
        int(now[0]) * 1000 + int(now[1]) // 1000 if isinstance(now, list | tuple) else now_ms()
    )
    expiry = {to_str(m): int(score) for m, score in members}
    return [
        Instance(
            name=name,
            alive=expiry[name] >= redis_now,
            expiry_ms=expiry[name],
            in_flight=held.get(name, 0),
            running=running.get(name, ""),
            report=report,
            unreadable=reason,
        )
        for name, (report, reason) in zip(
            names, (json_object_or_reason(r) for r in reports), strict=True
        )
    ]


def _held(summary: Any) -> dict[str, int]:
    """Instance -> entries it holds, from an ``XPENDING`` summary (as redis-py parses it:
    ``{"pending": n, "consumers": [{"name": …, "pending": …}, …], …}``)."""
    if not isinstance(summary, dict):
        return {}
    return {to_str(c["name"]): int(c["pending"]) for c in summary.get("consumers") or []}
