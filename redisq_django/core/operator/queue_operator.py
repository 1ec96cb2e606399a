"""What an operator reads and does on one Redis, handed out by the broker
(``broker.operator``): the lists of a queue, one message, instances, an ordered
consumer's held-back keys, figures of many queues, trends, the server's shortcomings,
and delivering now, releasing a key or purging.

The admin, the management commands and the metrics read Redis through this object
and the broker (docs/layout.md, "the core's seam"), never through the broker's client:
what the core stores, and how, stays the core's. Each method is the core function it
names, with the broker's client, scripts, keys and configuration; errors are those of
that function (redis-py's: the caller decides what an outage means for it).

A partitioned queue (``core/partitions/``) is read as one queue: its figures and trends
add up over its partitions (``core/partition_stats.py``), its lists merge theirs
(``core/operator/partition_pages.py``) and each entry's ref names its partition
(``<ref>@<i>``), which :meth:`QueueOperator.find` and :meth:`QueueOperator.deliver_now`
read back; an ordering key is released in its key's partition.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from redisq_django.core import ordered, trends
from redisq_django.core.batch import Command, run_batch
from redisq_django.core.config import CoreConfig
from redisq_django.core.instances import Instance, read_instances
from redisq_django.core.keys import QueueKeys
from redisq_django.core.limits import FlowFigures, read_flow
from redisq_django.core.operator import actions, browse, trend_sampler
from redisq_django.core.operator.partition_pages import Fetch, merged_page, part_ref, split_ref
from redisq_django.core.operator.server import ServerProblem, server_problems, warn_server_problems
from redisq_django.core.partition_stats import read_layouts, sum_trends
from redisq_django.core.partitions import partition_of
from redisq_django.core.scripts import Scripts
from redisq_django.core.stats import QueueStats
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

#: :meth:`QueueOperator.endable_refs` reads at most this many pages of each list (of
#: ``browse.MAX_PAGE``: 100,000 messages).
FIND_PAGES = 500


class QueueOperator:
    """An operator's reads and actions on the queues of one broker.

    Args:
        client: the broker's redis-py client.
        scripts: its registered scripts.
        config: its configuration (history on or off, trends on or off).
        keys: builds a queue's keys (``Broker.keys``).
        layout: where a queue's messages live (``Broker.layout``: its keys, or each of
            its partitions'); default: its keys alone.
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        keys: Callable[[str], QueueKeys],
        layout: Callable[[str], tuple[QueueKeys, ...]] | None = None,
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._config = config
        self._keys = keys
        self._layout = layout or (lambda queue: (keys(queue),))

    def _page(
        self, kind: str, queue: str, fetch: Fetch, cursor: str | None, n: int | None
    ) -> browse.Page:
        """A page of list ``kind`` of ``queue``: one read, or its partitions' merged."""
        layout = self._layout(queue)
        if len(layout) == 1:
            return fetch(layout[0], cursor, browse.page_size(n))
        return merged_page(kind, layout, fetch, cursor, n)

    def _at(self, queue: str, ref: str) -> tuple[QueueKeys, str]:
        """The keys of the partition ``ref`` names (``<ref>@<i>``) and the ref within it;
        an unpartitioned queue's keys and ``ref`` as it is.

        Raises:
            ValueError: on a partitioned queue, ``ref`` names none of its partitions.
        """
        layout = self._layout(queue)
        if len(layout) == 1:
            return layout[0], ref
        base, part = split_ref(ref)
        if part is None or part >= len(layout):
            raise ValueError(
                f"Queue {queue!r} has {len(layout)} partitions: a message reference names "
                f"one of them (<ref>@0 to <ref>@{len(layout) - 1}), not {ref!r}. Take the "
                "reference from a list of the queue."
            )
        return layout[part], base

    # -- the lists of a queue and of its consumers (core/operator/browse.py) ----------------------

    def log(self, queue: str, cursor: str | None = None, n: int | None = None) -> browse.Page:
        """A page of the queue's log, the newest first."""
        return self._page(
            browse.LOG, queue, lambda k, c, m: browse.log(self._client, k, c, m), cursor, n
        )

    def delayed(self, queue: str, cursor: str | None = None, n: int | None = None) -> browse.Page:
        """A page of the queue's delayed messages, the soonest due first."""
        return self._page(
            browse.DELAYED, queue, lambda k, c, m: browse.delayed(self._client, k, c, m), cursor, n
        )

    def waiting(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of what logical consumer ``consumer`` receives next."""
        return self._page(
            browse.WAITING,
            queue,
            lambda k, c, m: browse.waiting(self._client, k.group(consumer), c, m),
            cursor,
            n,
        )

    def retrying(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of ``consumer``'s failed messages waiting for their next attempt."""
        return self._page(
            browse.RETRYING,
            queue,
            lambda k, c, m: browse.retrying(self._client, k.group(consumer), c, m),
            cursor,
            n,
        )

    def in_flight(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of ``consumer``'s deliveries not yet acknowledged."""
        return self._page(
            browse.IN_FLIGHT,
            queue,
            lambda k, c, m: browse.in_flight(self._client, k.group(consumer), c, m),
            cursor,
            n,
        )

    def find(self, queue: str, consumer: str | None, ref: str) -> browse.Entry | None:
        """The entry ``ref`` names, or None when it is gone (``browse.find``).

        Raises:
            ValueError: ``ref`` is not a ref, or needs a ``consumer`` (or, on a
                partitioned queue, names no partition).
        """
        keys, ref = self._at(queue, ref)
        found = browse.find(self._client, keys, consumer, ref)
        if found is None or keys.part is None:
            return found
        return replace(found, part=keys.part)

    def instances(self, queue: str, consumer: str) -> list[Instance]:
        """The instances of logical consumer ``consumer``, by name (of every partition of
        a partitioned queue: each runs instances of its own)."""
        layout = self._layout(queue)
        if len(layout) == 1:
            return read_instances(self._client, layout[0].group(consumer))
        found = [i for keys in layout for i in read_instances(self._client, keys.group(consumer))]
        return sorted(found, key=lambda i: i.name)

    def held_keys(
        self, queue: str, consumer: str, limit: int = ordered.HELD_LIMIT
    ) -> list[ordered.HeldKey]:
        """The ordering keys of ordered consumer ``consumer`` that hold back later
        messages, most waiting first, at most ``limit`` (``ordered.held_keys``; over
        every partition of a partitioned queue, each holder's ref naming its partition)."""
        layout = self._layout(queue)
        if len(layout) == 1:
            return ordered.held_keys(self._client, layout[0].group(consumer), limit)
        held = [
            replace(h, ref=None if h.ref is None else part_ref(h.ref, i))
            for i, keys in enumerate(layout)
            for h in ordered.held_keys(self._client, keys.group(consumer), limit)
        ]
        return sorted(held, key=lambda h: (-h.waiting, h.key))[:limit]

    # -- figures -----------------------------------------------------------------------

    def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        """The stats of ``queues``, in that order, in two round trips whatever their
        number (``stats.read_many``); a partitioned queue's added up over its
        partitions (``partition_stats.read_layouts``)."""
        layouts = [self._layout(q) for q in queues]
        return read_layouts(self._client, layouts, history=self._config.history)

    def entries_added(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages ever appended to each queue's log, in one round trip (Redis >= 7:
        ``XINFO STREAM``'s ``entries-added``; a queue without a log yet, or an older
        Redis, is left out; a partitioned queue's partitions add up)."""
        if not queues:
            return {}
        logs = [(queue, keys.log) for queue in queues for keys in self._layout(queue)]
        with self._client.pipeline(transaction=False) as pipe:
            for _, log in logs:
                pipe.execute_command("XINFO", "STREAM", log)
            replies = pipe.execute(raise_on_error=False)
        out: dict[str, int] = {}
        for (queue, _), reply in zip(logs, replies, strict=True):
            if isinstance(reply, Exception):  # no log yet (ERR no such key), or a wrong type
                continue
            added = _as_dict(reply).get("entries-added")
            if added is not None:
                out[queue] = out.get(queue, 0) + int(added)
        return out

    def trends(self, queues: Sequence[str], minutes: int) -> list[trends.Trend]:
        """The last ``minutes`` minutes of each queue's trends, in one round trip (a
        partitioned queue's: its base hashes' and its partitions', added up, each
        partition's own in its ``partitions``: ``core/partition_stats.py``)."""
        sources = []
        for queue in queues:
            layout = self._layout(queue)
            sources.append((queue, layout if len(layout) == 1 else (self._keys(queue), *layout)))
        flat = [keys for _, keys_list in sources for keys in keys_list]
        read = iter(trends.read_trends(self._client, flat, minutes))
        out = []
        for queue, keys_list in sources:
            mine = [next(read) for _ in keys_list]
            out.append(mine[0] if len(mine) == 1 else sum_trends(queue, mine[0], mine[1:]))
        return out

    def count_skipped(self, queue: str, consumer: str) -> None:
        """Count in this minute's trends a delivery ``consumer`` skipped as handled before
        (an ``atomic=True`` consumer's inbox had it)."""
        field = trends.per_consumer(trends.SKIPPED, consumer)
        commands = trends.counter(self._keys(queue)).commands({field: 1})
        run_batch(self._client, commands, transaction=False)

    def last_hour(self, queue: str, consumer: str, what: str) -> int:
        """Counter ``what`` (``trends.TIMED_OUT``, ``trends.SKIPPED``...) of ``consumer``
        summed over the last hour."""
        (trend,) = self.trends([queue], 60)
        field = trends.per_consumer(what, consumer)
        return sum(m.get(field, 0) for m in trend.minutes)

    def flows(self, consumers: Sequence[tuple[str, str]]) -> list[FlowFigures]:
        """What the limits of each ``(queue, consumer)`` are doing now
        (``core/limits.py``), in one round trip."""
        groups = [self._keys(q).group(c) for q, c in consumers]
        return read_flow(self._client, self._scripts, groups)

    def flow(self, queue: str, consumer: str) -> tuple[FlowFigures, int]:
        """What ``consumer``'s limits are doing now (``core/limits.py``), and how many of
        its attempts ran past its time limit in the last hour."""
        (figures,) = self.flows([(queue, consumer)])
        return figures, self.last_hour(queue, consumer, trends.TIMED_OUT)

    def sample_trends(self, queues: Sequence[str]) -> None:
        """Sample the queues' backlog figures into this minute's trends (a worker's job;
        a partitioned queue's, added up, into its base hash)."""
        if not queues:
            return
        commands: list[Command] = []
        for queue, stats in zip(queues, self.stats(queues), strict=True):
            commands += trends.sample_commands(self._keys(queue), stats)
        run_batch(self._client, commands, transaction=False)

    def site_sampler(self) -> trend_sampler.SiteSampler:
        """What a worker ticks to sample every queue's backlog while it holds the lease."""
        return trend_sampler.SiteSampler(
            self._client, self._config.prefix, self._keys, read=self.stats
        )

    def record_trend_samples(self, read: Sequence[QueueStats]) -> bool:
        """Record the figures just ``read`` as this minute's backlog samples, unless a
        worker samples every queue (``core/operator/trend_sampler.py``); whether they were."""
        return trend_sampler.record(self._client, self._config.prefix, self._keys, read)

    # -- the server --------------------------------------------------------------------

    def ping(self) -> bool:
        """Whether Redis answers a PING.

        Raises:
            redis.RedisError: Redis cannot be reached (or refuses).
        """
        return bool(self._client.ping())

    def server_problems(self) -> list[ServerProblem]:
        """What the Redis server lacks for the guarantees (``core/operator/server.py``).

        Raises:
            redis.RedisError: Redis cannot be reached.
        """
        return server_problems(self._client)

    def warn_server_problems(self) -> list[ServerProblem]:
        """Log each of :meth:`server_problems` as a WARNING; never raises."""
        return warn_server_problems(self._client)

    # -- actions (core/operator/actions.py) -----------------------------------------------------

    def deliver_now(self, queue: str, consumer: str | None, ref: str) -> str | None:
        """Deliver one delayed message (``consumer`` None) or retry of ``consumer`` now.

        Returns:
            Its new entry id, or None when it is no longer waiting.

        Raises:
            ValueError: ``ref`` names no delayed message or retry (or, on a partitioned
                queue, no partition).
        """
        keys, ref = self._at(queue, ref)
        return actions.deliver_now(self._client, self._scripts, keys, consumer, ref)

    def end_message(
        self, queue: str, consumer: str | None, ref: str, *, by: str = "", delete: bool = False
    ) -> actions.Ended:
        """End one delayed message (``consumer`` None), retry or private-input entry of
        ``consumer`` now: a dead letter (reason ``ended``), or deleted with ``delete``; a
        key it holds passes to the key's next message. A message waiting in the log is
        marked for ``consumer`` (None: every consumer that has not read it), which ends
        it when it reads it: outcome ``marked`` (``actions.end_message``).

        Raises:
            ValueError: ``ref`` names no message that can be ended (or no partition).
            CorruptState: another client wrote what the script reads (nothing done).
        """
        keys, ref = self._at(queue, ref)
        return actions.end_message(
            self._client, self._scripts, keys, consumer, ref, by=by, delete=delete
        )

    def endable_refs(
        self, queue: str, consumer: str, ids: Collection[str], pages: int = FIND_PAGES
    ) -> dict[str, str]:
        """The refs of ``consumer``'s messages with these message ids that can be ended
        (:meth:`end_message`), by id: its retries first, then what it receives next (its
        private input, then the log after its position). Each list is read in pages of
        ``browse.MAX_PAGE``, at most ``pages`` of them, until every id is found; an id
        not found is left out."""
        wanted, found = set(ids), {}
        for kind in (self.retrying, self.waiting):
            cursor: str | None = None
            for _ in range(pages):
                page = kind(queue, consumer, cursor, browse.MAX_PAGE)
                for e in page.entries:
                    if e.message_id in wanted and e.message_id not in found:
                        found[e.message_id] = e.ref
                cursor = page.next
                if cursor is None or len(found) == len(wanted):
                    break
        return found

    def deliver_waiting(
        self, queue: str, consumer: str | None, ids: Collection[str] | None = None
    ) -> actions.Delivered:
        """Deliver now the queue's delayed messages (``consumer`` None) or ``consumer``'s
        retries: those with these message ids, or all (``ids`` None); over every
        partition of a partitioned queue."""
        layout = self._layout(queue)
        if len(layout) == 1:
            return actions.deliver_waiting(self._client, self._scripts, layout[0], consumer, ids)
        count, done = 0, list[str]()
        wanted = None if ids is None else list(dict.fromkeys(ids))
        for keys in layout:
            if wanted is not None and not wanted:
                break
            got = actions.deliver_waiting(self._client, self._scripts, keys, consumer, wanted)
            count, done = count + got.count, done + got.ids
            wanted = None if wanted is None else got.missing
        return actions.Delivered(count, done, wanted or [])

    def release_key(self, queue: str, consumer: str, key: str) -> bool:
        """Free ordering ``key`` of ``consumer`` by hand: its first waiting message goes
        to the consumer's input now and holds it (``ordered.release_key``).

        Returns:
            False when nothing held the key.

        Raises:
            CorruptState: another client wrote what the hand-over reads (nothing done).
        """
        layout = self._layout(queue)  # a key's messages are all in its key's partition
        keys = layout[partition_of(key, len(layout))] if len(layout) > 1 else layout[0]
        return ordered.release_key(self._scripts, keys.group(consumer), key)

    def purge_consumer(self, queue: str, consumer: str) -> tuple[int, int]:
        """Skip ``consumer``'s backlog, discard its retries and private input.

        Returns:
            ``(retries removed, private-input entries removed)``, over every partition
            of a partitioned queue.

        Raises:
            redis.ResponseError: NOGROUP when ``consumer`` is not registered (on the
                first partition it is missing from: those before it are purged).
        """
        retries = entries = 0
        for keys in self._layout(queue):
            r, e = actions.purge_consumer(
                self._client, self._scripts, keys, consumer, history=self._config.history
            )
            retries, entries = retries + r, entries + e
        return retries, entries


def _as_dict(reply: Any) -> dict[str, Any]:
    # RESP2: a flat [name, value, ...] list; RESP3: a map.
    if isinstance(reply, dict):
        return {to_str(k): v for k, v in reply.items()}
    return {to_str(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
