"""The ``redisq`` data source's options, parsed once on the driver.

Spark hands a data source its options as a case-insensitive map of strings; this module
turns them into one frozen, picklable :class:`SourceOptions` that travels to the
executors inside the reader, the slices it plans and the writer. It holds only what an
executor needs to reach Redis (URL, prefix, cluster flag): never Django settings.

A **slice** is one stream's entry-id range that one Spark task reads (a Spark input
partition); "partition" alone is a queue's partition (docs/layout.md, "Words").
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import logging
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from redisq_django.core.clock import datetime_to_ms, first_id_of_ms, last_id_of_ms
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.schemas import Table

logger = logging.getLogger("redisq.pipeline")

#: Default read parallelism: time slices per stream read.
DEFAULT_SLICES_PER_STREAM = 4
#: Envelopes per ``Broker.send`` round trip when writing.
DEFAULT_WRITE_BATCH = 500
#: Entries per XRANGE page when reading.
DEFAULT_PAGE_SIZE = 2000
#: A slice planned to hold more entries than this is split by entry count.
DEFAULT_MAX_ENTRIES_PER_SLICE = 100_000
#: How long a transient Redis fault is waited out before a read or write fails (seconds).
DEFAULT_RETRY_TIMEOUT_S = 600.0
#: Socket (and connect) timeout of the data source's Redis clients (seconds).
DEFAULT_SOCKET_TIMEOUT_S = 10.0

_ENTRY_ID = re.compile(r"^\d+-\d+$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

#: Every option of the data source (Spark matches option names case-insensitively).
OPTIONS = (
    "url",
    "prefix",
    "cluster",
    "queue",
    "table",
    "slicesPerStream",
    "since",
    "until",
    "startingOffsets",
    "maxEntriesPerTrigger",
    "maxRecordsPerTrigger",
    "maxEntriesPerSlice",
    "retryTimeout",
    "socketTimeout",
    "archive",
    "takeOver",
    "failOnDataLoss",
    "consumer",
    "once",
    "batchSize",
    "pageSize",
)
#: Options of 0.9 under their new names, accepted one minor version with a warning: a
#: "partition" is a queue's now, and what one Spark task reads is a slice.
RENAMED = {"partitions": "slicesPerStream", "maxEntriesPerPartition": "maxEntriesPerSlice"}
#: Options Spark itself passes to a streaming write; accepted and left alone.
SPARK_OPTIONS = ("checkpointLocation", "queryName")
#: Options that only one use of the data source reads: given to another use they would do
#: nothing, so they are refused (``check_use``).
ONLY_FOR = {
    "since": "read",
    "until": "read",
    "startingOffsets": "stream",
    "maxEntriesPerTrigger": "stream",
    "maxRecordsPerTrigger": "stream",
    "archive": "stream",
    "takeOver": "stream",
    "failOnDataLoss": "stream",
    "once": "write",
    "batchSize": "write",
    "consumer": "write",
}
#: How each use is called in what users write.
USES = {
    "read": "a batch read (spark.read)",
    "stream": "a streaming read (spark.readStream)",
    "write": "a write (df.write / df.writeStream)",
}
#: Kafka's options people bring along, and ours that do what they meant.
KAFKA = {
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
    "subscribe": "queue",
    "kafka.bootstrap.servers": "url",
    "startingtimestamp": "since",
}
#: Options refused with what to do instead.
REFUSED = {
    "commitarchive": "Option 'commitArchive' was removed: a stream is read-only unless "
    "option 'archive' names it (a named archive registers, holds retention and commits).",
    "path": "The redisq data source takes no path: name queues with option 'queue' and "
    "call load() / save() without an argument.",
}


def check_names(options: Mapping[str, str]) -> None:
    """Refuse an option the data source does not know (a misspelt one would be ignored).

    Raises:
        OptionError: naming the option, the closest valid one and the valid ones.
    """
    valid = {name.lower(): name for name in OPTIONS + SPARK_OPTIONS}
    old_names = {name.lower() for name in RENAMED}
    for key in options:
        lower = str(key).lower()
        if lower in REFUSED:
            raise OptionError(REFUSED[lower])
        if lower in KAFKA:
            raise OptionError(
                f"Option {key!r} is Kafka's; the redisq data source's is {KAFKA[lower]!r} "
                "(docs/reference/datasource.md)."
            )
        if lower not in valid and lower not in old_names:
            close = difflib.get_close_matches(lower, list(valid), n=1, cutoff=0.6)
            hint = f" (did you mean {valid[close[0]]!r}?)" if close else ""
            raise OptionError(
                f"Unknown option {key!r} of the redisq data source{hint}. "
                f"Valid options: {', '.join(OPTIONS)}."
            )


def check_use(options: Mapping[str, str], use: str) -> None:
    """Refuse an option that ``use`` (``read``, ``stream`` or ``write``) does not read.

    Raises:
        OptionError: naming the option and the use it belongs to.
    """
    only = {name.lower(): (name, kind) for name, kind in ONLY_FOR.items()}
    for key in options:
        found = only.get(str(key).lower())
        if found is not None and found[1] != use:
            name, kind = found
            raise OptionError(
                f"Option {name!r} is for {USES[kind]} only: in {USES[use]} it would do "
                "nothing. Remove it (docs/reference/datasource.md says which option is for "
                "which use)."
            )


def _renamed(options: Mapping[str, str], new: str) -> str:
    """The name under which ``options`` gives option ``new``: ``new``, or its name of 0.9
    (:data:`RENAMED`), which still works and warns.

    Raises:
        OptionError: both names are given.
    """
    old = next(o for o, n in RENAMED.items() if n == new)
    if options.get(old) is None:
        return new
    if options.get(new) is not None:
        raise OptionError(f"Options {old!r} and {new!r} are one option: give {new!r} only.")
    text = (
        f"Option {old!r} of the redisq data source is deprecated and removed in the next "
        f"minor version: use {new!r} (a partition is a queue's; a slice is what one Spark "
        f"task reads)."
    )
    # Also logged: a data source is built in a Python worker that Spark starts, where a
    # DeprecationWarning is not shown, but its log reaches Spark's.
    warnings.warn(text, DeprecationWarning, stacklevel=3)
    logger.warning("redisq: %s", text)
    return old


def _flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = str(options.get(name, default)).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw == "":  # an unset template value must not turn a safety off
        raise OptionError(
            f"Option {name!r} is empty: give true or false (an empty value is refused, "
            "so that an unset variable in a job's template cannot change what it does)."
        )
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


def _name(kind: str, raw: str | None) -> str | None:
    if raw is None or not str(raw).strip():
        return None
    try:
        return validate_name(kind, str(raw).strip())
    except InvalidName as exc:
        raise OptionError(f"Option {kind!r}: {exc}") from None


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
    return tuple(dict.fromkeys(_name("queue", q) or q for q in names))


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
class StartingOffsets:
    """Option ``startingOffsets``, checked: where a new streaming query starts.

    Attributes:
        kind: ``earliest`` (everything still in Redis), ``latest`` (what comes next),
            ``time`` (entries from a time on, those still in Redis) or ``ids`` (after
            the id given per stream; streams not named start at the earliest).
        after: with ``time``, the last id before it.
        ids: with ``ids``, ``{"stream": "entry id"}``.
    """

    kind: str = "earliest"
    after: str | None = None
    ids: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, raw: str | None) -> StartingOffsets:
        """``earliest`` (default), ``latest``, an ISO 8601 time (naive: UTC) or a JSON
        object ``{"queue": "entry id"}``.

        Raises:
            OptionError: none of these.
        """
        text = str(raw or "earliest").strip()
        if text.lower() in ("earliest", "latest"):
            return cls(text.lower())
        if text.startswith("{"):
            try:
                given = json.loads(text)
            except ValueError:
                given = None
            if not isinstance(given, dict) or not all(
                isinstance(v, str) and _ENTRY_ID.match(v) for v in given.values()
            ):
                raise OptionError(
                    "Option 'startingOffsets' as JSON must map streams to entry ids, e.g. "
                    f'{{"orders": "1700000000000-0"}}; got {text[:100]!r}.'
                )
            return cls("ids", ids=tuple(sorted((str(k), v) for k, v in given.items())))
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise OptionError(
                "Option 'startingOffsets' must be earliest, latest, an ISO 8601 time or a "
                f"JSON object of entry ids; got {text[:100]!r}."
            ) from None
        when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        # Exclusive start: the last possible id of the millisecond before, so entries of
        # that very millisecond are read.
        return cls("time", after=last_id_of_ms(datetime_to_ms(when) - 1))


def stream_queue(stream: str) -> str:
    """The queue of an offset's stream name (``"q"``, ``"q#i"``, ``"q:consumer"``)."""
    return stream.partition(":")[0].partition("#")[0]


def refuse_unknown_streams(unknown: list[str], reads: str) -> None:
    """Refuse a ``startingOffsets`` that names streams the read does not read (``unknown``;
    nothing when empty): their ids would be ignored, silently.

    Args:
        unknown: the names given that the read does not read.
        reads: the streams the read reads, in words.

    Raises:
        OptionError: naming the unknown streams and the streams read.
    """
    if not unknown:
        return
    raise OptionError(
        f"Option 'startingOffsets' names {', '.join(map(repr, sorted(unknown)))}, which "
        f"this read does not read; it reads {reads}. Give entry ids of those only (a "
        "partitioned queue's by partition, 'orders#0'; dead letters by queue and consumer, "
        "'orders:billing'), or add the queue to option 'queue'."
    )


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
        slices_per_stream: time slices of each stream read (option ``slicesPerStream``):
            a batch read, or each micro-batch of a streaming read.
        starting_offsets: where a new streaming query starts (option ``startingOffsets``:
            ``earliest``, ``latest``, an ISO 8601 time or ``{"queue": "entry-id"}``).
        max_entries_per_trigger: streaming admission control: most entries a
            micro-batch reads, all streams together (None: no limit by entries).
        max_records_per_trigger: streaming admission control: most rows a micro-batch
            reads (an events entry holds a row per message; one entry holding more is
            read whole, alone in its batch); None: no limit by rows.
        max_entries_per_slice: a slice estimated to hold more entries than this is split
            further by entry count (option ``maxEntriesPerSlice``).
        retry_timeout: how long a transient Redis fault is waited out (seconds; 0: fail
            at once), counted from the outage's first failure.
        socket_timeout: socket and connect timeout of the Redis clients (seconds): how
            soon a stalled Redis is noticed (and retried).
        archive: a streaming read of messages or events is this named archive: it
            registers, holds retention and commits its position; None (the default):
            read-only, it writes nothing to Redis and retention does not wait for it.
            The name is one query's (its checkpoint's): another is refused.
        take_over: this query takes the archive's name over from the query that owns it
            (option ``takeOver``; that one stops at its next commit): for a query that
            replaces one whose checkpoint was lost or moved.
        fail_on_data_loss: a streaming read fails when entries after its position were
            removed before it read them (Kafka's ``failOnDataLoss``); false: it logs a
            warning, a named archive records the gap for its job, and it goes on.
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
    slices_per_stream: int = DEFAULT_SLICES_PER_STREAM
    starting_offsets: StartingOffsets = StartingOffsets()
    max_entries_per_trigger: int | None = None
    archive: str | None = None
    take_over: bool = False
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    max_entries_per_slice: int = DEFAULT_MAX_ENTRIES_PER_SLICE
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S
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
            OptionError: an unknown option, ``url`` missing, or an invalid value.
        """
        check_names(options)
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
        archive = _name("archive", options.get("archive"))
        if archive and table is Table.DEAD:
            raise OptionError(
                "Option 'archive' names an archive of messages or events; dead letters "
                "leave Redis for the database (the dead-letter sink), not for an archive."
            )
        take_over = _flag(options, "takeOver")
        if take_over and not archive:
            raise OptionError(
                "Option 'takeOver' takes a named archive over from the query that owns its "
                "name: give the name with option 'archive' too."
            )
        queues = _queues(options.get("queue"))
        start = StartingOffsets.parse(options.get("startingOffsets"))
        if queues:  # checked at load(); a queue's streams are known at the start only
            refuse_unknown_streams(
                [name for name, _ in start.ids if stream_queue(name) not in queues],
                f"queue(s) {', '.join(queues)} (option 'queue')",
            )
        return cls(
            url=url,
            prefix=str(options.get("prefix") or "redisq").strip(),
            cluster=_flag(options, "cluster"),
            queues=queues,
            table=table,
            slices_per_stream=_positive_int(
                options, _renamed(options, "slicesPerStream"), DEFAULT_SLICES_PER_STREAM
            )
            or 1,
            starting_offsets=start,
            max_entries_per_trigger=_positive_int(options, "maxEntriesPerTrigger", None),
            archive=archive,
            take_over=take_over,
            fail_on_data_loss=_flag(options, "failOnDataLoss", default=True),
            max_records_per_trigger=_positive_int(options, "maxRecordsPerTrigger", None),
            max_entries_per_slice=_positive_int(
                options, _renamed(options, "maxEntriesPerSlice"), DEFAULT_MAX_ENTRIES_PER_SLICE
            )
            or DEFAULT_MAX_ENTRIES_PER_SLICE,
            retry_timeout=_seconds(options, "retryTimeout", DEFAULT_RETRY_TIMEOUT_S, zero=True),
            socket_timeout=_seconds(options, "socketTimeout", DEFAULT_SOCKET_TIMEOUT_S, zero=False),
            consumer=_name("consumer", options.get("consumer")),
            once=_flag(options, "once"),
            write_batch=_positive_int(options, "batchSize", DEFAULT_WRITE_BATCH)
            or DEFAULT_WRITE_BATCH,
            page_size=_positive_int(options, "pageSize", DEFAULT_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
            since=_bound(options, "since", end=False),
            until=_bound(options, "until", end=True),
        )
