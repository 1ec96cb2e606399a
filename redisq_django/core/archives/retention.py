"""Retention of a queue's log: trim what every logical consumer acknowledged, outside the
replay window, never what one still needs (unless a hard cap drops it, counted)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from redisq_django.core.config import CoreConfig
from redisq_django.core.errors import error_code
from redisq_django.core.groups import group_names
from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient


def trim_log(
    scripts: Scripts, keys: QueueKeys, config: CoreConfig, *, now: int | None = None
) -> tuple[int, int]:
    """One bounded round of ``trim.lua`` on ``keys``' log.

    Returns:
        ``(removed, dropped)``: entries removed safely and unacknowledged entries
        removed by the hard cap.
    """
    # Registered archives always hold retention; with history on the events stream rides
    # along (and the log waits for an archive to register).
    trimmed = [keys.log, keys.meta, keys.archives]
    if config.history:
        trimmed.append(keys.events)
    removed, dropped = scripts(
        "trim",
        trimmed,
        [
            now if now is not None else "",  # "": Redis's clock, the entry ids' clock
            config.replay_window_ms,
            config.replay_window_len,
            config.max_len,
            config.max_age_ms,
            config.script_batch,
        ],
    )
    return int(removed), int(dropped)


#: How many times a purge lists a place's consumers again when one registered or left
#: while it was listing them.
PURGE_ATTEMPTS = 5


@dataclass(frozen=True)
class Purged:
    """What :func:`purge_place` removed from one place.

    Attributes:
        removed: entries of the log.
        delayed: delayed messages.
        gaps: registered archives of the log that lost entries they had not stored (each
            got them in its gap record, marked as a purge's).
        groups: the logical consumers kept registered (at the end of the empty log).
    """

    removed: int
    delayed: int
    gaps: int
    groups: list[str]


def purge_place(client: RedisClient, scripts: Scripts, keys: QueueKeys) -> Purged:
    """Delete every message of a place (log, delayed, retries, dead letters in Redis) in
    one step (``purge.lua``), keeping its logical consumers registered at the end of the
    (empty) log, and record in each registered archive's gap record what it loses (as a
    hard cap's trim does: ``last_trimmed`` raised, ``failOnDataLoss`` applies).

    Raises:
        redis.ResponseError: the place's consumers kept changing while it listed them
            (``REDISQ_GROUPS``, :data:`PURGE_ATTEMPTS` times).
    """
    for attempt in range(PURGE_ATTEMPTS):
        groups = group_names(client, keys)
        per_group = [k for g in groups for k in _group_keys(keys, g)]
        try:
            removed, delayed, gaps = scripts(
                "purge", [keys.log, keys.delayed, keys.meta, keys.archives, *per_group], groups
            )
        except redis.ResponseError as exc:
            if error_code(exc) != "REDISQ_GROUPS" or attempt == PURGE_ATTEMPTS - 1:
                raise
            continue
        return Purged(int(removed), int(delayed), int(gaps), groups)
    raise AssertionError("unreachable")  # pragma: no cover


def _group_keys(keys: QueueKeys, group: str) -> tuple[str, str, str]:
    gkeys = keys.group(group)
    return gkeys.direct, gkeys.retry, gkeys.dead
