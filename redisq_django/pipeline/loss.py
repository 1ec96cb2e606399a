"""Data loss of a streaming read: entries removed before the stream read them.

Retention never removes what a registered archive has not stored, but a hard cap
(``MAX_LENGTH`` / ``MAX_AGE``) or a purge of the queue (``Broker.purge``: the admin's
Purge, ``manage.py redisq purge``) may, and a read-only stream (no option ``archive``)
holds nothing at all. The archive's gap record says which part a purge removed, and
when. A stream finds out in two places: when it plans a micro-batch, the
greatest id retention ever removed from the stream (``last_trimmed``) is after its
position; while it reads, the first entry of a range is not the one that was there when
it was planned. With ``failOnDataLoss`` (the default, as in Kafka's source) the query
then fails with :class:`DataLossError`; without it, a warning is logged, a named archive
records the :class:`Loss` for its job's report, and the stream goes on with what is left.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from redisq_django.core.errors import RedisqError

logger = logging.getLogger("redisq.pipeline")


class DataLossError(RedisqError, RuntimeError):
    """Entries a streaming read needed were removed before it read them."""


@dataclass(frozen=True)
class Loss:
    """Entries of one stream removed before a reader had them.

    Attributes:
        queue: the queue.
        partition: the queue's partition whose stream lost them (None: unpartitioned).
        table: ``messages`` or ``events``.
        archive: the named archive that lost them (None: a read-only stream).
        after: the reader had everything up to this id.
        first: the first missing entry id, when known.
        last: the last missing entry id, when known.
        before: when ``last`` is not known, the first entry still there (exclusive).
        count: how many, when known (``at_most``: no more than that many).
        at_most: ``count`` is an upper bound.
        found_ms: when the loss was found (ms since the epoch).
        purged_ms: when a purge removed them, or some of them (the last such purge, ms
            since the epoch by Redis's clock; None: no purge did).
        purged: how many of them a purge removed, when known.
    """

    queue: str
    table: str
    archive: str | None
    after: str
    first: str | None = None
    last: str | None = None
    before: str | None = None
    count: int | None = None
    at_most: bool = False
    found_ms: int = 0
    partition: int | None = None
    purged_ms: int | None = None
    purged: int | None = None

    @property
    def where(self) -> str:
        """The queue, and its partition when it has partitions: ``orders partition 2``."""
        return self.queue if self.partition is None else f"{self.queue} partition {self.partition}"

    def with_time(self) -> Loss:
        """This loss, found now."""
        return Loss(**{**asdict(self), "found_ms": int(time.time() * 1000)})

    def span(self) -> str:
        """The missing entries in words: ``entries 1-0 to 9-0 (5)``."""
        first = f"entries {self.first}" if self.first else f"entries after {self.after}"
        if self.last:
            upto = f" to {self.last}" if self.first else f" up to {self.last}"
        else:
            upto = f" up to (not including) {self.before}" if self.before else " on"
        count = ""
        if self.count is not None:
            count = f" (at most {self.count})" if self.at_most else f" ({self.count})"
        return first + upto + count

    @property
    def by_purge_only(self) -> bool:
        """A purge removed every one of them (no hard cap did)."""
        return self.purged_ms is not None and self.purged is not None and self.purged == self.count

    def cause(self) -> str:
        """Why they are gone: ``removed by a purge at 2026-12-02 18:00:00 UTC``, ``dropped
        by the hard cap, MAX_LENGTH / MAX_AGE`` or both."""
        cap = "dropped by the hard cap, MAX_LENGTH / MAX_AGE"
        if not self.archive:
            return (
                "trimmed by retention, which does not wait for a stream without option "
                "'archive', or dropped by a hard cap"
            )
        if self.purged_ms is None:
            return cap
        at = dt.datetime.fromtimestamp(self.purged_ms / 1000, dt.UTC)
        purge = f"removed by a purge at {at:%Y-%m-%d %H:%M:%S} UTC"
        if self.by_purge_only:
            return purge
        if self.purged is not None and self.count is not None:
            return f"{self.purged} {purge}, the others {cap}"
        return f"{purge}, or {cap}"

    def summary(self) -> str:
        """What is gone, and why."""
        who = f"archive {self.archive!r}" if self.archive else "this stream"
        why = self.cause()
        return (
            f"Data loss in the {self.table} of queue {self.queue!r}"
            + ("" if self.partition is None else f" (partition {self.partition})")
            + f": {self.span()} were "
            f"removed before {who} read them ({why})."
        )

    def message(self) -> str:
        """One line for the user: what is gone, why, what to do."""
        go_on = (
            f"{self.summary()} Set failOnDataLoss=false to go on from what is left (the "
            "archive job: --no-fail-on-data-loss)"
        )
        if self.by_purge_only:
            return f"{go_on}: nothing brings purged messages back."
        fix = "raise the cap" if self.archive else "name an archive (option 'archive')"
        return f"{go_on}, or {fix}."

    def to_json(self) -> str:
        """The record a named archive keeps for its job (PROTOCOL.md, archive_gap.lua)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Loss | None:
        """A record of :meth:`to_json` (None for one this version cannot read)."""
        try:
            raw: Any = json.loads(text)
            return cls(**{k: raw[k] for k in raw if k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None


def report(loss: Loss, fail: bool) -> Loss:
    """Fail with ``loss``, or log it as a warning and return it (stamped with the time).

    Raises:
        DataLossError: when ``fail``.
    """
    if fail:
        raise DataLossError(loss.message())
    logger.warning("redisq: %s Going on (failOnDataLoss=false).", loss.summary())
    return loss.with_time()
