"""What a pipeline job is told: its options as one validated value, and the small parsers
shared by the CLI and ``manage.py redisq_pipeline``.

Nothing here imports PySpark or Django, so the CLI can reject bad arguments before a JVM
starts, and the management command can build the same options from ``settings.REDISQ``.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from redisq_django.core.archives import DEFAULT_ARCHIVE
from redisq_django.core.errors import InvalidName, RedisqError
from redisq_django.core.keys import validate_name
from redisq_django.pipeline.restarts import DEFAULT_RESTART_BUDGET_S, DEFAULT_RESTARTS

#: The tables of a queue that the archive keeps (data source option ``table``).
ARCHIVED_TABLES = ("messages", "events")

_URL_SCHEMES = ("redis", "rediss", "unix")


class OptionError(RedisqError, ValueError):
    """An option of a job or of the ``redisq`` data source is missing or invalid; the
    message names the option and the fix."""


class JobError(RedisqError, RuntimeError):
    """A job could not run to its end; the message says why and what to check."""


def __getattr__(name: str) -> Any:
    # The job options' error was OptionsError, the data source's OptionError: one class,
    # one name. The old one is kept one minor version, with a warning.
    if name == "OptionsError":
        warnings.warn(
            "redisq_django.pipeline.options.OptionsError is now OptionError (one error for "
            "the options of jobs and of the data source); the old name is removed in the "
            "next minor version.",
            DeprecationWarning,
            stacklevel=2,
        )
        return OptionError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveOptions:
    """The options of the ``archive`` job.

    Attributes:
        redis_url: where the queues are: ``redis://``, ``rediss://`` or ``unix://``.
        root: the archive's root directory or Hadoop URI (``file:``, ``hdfs:``, ``s3a:``...);
            the job writes ``ROOT/messages``, ``ROOT/events`` and ``ROOT/_checkpoints``.
        prefix: the key prefix of the queues (``REDISQ['PREFIX']``).
        queues: the queues to archive; empty means every queue in ``P:queues``.
        trigger_seconds: None archives what is there now and stops (``--once``); a number
            runs a micro-batch every that many seconds until stopped.
        cluster: the URL names a Redis Cluster node.
        max_entries_per_trigger: most entries one micro-batch of a table reads, all
            queues together (None: all there are).
        max_records_per_trigger: most rows one micro-batch of a table reads, all queues
            together (an events entry is a row per message; None: all there are).
        grace_seconds: on stop, how long a running micro-batch may take to finish before
            the query is interrupted (it is then simply redone by the next run).
        name: the archive's name: it registers under it per queue and stream, and
            retention waits for it (``REDISQ['ARCHIVE_NAME']``, default ``default``).
            The name is owned by this archive's checkpoint: a job with another
            checkpoint under it is refused.
        take_over: take the name over from the archive that owns it (its job stops at
            its next commit): for a job that replaces one whose checkpoint was lost.
        fail_on_data_loss: stop, naming them, when entries were removed before the
            archive stored them (a hard cap, a purge); false: go on and record them in
            ``ROOT/_gaps`` for the report.
        restarts: how many times in a row a query that failed for a reason outside the
            data (a Python worker killed or too slow to start, a task Spark lost) is
            started again from its checkpoint before the job fails (0: never), after a
            pause of 5, 10, 20, 40, then 60 s (:mod:`~redisq_django.pipeline.restarts`).
        restart_budget_seconds: how long a query's restarts in a row may go on, from the
            failure that began them: no restart whose pause would end later.
        extra: more ``redisq`` data source options for both tables (e.g.
            ``slicesPerStream``).
    """

    redis_url: str
    root: str
    prefix: str = "redisq"
    queues: tuple[str, ...] = ()
    trigger_seconds: float | None = None
    cluster: bool = False
    max_entries_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    grace_seconds: float = 30.0
    name: str = DEFAULT_ARCHIVE
    take_over: bool = False
    fail_on_data_loss: bool = True
    restarts: int = DEFAULT_RESTARTS
    restart_budget_seconds: float = DEFAULT_RESTART_BUDGET_S
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if urlsplit(self.redis_url).scheme not in _URL_SCHEMES:
            problems.append(
                "the Redis URL must start with redis://, rediss:// or unix://, "
                f"got {redact_url(self.redis_url)!r}"
            )
        if not self.root:
            problems.append("the archive root is empty; give a directory or a Hadoop URI")
        if not self.prefix or any(c in self.prefix for c in "{} "):
            problems.append(f"prefix {self.prefix!r} must be non-empty, without braces or spaces")
        for kind, value in (*(("queue", q) for q in self.queues), ("archive", self.name)):
            try:
                validate_name(kind, value)
            except InvalidName as exc:
                problems.append(str(exc).rstrip("."))
        if self.trigger_seconds is not None and not self.trigger_seconds > 0:
            problems.append(f"the trigger interval must be > 0 seconds, got {self.trigger_seconds}")
        if self.max_entries_per_trigger is not None and self.max_entries_per_trigger < 1:
            problems.append("max entries per trigger must be at least 1")
        if self.max_records_per_trigger is not None and self.max_records_per_trigger < 1:
            problems.append("max records per trigger must be at least 1")
        if self.restarts < 0:
            problems.append(f"restarts must be 0 or more, got {self.restarts}")
        if not self.restart_budget_seconds > 0:
            problems.append(
                f"the restart budget must be > 0 seconds, got {self.restart_budget_seconds}"
            )
        if problems:
            raise OptionError("; ".join(problems))

    @property
    def once(self) -> bool:
        """Whether the job archives what is there now and stops."""
        return self.trigger_seconds is None

    def table_path(self, table: str) -> str:
        """Where ``table``'s Parquet files go: ``ROOT/<table>``."""
        return join_path(self.root, table)

    def checkpoint_path(self, table: str) -> str:
        """The Structured Streaming checkpoint of ``table``'s query."""
        return join_path(self.root, "_checkpoints", table)

    @property
    def gaps_path(self) -> str:
        """Where the job records data losses it went past: ``ROOT/_gaps`` (JSON lines)."""
        return join_path(self.root, "_gaps")

    def source_options(self, table: str) -> dict[str, str]:
        """The ``redisq`` data source options that read ``table`` as this archive."""
        out = {
            "url": self.redis_url,
            "prefix": self.prefix,
            "table": table,
            "archive": self.name,
            "failOnDataLoss": "true" if self.fail_on_data_loss else "false",
        }
        if self.take_over:
            out["takeOver"] = "true"
        if self.queues:
            out["queue"] = ",".join(self.queues)
        if self.cluster:
            out["cluster"] = "true"
        if self.max_entries_per_trigger is not None:
            out["maxEntriesPerTrigger"] = str(self.max_entries_per_trigger)
        if self.max_records_per_trigger is not None:
            out["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        out.update(self.extra)
        return out


def normalize_root(root: str) -> str:
    """An absolute local path for a plain path; a URI (``scheme:...``) unchanged.

    Spark resolves a relative path against its default file system and working directory,
    which may differ from the caller's; an absolute path means what the user meant.
    """
    if not root:
        return root
    if len(urlsplit(root).scheme) > 1:  # a URI ("C:" would be a Windows drive)
        return root.rstrip("/") or root
    return os.path.abspath(os.path.expanduser(root))


def join_path(root: str, *parts: str) -> str:
    """``root/part/...`` for paths and URIs alike (URIs always use ``/``)."""
    return "/".join([root.rstrip("/"), *parts])


def conf_argument(text: str) -> str:
    """An ``argparse`` type: ``KEY=VALUE`` for ``--conf`` (checked here, parsed later by
    :func:`parse_conf`)."""
    import argparse

    try:
        parse_conf([text])
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parse_conf(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` from ``--conf`` into a dict (a later key wins).

    Raises:
        OptionError: an item has no ``=`` or an empty key.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(
                f"--conf expects KEY=VALUE (e.g. spark.executor.memory=2g), got {item!r}"
            )
        out[key.strip()] = value
    return out


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages and banners."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def url_from_connection_kwargs(kwargs: Mapping[str, Any], *, ssl: bool = False) -> str:
    """A Redis URL for a redis-py connection pool's ``connection_kwargs``.

    Executors get a URL, never a client; this describes the client Django already uses
    (django-redis) as ``redis[s]://[user:password@]host:port/db`` or
    ``unix://[user:password@]/path?db=N``.
    """
    user = str(kwargs.get("username") or "")
    password = str(kwargs.get("password") or "")
    auth = ""
    if user or password:
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    db = int(kwargs.get("db") or 0)
    path = kwargs.get("path")
    if path:
        return f"unix://{auth}{path}?db={db}"
    host = str(kwargs.get("host") or "localhost")
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = int(kwargs.get("port") or 6379)
    return f"{'rediss' if ssl else 'redis'}://{auth}{host}:{port}/{db}"


def one_line(exc: BaseException) -> str:
    """An exception's message as one line, for users.

    Spark's messages run to pages; when they carry a Python traceback (an error raised in
    a Python worker, e.g. by the data source), the line that says what went wrong is the
    traceback's last, so the result is Spark's summary and that line, e.g.
    ``[PYTHON_..._ERROR] Failed when ... initialOffset: OptionError: startingOffsets ...``;
    for a Java exception (py4j) it is the exception's own line.
    """
    lines = [line for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0].strip()
    if first.startswith(_PY4J_CALL) and len(lines) > 1:
        # A Java exception through py4j: "An error occurred while calling o87.start."
        # then ": java.io.IOException: Mkdirs failed to create ...".
        return _MODULE_PATH.sub("", lines[1].strip().lstrip(": "))
    if not any(_TRACEBACK in line for line in lines):
        return first
    error = None
    in_traceback = False
    for line in lines:
        if _TRACEBACK in line:
            in_traceback = True
        elif in_traceback and not line[0].isspace():
            in_traceback = False
            if not line.startswith(("During handling", "The above exception")):
                error = _MODULE_PATH.sub("", line.strip())
    head = first.split(_TRACEBACK)[0].strip().rstrip(":")
    if error is None:
        return head or first
    return f"{head}: {error}" if head else error


_TRACEBACK = "Traceback (most recent call last):"
_PY4J_CALL = "An error occurred while calling"
#: "package.module.SomeError: text" -> "SomeError: text".
_MODULE_PATH = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*(?::|$))")
