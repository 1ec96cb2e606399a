"""The options of the ``replay`` and ``compact`` jobs, and the time bounds they share.

Like :mod:`~redisq_django.pipeline.options`, nothing here imports PySpark or Django, so
the CLI rejects bad arguments before a JVM starts and ``manage.py redisq_pipeline``
builds the same values from ``settings.REDISQ``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass
from urllib.parse import urlsplit

from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.pipeline.options import OptionError, join_path, redact_url

#: Default size of a compacted Parquet file, bytes (Spark's and HDFS's usual block size).
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
#: Rows shown by ``replay --dry-run``.
DRY_RUN_SAMPLE = 5


def parse_time(text: str, option: str, *, end: bool = False) -> dt.datetime:
    """An ISO date or time (naive means UTC) as an aware UTC datetime.

    A date alone is the start of that UTC day, or with ``end`` the start of the next
    (``--until 2026-11-01`` includes that day, as in the ``report`` job).

    Raises:
        OptionError: ``text`` is neither.
    """
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise OptionError(
            f"{option} expects an ISO date or time (2026-11-01 or 2026-11-01T12:00:00Z), "
            f"got {text!r}"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    if end and len(text.strip()) == len("2026-11-01"):
        value += dt.timedelta(days=1)
    return value.astimezone(dt.UTC)


def _check_range(since: dt.datetime | None, until: dt.datetime | None) -> list[str]:
    if since is not None and until is not None and not since < until:
        return [f"--since ({since.isoformat()}) must be before --until ({until.isoformat()})"]
    return []


def _check_common(redis_url: str | None, root: str, prefix: str) -> list[str]:
    problems = []
    if redis_url is not None and urlsplit(redis_url).scheme not in ("redis", "rediss", "unix"):
        problems.append(
            "the Redis URL must start with redis://, rediss:// or unix://, "
            f"got {redact_url(redis_url)!r}"
        )
    if not root:
        problems.append("the archive root is empty; give a directory or a Hadoop URI")
    if not prefix or any(c in prefix for c in "{} "):
        problems.append(f"prefix {prefix!r} must be non-empty, without braces or spaces")
    return problems


def _check_name(kind: str, name: str | None) -> list[str]:
    if name is None:
        return []
    try:
        validate_name(kind, name)
    except InvalidName as exc:
        return [str(exc).rstrip(".")]
    return []


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """The options of the ``replay`` job.

    Attributes:
        redis_url: where to publish (``redis://``, ``rediss://``, ``unix://``).
        root: the archive root (reads ``ROOT/messages``).
        queue: the queue whose archived messages are replayed, and the target queue.
        prefix: the key prefix of the queues.
        cluster: the URL names a Redis Cluster node.
        since: first ``published_at`` replayed (inclusive); None: from the beginning.
        until: end of the range (exclusive; the CLI turns a date alone into the end of
            that day); None: up to the end of the archive.
        where: a Spark SQL predicate over the messages table's columns.
        consumer: deliver to this logical consumer only; None: to the queue (everyone).
        ordered: one global publish order (one task: slower).
        dry_run: count and show a sample, publish nothing.
        rate: most messages per second, all tasks together; None: as fast as possible.
        once: derive each replayed message's id from the run's key and its original id
            and publish it at most once per id, so re-running the same replay is a no-op
            (within the day Redis remembers an id).
        batch_size: messages per publish round trip.
    """

    redis_url: str
    root: str
    queue: str
    prefix: str = "redisq"
    cluster: bool = False
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    where: str | None = None
    consumer: str | None = None
    ordered: bool = False
    dry_run: bool = False
    rate: float | None = None
    once: bool = False
    batch_size: int = 500

    def __post_init__(self) -> None:
        problems = _check_common(self.redis_url, self.root, self.prefix)
        problems += _check_name("queue", self.queue)
        problems += _check_name("consumer", self.consumer)
        problems += _check_range(self.since, self.until)
        if self.where is not None and not self.where.strip():
            problems.append("--where is empty; give a Spark SQL predicate or leave it out")
        if self.rate is not None and not self.rate > 0:
            problems.append(f"--rate must be > 0 messages/s, got {self.rate}")
        if self.batch_size < 1:
            problems.append("the batch size must be at least 1")
        if problems:
            raise OptionError("; ".join(problems))

    @property
    def messages_path(self) -> str:
        """``ROOT/messages``."""
        return join_path(self.root, "messages")

    def run_key(self) -> str:
        """What identifies this replay for ``--once``: the same selection sent to the
        same target gives the same key, so the same replay ids."""
        return "|".join(
            [
                self.queue,
                self.consumer or "",
                self.where or "",
                self.since.isoformat() if self.since else "",
                self.until.isoformat() if self.until else "",
            ]
        )

    def replay_id(self, message_id: str) -> str:
        """The id a replayed message gets with ``--once`` (32 hex digits), the same as
        the SQL expression the job uses (:func:`~redisq_django.pipeline.replay.replay`)."""
        return hashlib.sha256(f"{self.run_key()}|{message_id}".encode()).hexdigest()[:32]

    def describe(self) -> str:
        """One line saying what the run will do (never the Redis password)."""
        target = f"consumer {self.consumer!r} of " if self.consumer else ""
        parts = [f"replaying {self.queue!r} from {self.root} to {target}queue {self.queue!r}"]
        parts.append(f"at {redact_url(self.redis_url)}")
        if self.since or self.until:
            since = self.since.isoformat() if self.since else "the beginning"
            until = self.until.isoformat() if self.until else "the end"
            parts.append(f"published from {since} until {until}")
        if self.where:
            parts.append(f"where {self.where}")
        flags = [
            name
            for name, on in (
                ("ordered", self.ordered),
                ("once", self.once),
                ("dry run", self.dry_run),
            )
            if on
        ]
        if self.rate:
            flags.append(f"at most {self.rate:g}/s")
        if flags:
            parts.append("(" + ", ".join(flags) + ")")
        return " ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactOptions:
    """The options of the ``compact`` job.

    Attributes:
        root: the archive root (compacts ``ROOT/messages`` and ``ROOT/events``).
        since: first date compacted (inclusive); None: the oldest.
        until: last date compacted (inclusive); None, today and later mean yesterday
            (UTC): the archive may still be writing today's directories.
        target_file_bytes: the size a compacted file aims at.
        today: the UTC date taken as today (tests; None: the clock).
    """

    root: str
    since: dt.date | None = None
    until: dt.date | None = None
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    today: dt.date | None = None

    def __post_init__(self) -> None:
        problems = _check_common(None, self.root, "redisq")
        if self.since is not None and self.until is not None and self.since > self.until:
            problems.append(f"--since ({self.since}) must not be after --until ({self.until})")
        if self.target_file_bytes < 1024 * 1024:
            problems.append("the target file size must be at least 1 MB")
        if problems:
            raise OptionError("; ".join(problems))

    def end_date(self) -> dt.date:
        """The first date not compacted: the day after ``until``, never later than
        today (UTC)."""
        today = self.today or dt.datetime.now(dt.UTC).date()
        return min(self.until + dt.timedelta(days=1), today) if self.until else today
