"""The ``redisq`` data source's options, parsed once on the driver.

Spark hands a data source its options as a case-insensitive map of strings; this module
turns them into one frozen, picklable :class:`SourceOptions` that travels to the
executors inside the reader, the partitions and the writer. It holds only what an
executor needs to reach Redis (URL, prefix, cluster flag): never Django settings.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

from redisq_django.core.clock import datetime_to_ms, first_id_of_ms, last_id_of_ms
from redisq_django.core.keys import validate_name
from redisq_django.pipeline.schemas import Table

#: Default batch read parallelism: partitions per stream read.
DEFAULT_PARTITIONS = 4
#: Envelopes per ``Broker.send`` round trip when writing.
DEFAULT_WRITE_BATCH = 500
#: Entries per XRANGE page when reading.
DEFAULT_PAGE_SIZE = 2000
#: A partition planned to hold more entries than this is split by entry count.
DEFAULT_MAX_ENTRIES_PER_PARTITION = 100_000
#: How long a transient Redis fault is waited out before a read or write fails (seconds).
DEFAULT_RETRY_TIMEOUT_S = 600.0
#: Socket (and connect) timeout of the data source's Redis clients (seconds).
DEFAULT_SOCKET_TIMEOUT_S = 10.0

_ENTRY_ID = re.compile(r"^\d+-\d+$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


class OptionError(ValueError):
    """An option of the ``redisq`` data source is missing or invalid."""


def _flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = str(options.get(name, default)).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise OptionError(f"Option {name!r} must be true or false, got {raw!r}.")


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"Option {name!r} must be an integer, got {raw!r}.") from None
    if value <= 0:
        raise OptionError(f"Option {name!r} must be > 0, got {value}.")
    return value


def _seconds(options: Mapping[str, str], name: str, default: float, *, zero: bool) -> float:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise OptionError(f"Option {name!r} must be a number of seconds, got {raw!r}.") from None
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        bound = ">= 0" if zero else "> 0"
        raise OptionError(f"Option {name!r} must be {bound} seconds (finite), got {raw!r}.")
    return value


def _queues(raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    names = [q.strip() for q in str(raw).split(",") if q.strip()]
    return tuple(dict.fromkeys(validate_name("queue", q) for q in names))


def _bound(options: Mapping[str, str], name: str, *, end: bool) -> str | None:
    """Option ``since``/``until`` as an entry id: given as an id (``1700000000000-0``), or
    an ISO 8601 time (naive: UTC) meaning the first (``since``) or last (``until``) id of
    its millisecond."""
    raw = str(options.get(name) or "").strip()
    if not raw:
        return None
    if _ENTRY_ID.match(raw):
        return raw
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise OptionError(
            f"Option {name!r} must be an ISO 8601 time or an entry id; got {raw!r}."
        ) from None
    ms = datetime_to_ms(when if when.tzinfo else when.replace(tzinfo=dt.UTC))  # rounds up
    if not end:
        return first_id_of_ms(ms)
    return last_id_of_ms(ms - 1 if when.microsecond % 1000 else ms)


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the ``redisq`` data source, validated.

    Attributes:
        url: the Redis URL (``redis://``, ``rediss://``, ``unix://``); a cluster node's
            URL when ``cluster``.
        prefix: the key prefix (``redisq``).
        cluster: connect with ``RedisCluster`` instead of ``Redis``.
        queues: the queues to read (empty: every queue in ``P:queues`` at planning time),
            or, when writing, the target queue (at most one; empty: column ``queue``).
        table: what to read (``messages``, ``events`` or ``dead``).
        partitions: batch read partitions per stream.
        starting_offsets: where a streaming read starts: ``earliest``, ``latest``, an
            ISO 8601 time or a JSON object ``{"queue": "entry-id"}``.
        max_entries_per_trigger: streaming admission control: most entries a
            micro-batch reads, all streams together (None: no limit by entries).
        max_records_per_trigger: streaming admission control: most rows a micro-batch
            reads (an events entry holds a row per message; one entry holding more is
            read whole, alone in its batch); None: no limit by rows.
        max_entries_per_partition: a partition (a time slice of a stream) estimated to
            hold more entries than this is split further by entry count.
        retry_timeout: how long a transient Redis fault is waited out (seconds; 0: fail
            at once), counted from the outage's first failure.
        socket_timeout: socket and connect timeout of the Redis clients (seconds): how
            soon a stalled Redis is noticed (and retried).
        commit_archive: a streaming read of messages or events records how far it got
            as the archive's position (``Broker.commit_archive``); false for a stream
            that is not the archive (a dashboard), so retention does not count on it.
        consumer: when writing, deliver only to this logical consumer.
        once: when writing, publish at most once per message id (column ``message_id``).
        write_batch: envelopes per send when writing.
        page_size: entries per XRANGE page when reading.
        since: a batch read starts at this entry id (inclusive; None: the first entry).
        until: a batch read ends at this entry id (inclusive; None: the last entry).
    """

    url: str
    prefix: str = "redisq"
    cluster: bool = False
    queues: tuple[str, ...] = ()
    table: Table = Table.MESSAGES
    partitions: int = DEFAULT_PARTITIONS
    starting_offsets: str = "earliest"
    max_entries_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    max_entries_per_partition: int = DEFAULT_MAX_ENTRIES_PER_PARTITION
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S
    commit_archive: bool = True
    consumer: str | None = None
    once: bool = False
    write_batch: int = DEFAULT_WRITE_BATCH
    page_size: int = DEFAULT_PAGE_SIZE
    since: str | None = None
    until: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option map (keys are case-insensitive there already).

        Raises:
            OptionError: ``url`` is missing, or an option has an invalid value.
        """
        url = str(options.get("url") or "").strip()
        if not url:
            raise OptionError(
                "The redisq data source needs option 'url' (e.g. redis://localhost:6379/0)."
            )
        raw_table = str(options.get("table", Table.MESSAGES.value)).strip().lower()
        try:
            table = Table(raw_table)
        except ValueError:
            choices = ", ".join(t.value for t in Table)
            raise OptionError(
                f"Option 'table' must be one of {choices}; got {raw_table!r}."
            ) from None
        consumer = options.get("consumer")
        return cls(
            url=url,
            prefix=str(options.get("prefix") or "redisq").strip(),
            cluster=_flag(options, "cluster"),
            queues=_queues(options.get("queue")),
            table=table,
            partitions=_positive_int(options, "partitions", DEFAULT_PARTITIONS) or 1,
            starting_offsets=str(options.get("startingOffsets") or "earliest").strip(),
            max_entries_per_trigger=_positive_int(options, "maxEntriesPerTrigger", None),
            max_records_per_trigger=_positive_int(options, "maxRecordsPerTrigger", None),
            max_entries_per_partition=_positive_int(
                options, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION
            )
            or DEFAULT_MAX_ENTRIES_PER_PARTITION,
            retry_timeout=_seconds(options, "retryTimeout", DEFAULT_RETRY_TIMEOUT_S, zero=True),
            socket_timeout=_seconds(options, "socketTimeout", DEFAULT_SOCKET_TIMEOUT_S, zero=False),
            commit_archive=_flag(options, "commitArchive", default=True),
            consumer=validate_name("consumer", consumer.strip()) if consumer else None,
            once=_flag(options, "once"),
            write_batch=_positive_int(options, "batchSize", DEFAULT_WRITE_BATCH)
            or DEFAULT_WRITE_BATCH,
            page_size=_positive_int(options, "pageSize", DEFAULT_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
            since=_bound(options, "since", end=False),
            until=_bound(options, "until", end=True),
        )
