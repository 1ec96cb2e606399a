"""What an operator does to messages before they die: deliver a delayed message or a
retry now, and discard what waits for one logical consumer (its purge).

Each change is one script (``deliver_now.lua``, ``purge_consumer.lua``); the admin's live
pages and ``manage.py redisq`` call these functions.
"""

from __future__ import annotations

from typing import Any

from redisq_django.core import browse, replay
from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import Scripts
from redisq_django.core.start import StartPoint
from redisq_django.core.wire import flatten, to_str

#: ``purge_consumer.lua`` removes at most this many entries per key and call...
PURGE_BATCH = 1000
#: ...and a purge makes at most this many calls (100 million entries).
PURGE_CALLS = 100_000


def deliver_now(
    client: Any, scripts: Scripts, keys: QueueKeys, group: str | None, ref: str
) -> str | None:
    """Deliver the delayed message or retry ``ref`` names (see ``browse.Entry.ref``) now.

    A delayed message is appended to the queue's log now (every logical consumer
    receives it, after what already waits there); a retry goes to its consumer's private
    input, which that consumer's next fetch reads. Either keeps its fields (its
    ``due_at`` says when it was due) and its attempt count.

    Returns:
        The new entry id, or None when it is gone (due and promoted, or delivered now by
        someone else, meanwhile).

    Raises:
        ValueError: ``ref`` names no delayed message or retry.
    """
    where = ref.partition(":")[0]
    if where not in (browse.S_DELAYED, browse.S_RETRY):
        raise ValueError(f"Only a delayed message or a retry can be delivered now, not {ref!r}.")
    entry = browse.find(client, keys, group, ref)
    if entry is None:
        return None
    if where == browse.S_DELAYED:
        target = [keys.delayed, keys.log]
    else:
        gkeys = keys.group(group or "")
        target = [gkeys.retry, gkeys.direct]
    new_id = scripts("deliver_now", target, [entry.member, *flatten(entry.fields)])
    return to_str(new_id) if new_id else None


def purge_consumer(
    client: Any, scripts: Scripts, keys: QueueKeys, group: str, *, history: bool = False
) -> tuple[int, int]:
    """Discard everything waiting for logical consumer ``group``: its backlog in the log
    (it moves to the end of the log, as a replay to "latest"), its retries and its
    private input not yet delivered. In-flight messages finish as usual; other
    consumers, delayed messages and dead letters are not touched.

    Returns:
        ``(retries removed, private-input entries removed)``.

    Raises:
        redis.ResponseError: NOGROUP when ``group`` is not registered.
    """
    gkeys = keys.group(group)
    # The log first (with its `reset` event when history is on), then its own keys.
    replay.reset(client, gkeys, StartPoint.parse("latest").to_last_delivered_id(), history)
    retries = direct = 0
    for _ in range(PURGE_CALLS):
        r, d, more = scripts("purge_consumer", [gkeys.retry, gkeys.direct], [group, PURGE_BATCH])
        retries, direct = retries + int(r), direct + int(d)
        if not int(more):
            break
    return retries, direct
