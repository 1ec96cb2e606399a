"""The exceptions redisq raises; every message says what happened and what to do."""

from __future__ import annotations

import datetime as dt
import functools
import re
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import redis

P = ParamSpec("P")
R = TypeVar("R")


class RedisqError(Exception):
    """Base class of every error raised by redisq."""


class PublishError(RedisqError):
    """A message could not be published."""


class PayloadTooLarge(PublishError):
    """The encoded payload is bigger than the configured limit."""

    def __init__(self, queue: str, size: int, limit: int, *, headers: int = 0) -> None:
        self.queue = queue
        self.size = size
        self.limit = limit
        what = f"Payload and headers ({headers} bytes of headers)" if headers else "Payload"
        super().__init__(
            f"{what} for queue {queue!r} is {size} bytes once encoded as JSON, over the "
            f"limit of {limit} bytes. Publish a reference (a primary key, a storage path) "
            f"instead of the data, or raise REDISQ['MAX_PAYLOAD_BYTES']."
        )


class PayloadNotSerializable(PublishError):
    """The payload or headers contain a value JSON cannot represent."""

    def __init__(self, queue: str, what: str, type_name: str) -> None:
        self.queue = queue
        self.type_name = type_name
        super().__init__(
            f"The {what} for queue {queue!r} is not JSON-serialisable: it contains an object "
            f"of type {type_name!r}. Convert it to str, int, float, bool, None, list or dict "
            f"(datetime, date, time, timedelta, Decimal and UUID are converted for you)."
        )


class InvalidKey(PublishError, ValueError):
    """An ordering key is not allowed: not a str, empty, or over its byte limit."""


class NotRedrivable(RedisqError, ValueError):
    """A dead letter cannot be delivered again: it is undecodable or has no payload."""


class InvalidName(RedisqError, ValueError):
    """A queue or consumer name is not allowed."""


class ConfigurationError(RedisqError):
    """The redisq configuration is invalid (also raised as ImproperlyConfigured by Django)."""


class PartitionsMismatch(ConfigurationError):
    """The number of partitions recorded in Redis for a queue is not this process's."""

    def __init__(
        self, queue: str, recorded: int, configured: int, *, where: str | None = None
    ) -> None:
        self.queue = queue
        self.recorded = recorded
        self.configured = configured
        self.where = where
        said = f"{recorded} partition(s) in Redis" if recorded else "no number of partitions"
        if where is not None:  # one partition's own record disagrees with the queue's
            said = f"{said} in {where}"
        super().__init__(
            f"Queue {queue!r} has {said}, but this process is configured with "
            f"{configured} (REDISQ['PARTITIONS']; absent means 1). Give every process the "
            f"number Redis records, or change it: drain the queue, run 'manage.py redisq "
            f"partitions {queue} {configured}', then restart every process with the new "
            f"setting. Nothing was sent."
        )


class LayoutRefused(ConfigurationError):
    """A script refused to add a message to a queue (or create a group there) because the
    number of partitions the caller routes by is not the one recorded where it writes
    (``REDISQ_LAYOUT``, PROTOCOL.md "Partitions: the layout every write checks"), or a
    record it read is not a valid number. Our own callers read the record again and try
    once more; what they cannot mend reaches the user as this error or as
    :class:`PartitionsMismatch`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"Redis refused to add to a queue: {cause}. The number of partitions this "
            f"process routes by is not the one Redis records there: give every process "
            f"the number 'manage.py redisq partitions QUEUE' shows, and restart it."
        )


class PartitionedQueueError(RedisqError, ValueError):
    """An operation that cannot act on a partitioned queue (e.g. a reset to a message id:
    ids are not comparable across partitions)."""


class ConsumerNotFound(RedisqError):
    """A logical consumer (consumer group) does not exist on the queue."""

    def __init__(self, queue: str, consumer: str) -> None:
        self.queue = queue
        self.consumer = consumer
        super().__init__(
            f"Logical consumer {consumer!r} is not registered on queue {queue!r}. Register "
            f"it first (Broker.ensure_consumer or a @consumer declaration) and try again."
        )

    @property
    def group(self) -> str:
        """Deprecated (gone in the next minor version): the logical consumer, :attr:`consumer`."""
        warnings.warn(
            "ConsumerNotFound.group is deprecated, use ConsumerNotFound.consumer",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.consumer


class ProtocolMismatch(RedisqError):
    """A redisq script refused a call made for another protocol version."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"Redis refused a script call: {cause}. The caller and the script speak different "
            f'redisq protocol versions (PROTOCOL.md, "Versions and upgrades"): run every '
            f"client with the scripts shipped with the redisq version it implements."
        )


class CorruptState(RedisqError):
    """A script refused a value in Redis that redisq's scripts did not write (another
    client's): its reply names the key (PROTOCOL.md, "What the scripts check")."""

    def __init__(self, cause: BaseException) -> None:
        text = str(cause)
        found = _CORRUPT_KEY.search(text)
        #: The key that holds what redisq did not write (None if the reply names none).
        self.key: str | None = found.group(1) if found else None
        detail = text[found.start() :] if found else text
        super().__init__(f"A redisq script refused a value it did not write: {detail}")


class ArchiveNotRegistered(RedisqError):
    """A named archive is not registered on a queue (never, or removed since)."""

    def __init__(self, queue: str, name: str, table: str) -> None:
        self.queue = queue
        self.name = name
        self.table = table
        super().__init__(
            f"Archive {name!r} is not registered for the {table} of queue {queue!r}: it was "
            f"removed (manage.py redisq archives remove) or never started. Start it again to "
            f"register it anew (it goes on from its checkpoint)."
        )


class ArchiveOwned(RedisqError):
    """A named archive belongs to another reader (another checkpoint): registering or
    committing under its name is refused, so that two readers never move one position
    (retention would then delete what one of them never stored).

    Attributes:
        queue: the queue (``"q#i"`` for a partition of a partitioned one).
        name: the archive.
        table: ``messages`` or ``events``.
        since_ms: when the owner claimed the name (Redis's clock, ms; 0: unknown).
        committed_ms: the owner's last commit (ms); None when refused at a commit.
        owner: the first characters of the owner's token (to tell two refusals apart).
        fenced: refused at a commit: this reader owned the name and lost it (taken over).
    """

    def __init__(
        self,
        queue: str,
        name: str,
        table: str,
        *,
        since_ms: int,
        committed_ms: int | None,
        owner: str,
        fenced: bool,
    ) -> None:
        self.queue, self.name, self.table = queue, name, table
        self.since_ms, self.committed_ms, self.owner = since_ms, committed_ms, owner
        self.fenced = fenced
        what = f"archive {name!r} of the {table} of queue {queue!r}"
        since = _utc(since_ms)
        if fenced:
            text = (
                f"The {what} was taken over by another reader (owner {owner}…) at {since}: "
                "this one no longer owns the name, so it stops before moving a position that "
                "is not its own (what it stored stays stored). If this reader is the one that "
                "should archive under this name, start it once with take-over (option "
                "takeOver=true, --take-over); if not, remove it or give it a name of its own."
            )
        else:
            text = (
                f"The {what} belongs to another reader with another checkpoint (owner "
                f"{owner}…, since {since}; its last commit at {_utc(committed_ms or 0)}). Two "
                "readers under one name would let retention delete what one of them never "
                "stored. A second archive needs a name of its own (option archive, --name). "
                "If this reader replaces that one (its checkpoint was lost or moved), start "
                "it once with take-over (option takeOver=true, --take-over): the other one "
                "then stops at its next commit."
            )
        super().__init__(text)


def _utc(ms: int) -> str:
    """``ms`` (Unix time) as a UTC time to the second, for messages."""
    if ms <= 0:
        return "an unknown time"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class RedisUnavailable(RedisqError):
    """Redis could not be reached."""

    def __init__(self, address: str, cause: BaseException) -> None:
        self.address = address
        super().__init__(
            f"Cannot reach Redis at {address}: {str(cause).rstrip('.')}. Check that the "
            f"server is running and that REDISQ['URL'] or REDISQ['CONNECTION'] points at it."
        )


class RedisRefused(RedisUnavailable):
    """Redis is reachable but refuses commands for now (full, read-only, loading...).

    A :class:`RedisUnavailable`, so code that handles outages handles refusals too.
    ``condition`` names it: ``"oom"``, ``"readonly"``, ``"loading"``, ``"masterdown"``,
    ``"clusterdown"``, ``"busy"`` or ``"noreplicas"`` (see :data:`REFUSALS`). A refused
    command was not executed, so sending again later is safe.
    """

    def __init__(self, address: str, condition: str, cause: BaseException) -> None:
        self.address = address
        self.condition = condition
        what, todo = REFUSALS[condition]
        RedisqError.__init__(
            self,
            f"Redis at {address} refused the command: {what} ({str(cause).rstrip('.')}). {todo}",
        )


#: The conditions of :class:`RedisRefused`, named after Redis's error code (lower case,
#: see :func:`error_code`): what happened, and what to do.
REFUSALS: dict[str, tuple[str, str]] = {
    "oom": (
        "it is out of memory (maxmemory reached with maxmemory-policy noeviction)",
        "Let consumers drain their queues, shorten the replay window or raise maxmemory, "
        "then retry.",
    ),
    "readonly": (
        "it is a read-only replica (a failover may be under way)",
        "Point REDISQ at the current master, or retry once the failover is over.",
    ),
    "loading": (
        "it is loading its data set after a restart",
        "Retry in a few seconds.",
    ),
    "masterdown": (
        "it is a replica that lost the link to its master",
        "Retry once the master is back, or point REDISQ at the current master.",
    ),
    "clusterdown": (
        "the Redis Cluster does not serve this slot (cluster down or resharding)",
        "Retry once every slot is served again (CLUSTER INFO: cluster_state:ok).",
    ),
    "busy": (
        "it is busy running a long script or function",
        "Retry later; SCRIPT KILL (or FUNCTION KILL) stops a script that never ends.",
    ),
    "noreplicas": (
        "fewer replicas than min-replicas-to-write are connected",
        "Retry once the replicas are back, or lower min-replicas-to-write.",
    ),
}


#: The error codes of Redis and Valkey: the first word of an error reply. ``ERR`` (the
#: generic code, which redis-py strips) is not among them: such an error has no code.
ERROR_CODES = frozenset(
    {
        "ASK",
        "BUSY",
        "BUSYGROUP",
        "BUSYKEY",
        "CLUSTERDOWN",
        "CROSSSLOT",
        "EXECABORT",
        "LOADING",
        "MASTERDOWN",
        "MISCONF",
        "MOVED",
        "NOAUTH",
        "NOGROUP",
        "NOPERM",
        "NOPROTO",
        "NOREPLICAS",
        "NOSCRIPT",
        "NOTBUSY",
        "OOM",
        "READONLY",
        "TRYAGAIN",
        "UNBLOCKED",
        "UNKILLABLE",
        "WRONGPASS",
        "WRONGTYPE",
    }
)
#: The error codes of our own scripts (core/scripts/*.lua), read in the same way.
REDISQ_ERROR_CODES = frozenset(
    {
        "FENCED",  # archive_commit.lua: another reader owns the archive's name now
        "NOARCHIVE",  # archive_commit.lua: the named archive is not registered
        "OWNED",  # archive_register.lua: another reader owns the archive's name
        "REDISQ_CORRUPT",  # a value the scripts read but no script wrote (CorruptState)
        "REDISQ_GROUPS",  # purge.lua: the log's consumers changed while they were listed
        "REDISQ_LAYOUT",  # writers, partitions.lua: another number of partitions recorded
        "REDISQ_PROTOCOL",  # every script: the caller speaks another protocol version
    }
)

# redis-py strips the code from the replies it raises as exceptions of their own ("OOM
# command not allowed..." arrives as OutOfMemoryError("command not allowed...")). A
# subclass comes before its base class.
_CODE_OF_CLASS: tuple[tuple[type[BaseException], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.NoScriptError, "NOSCRIPT"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.ExecAbortError, "EXECABORT"),
    (redis.exceptions.NoPermissionError, "NOPERM"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.MovedError, "MOVED"),
    (redis.exceptions.AskError, "ASK"),
    (redis.exceptions.ClusterCrossSlotError, "CROSSSLOT"),
)

# What may stand before the code in an error's text, each a prefix of the rest (they
# nest): redis-py's note on a pipeline's failed command (the async client's quotes the
# args tuple), Redis 6.2's wrapping of an error raised inside a script, and the Lua 5.1
# positions before it ("@user_script:12: ", "@user_script: 1: -", "=[C]: -1: -", the
# last when a script's pcall hands the error on). Redis 7 and Valkey keep the code first
# ("NOGROUP ... script: <sha>, on @user_script:12."). tests/core/test_error_codes.py
# holds the texts each server answers.
_BEFORE_CODE = re.compile(
    r"Command # \d+ \(.{0,100}?\) of pipeline caused error: (?:\(['\"])?"
    r"|(?:ERR )?Error running script \(call to f_[0-9a-f]+\): "
    r"|(?:@user_script|=\[C\]): ?-?\d+: -?",
    re.DOTALL,
)
_WORD = re.compile(r"[A-Z][A-Z_]*(?= |$)")
# A REDISQ_CORRUPT reply: "REDISQ_CORRUPT key <key> [field <field>] holds ..." (the key
# has no space but a waiting list's, whose ordering key may: it ends at " holds ").
_CORRUPT_KEY = re.compile(r"REDISQ_CORRUPT key (.{1,600}?) (?:field .{0,600}? )?holds ", re.DOTALL)


def error_code(exc: BaseException) -> str | None:
    """The Redis error code of a redis-py error (one of :data:`ERROR_CODES` or
    :data:`REDISQ_ERROR_CODES`), or None.

    Found wherever it stands: first in a plain reply (``NOGROUP No such key...``) and in
    a script's error on Redis 7 and Valkey, after the script's wrapping on Redis 6.2
    (``Error running script (call to f_<sha>): @user_script:12: NOGROUP ...``), after a
    pipeline's note, and in the exception class when redis-py stripped it from the text.
    """
    for cls, code in _CODE_OF_CLASS:
        if isinstance(exc, cls):
            return code
    if not isinstance(exc, redis.ResponseError):
        return None
    text = str(exc)
    start = 0
    for _ in range(8):  # the prefixes nest a few deep at most
        prefix = _BEFORE_CODE.match(text, start)
        if prefix is None:
            break
        start = prefix.end()
    word = _WORD.match(text, start)
    if word is None:
        return None
    code = word.group()
    return code if code in ERROR_CODES or code in REDISQ_ERROR_CODES else None


def refusal_condition(exc: BaseException) -> str | None:
    """The :data:`REFUSALS` condition of a redis-py error, or None when it is not one."""
    code = error_code(exc)
    condition = code.lower() if code is not None else None
    return condition if condition in REFUSALS else None


def is_nogroup(exc: BaseException) -> bool:
    """Whether Redis refused a command (or a script's) because the consumer group does
    not exist (NOGROUP), on any server."""
    return error_code(exc) == "NOGROUP"


def _is_protocol_mismatch(exc: BaseException) -> bool:
    # The error code every script (core/scripts/*.lua) starts such a refusal with.
    return error_code(exc) == "REDISQ_PROTOCOL"


def describe_client(client: object) -> str:
    """``host:port/db`` of a redis-py client (a Sentinel service's name), never its
    password."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kw = pool.connection_kwargs
        service = getattr(pool, "service_name", None)
        if service is not None:  # the master (or a replica) of a Sentinel service
            return f"Sentinel service {service}/{kw.get('db', 0)}"
        if "path" in kw:
            return f"unix:{kw['path']}"
        return f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    nodes = getattr(client, "get_nodes", None)
    if nodes is not None:  # RedisCluster
        return "cluster " + ",".join(n.name for n in nodes())
    return type(client).__name__


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Turn redis-py errors of a method whose object has a ``client`` into ours:
    refusals into :class:`RedisRefused`, connection failures into
    :class:`RedisUnavailable`, NOGROUP into :class:`ConsumerNotFound` when the object
    has a ``queue`` and a ``consumer`` (a subscription), a script's refusal of another
    protocol version into :class:`ProtocolMismatch`, and its refusal of a value it did
    not write into :class:`CorruptState`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            ours = translated(exc, args[0])
            if ours is exc:
                raise
            raise ours from exc

    return wrapper


def translated(exc: redis.RedisError, owner: object) -> BaseException:
    """Our error for redis-py error ``exc`` of a call by ``owner`` (an object with a
    ``client``; see :func:`translate_errors`), or ``exc`` itself when none fits."""
    client = getattr(owner, "client", None)
    condition = refusal_condition(exc)
    if condition is not None:
        return RedisRefused(describe_client(client), condition, exc)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return RedisUnavailable(describe_client(client), exc)
    queue, consumer = getattr(owner, "queue", None), getattr(owner, "consumer", None)
    if is_nogroup(exc) and isinstance(queue, str) and isinstance(consumer, str):
        return ConsumerNotFound(queue, consumer)
    if _is_protocol_mismatch(exc):
        return ProtocolMismatch(exc)
    if error_code(exc) == "REDISQ_LAYOUT":
        return LayoutRefused(exc)
    if error_code(exc) == "REDISQ_CORRUPT":
        return CorruptState(exc)
    return exc
