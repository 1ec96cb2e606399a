"""The Redis key schema; the only place key names are built.

Every key of queue ``q`` carries the hash tag ``{q}`` so that all keys a script
touches live in one Redis Cluster slot. With the default prefix ``redisq``:

================================  ======  ====================================================
key                               type    role
================================  ======  ====================================================
``redisq:queues``                 set     names of every queue ever published to or consumed
``redisq:{q}:log``                stream  the topic log; each logical consumer is a group on it
``redisq:{q}:delayed``            zset    delayed publishes; score = due time (ms)
``redisq:{q}:meta``               hash    queue counters (``dropped``), marks of what retention
                                          removed (``last_trimmed``), the number of
                                          partitions (``partitions``, when recorded)
``redisq:{q}:events``             stream  lifecycle events of every consumer (history on)
``redisq:{q}:archives``           hash    named archives: positions, registration, gaps
``redisq:{q}:archive:<a>:gaps``   list    data losses archive ``a`` went past, unreported
``redisq:{q}:sent:<id>``          string  marks message ``id`` published by the outbox relay
``redisq:{q}:batch:<id>``         string  marks batch ``id`` published after a commit
``redisq:{q}:result:<id>``        hash    a Django task's result (task queues only; TTL)
``redisq:{q}:results``            zset    result ids of the queue; score = their expiry (ms)
``redisq:{q}:trend:<minute>``     hash    counters and samples of one minute (48 h, trends)
``redisq:{q}:g:<g>:direct``       stream  input private to consumer ``g``: retries, re-drives
``redisq:{q}:g:<g>:retry``        zset    retries of ``g`` waiting for their backoff; score = due
``redisq:{q}:g:<g>:dead``         stream  dead letters of ``g``, awaiting the database sink
``redisq:{q}:g:<g>:instances``    zset    live instances of ``g``; score = heartbeat expiry (ms)
``redisq:{q}:g:<g>:running``      hash    instance -> message it started last (``log:<id>``)
``redisq:{q}:g:<g>:leases``       zset    started deliveries with a lease of their own
                                          (``log:<id>``); score = when it ends (ms)
``redisq:{q}:g:<g>:sent:<id>``    string  marks message ``id`` delivered once to ``g`` only
``redisq:{q}:g:<g>:holders``      hash    ordered ``g``: ordering key -> the message holding it
``redisq:{q}:g:<g>:waiting:<k>``  list    ordered ``g``: later messages of key ``k``, in order
``redisq:{q}:g:<g>:held_back``    string  ordered ``g``: how many messages all those lists hold
``redisq:{q}:g:<g>:ended``        hash    log entries ``g`` has not read yet that an operator
                                          ended: entry id -> what to do (JSON) when read
``redisq:{q}:g:<g>:instance:<i>`` string  instance ``i``'s host, pid, start, counts (JSON)
``redisq:{q}:g:<g>:rate``         string  ``g``'s rate limit: when its bucket is full (µs)
``redisq:{q}:g:<g>:rate:<k>``     string  ``g``'s rate limit for ordering key ``k`` (as ``rate``)
``redisq:{q}:g:<g>:slots``        zset    ``g``'s concurrency slots in use; score = lease end
``redisq:trends:sampler``         string  the worker sampling every queue's backlog (a lease)
``redisq:schedules:claimed``      zset    schedule name -> latest tick claimed (ms)
``redisq:schedules:sent``         zset    schedule name -> latest tick published (ms)
================================  ======  ====================================================

A partitioned queue (``PARTITIONS``) is K full queues of this layout, partition ``i``
under the hash tag ``{q#i}`` (:meth:`QueueKeys.partition`); its ``{q}:meta`` records K.

PROTOCOL.md documents the same catalogue for clients in other languages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from redisq_django.core.errors import InvalidName

#: Queue and consumer names: letters, digits, ``_ . -``; no ``{}`` or ``:`` (they would
#: break the hash tag or the key layout).
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}\Z")  # \Z: "$" would allow a final "\n"


def validate_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a valid queue or consumer name.

    Raises:
        InvalidName: the name is empty, too long or has a forbidden character.
    """
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidName(
            f"Invalid {kind} name {name!r}: use 1-100 letters, digits, '_', '.' or '-'."
        )
    return name


def readable_names(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """``names`` split into the valid ones and the others, each list in the given order.

    A registry such as ``redisq:queues`` is a set any Redis client may add to: a member
    that is no valid name (``x y``, ``{q}``, bytes that are not UTF-8) must cost only its
    own line of a listing, never the listing. Callers show or log the others.
    """
    valid: list[str] = []
    invalid: list[str] = []
    for name in names:
        (valid if isinstance(name, str) and NAME_RE.match(name) else invalid).append(name)
    return valid, invalid


@dataclass(frozen=True)
class QueueKeys:
    """Keys of one queue, or of one partition of a partitioned queue.

    Attributes:
        prefix: the first part of every key.
        queue: the queue's name (also a partition's: messages read there belong to it).
        part: None for the queue's base keys (hash tag ``{q}``); the index of a
            partition (hash tag ``{q#i}``, :meth:`partition`).
        of: the number of partitions K a partition's keys were built for (None: the
            base keys, or keys only read). A write into a partition's layout says it
            (:meth:`layout`), and the script refuses it unless the partition records
            the same K (PROTOCOL.md, "Partitions").
        tag: ``<prefix>:{q}`` or ``<prefix>:{q#i}``, what every key starts with.
    """

    prefix: str
    queue: str
    part: int | None = None
    of: int | None = field(default=None, compare=False)
    # Built once: every key of every publish and read starts with it.
    tag: str = field(init=False, repr=False, compare=False)
    # Its consumers' keys, each built (and its name checked) once: a task's start and
    # settle ask for them again for every task.
    _groups: dict[str, GroupKeys] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        hashed = self.queue if self.part is None else f"{self.queue}#{self.part}"
        object.__setattr__(self, "tag", f"{self.prefix}:{{{hashed}}}")

    def partition(self, index: int, of: int | None = None) -> QueueKeys:
        """The keys of partition ``index`` of this queue: a full queue of its own under
        hash tag ``{q#i}`` (``#`` is in no queue name, so none collides with a queue's);
        the base keys keep what is recorded for the whole queue (``meta``). ``of``: the
        number of partitions the caller routes by, needed to write there (:meth:`layout`)."""
        return QueueKeys(self.prefix, self.queue, index, of)

    @property
    def base(self) -> QueueKeys:
        """The queue's base keys (itself when it is not a partition's)."""
        return self if self.part is None else QueueKeys(self.prefix, self.queue)

    def layout(self) -> tuple[str, int]:
        """What a script that adds messages here (or creates a group) checks first: this
        place's ``meta`` and the number of partitions the write assumes (1 for the base
        keys). The script refuses the write unless ``meta`` records that number
        (``REDISQ_LAYOUT``): a process whose number is stale never writes where no
        consumer reads.

        Raises:
            ValueError: a partition's keys built without ``of`` (read-only keys).
        """
        if self.part is None:
            return self.meta, 1
        if self.of is None:
            raise ValueError(
                f"The keys of partition {self.part} of queue {self.queue!r} were built "
                "without the number of partitions (QueueKeys.partition(i, of=K)): they "
                "can be read, not written."
            )
        return self.meta, self.of

    @property
    def log(self) -> str:
        return f"{self.tag}:log"

    @property
    def delayed(self) -> str:
        return f"{self.tag}:delayed"

    @property
    def meta(self) -> str:
        return f"{self.tag}:meta"

    @property
    def events(self) -> str:
        """Lifecycle events of every logical consumer (written when history is on)."""
        return f"{self.tag}:events"

    @property
    def archives(self) -> str:
        """Hash: the named archives of this queue (:mod:`~redisq_django.core.archives.named`)."""
        return f"{self.tag}:archives"

    def archive_gaps(self, archive: str) -> str:
        """List: the data losses archive ``archive`` went past (failOnDataLoss false),
        waiting for its job to report them."""
        return f"{self.tag}:archive:{validate_name('archive', archive)}:gaps"

    def sent_marker(self, message_id: str) -> str:
        """Marker that the outbox relay published ``message_id`` (makes it idempotent)."""
        return f"{self.tag}:sent:{message_id}"

    def batch_marker(self, batch_id: str) -> str:
        """Marker that batch ``batch_id`` (a transaction's messages) was published."""
        return f"{self.tag}:batch:{batch_id}"

    def trend(self, minute: int) -> str:
        """Counters and samples of minute ``minute`` (ms since the epoch // 60000)."""
        return f"{self.tag}:trend:{minute}"

    def task_result(self, result_id: str) -> str:
        """Hash: the result of Django task ``result_id`` enqueued to this queue."""
        return f"{self.tag}:result:{result_id}"

    @property
    def task_results(self) -> str:
        """Zset: the result ids of this queue's tasks, scored by their expiry time (ms)."""
        return f"{self.tag}:results"

    def group(self, group: str) -> GroupKeys:
        """Keys of logical consumer ``group`` on this queue."""
        found = self._groups.get(group)
        if found is None:
            found = self._groups[group] = GroupKeys(self, validate_name("consumer", group))
        return found


@dataclass(frozen=True)
class GroupKeys:
    """Keys of one logical consumer (consumer group) of a queue."""

    queue_keys: QueueKeys
    group: str
    # Built once: every key of the consumer starts with it.
    _base: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_base", f"{self.queue_keys.tag}:g:{self.group}")

    @property
    def direct(self) -> str:
        return f"{self._base}:direct"

    @property
    def retry(self) -> str:
        return f"{self._base}:retry"

    @property
    def dead(self) -> str:
        return f"{self._base}:dead"

    @property
    def instances(self) -> str:
        return f"{self._base}:instances"

    @property
    def running(self) -> str:
        """Hash: instance -> the message its handler started last (``log:<id>``)."""
        return f"{self._base}:running"

    def instance(self, instance: str) -> str:
        """What instance ``instance`` reports with its heartbeat (JSON; expires with it)."""
        return f"{self._base}:instance:{instance}"

    @property
    def leases(self) -> str:
        """Zset: started deliveries with a visibility timeout of their own (a task's),
        ``log:<id>`` / ``direct:<id>``, scored by when their lease ends (ms)."""
        return f"{self._base}:leases"

    def sent_marker(self, message_id: str) -> str:
        """Marker that ``message_id`` was delivered once to this consumer only."""
        return f"{self._base}:sent:{message_id}"

    @property
    def holders(self) -> str:
        """Hash of an ordered consumer: ordering key -> id of the message that holds it
        (delivered, retrying or handed on; the key's later messages wait meanwhile)."""
        return f"{self._base}:holders"

    @property
    def held_back(self) -> str:
        """Counter of an ordered consumer: the messages waiting in all its :meth:`waiting`
        lists (for the stats, without a look at every list)."""
        return f"{self._base}:held_back"

    @property
    def ended(self) -> str:
        """Hash: log entries this consumer has not read yet that an operator ended, entry
        id -> what becomes of it when read (``end_waiting.lua``; a JSON object of strings:
        ``mode`` ``dead`` or ``delete``, the dead letter's ``error_message``). Absent
        while none is marked: the fetch then pays one ``EXISTS`` in its read's round trip."""
        return f"{self._base}:ended"

    @property
    def waiting_prefix(self) -> str:
        """What :meth:`waiting` puts before an ordering key (scripts append the key)."""
        return f"{self._base}:waiting:"

    @property
    def rate(self) -> str:
        """String: the consumer's rate limit, as the time its bucket is full again (µs;
        ``rate.lua``). Kept on the base queue of a partitioned one: the limit is the
        logical consumer's, whichever partition a message is on."""
        return f"{self._base}:rate"

    def key_rate(self, key: str) -> str:
        """String: the consumer's rate limit for ordering key ``key`` (``rate_per_key``),
        as :attr:`rate`. The key may hold any character: it follows the hash tag."""
        return f"{self._base}:rate:{key}"

    @property
    def slots(self) -> str:
        """Zset: the consumer's concurrency slots in use, ``<instance>/<n>``, scored by
        when their lease ends (ms; ``slots.lua``). On the base queue, as :attr:`rate`."""
        return f"{self._base}:slots"

    def waiting(self, key: str) -> str:
        """List of an ordered consumer: the messages of ordering key ``key`` waiting for
        the one that holds it, oldest first (each an envelope as a JSON object). The key
        may hold any character: it follows the hash tag, which stays the first ``{…}``."""
        return self.waiting_prefix + key


def queue_keys(prefix: str, queue: str) -> QueueKeys:
    """Keys of ``queue`` under ``prefix`` (validated)."""
    return QueueKeys(prefix, validate_name("queue", queue))


def registry_key(prefix: str) -> str:
    """The set of all queue names (a single-key structure, outside any hash tag)."""
    return f"{prefix}:queues"


def sampler_key(prefix: str) -> str:
    """Who samples the backlog of every queue for the trends: a lease a worker holds
    (a single-key string outside any hash tag, like :func:`registry_key`)."""
    return f"{prefix}:trends:sampler"


@dataclass(frozen=True)
class ScheduleKeys:
    """The two keys of periodic schedules (single-key structures outside any hash tag,
    like :func:`registry_key`: each is written by one command or by a script that
    touches no other key, ``schedule_claim.lua``)."""

    claimed: str
    sent: str


def schedule_keys(prefix: str) -> ScheduleKeys:
    """Where the workers record, per schedule name, the latest tick one of them claimed
    (the right to publish it) and the latest tick published."""
    return ScheduleKeys(f"{prefix}:schedules:claimed", f"{prefix}:schedules:sent")
