"""Retention of a queue's log: trim what every logical consumer acknowledged, outside the
replay window, never what one still needs (unless a hard cap drops it, counted)."""

from __future__ import annotations

from redisq_django.core.config import CoreConfig
from redisq_django.core.groups import recreate_group
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


def purge_place(client: RedisClient, keys: QueueKeys, groups: list[str]) -> None:
    """Delete every message of the queue (log, delayed, retries, dead letters in Redis)
    while keeping ``groups`` registered at the end of the (empty) log."""
    with client.pipeline(transaction=True) as pipe:
        pipe.execute_command("XTRIM", keys.log, "MAXLEN", 0)
        pipe.delete(keys.delayed)
        for group in groups:
            gkeys = keys.group(group)
            pipe.execute_command("XTRIM", gkeys.direct, "MAXLEN", 0)
            pipe.delete(gkeys.retry, gkeys.dead)
        pipe.execute()
    for group in groups:
        # Pending entries point at deleted entries: forget them by re-creating the
        # group at the end of the log (keeps the registration).
        recreate_group(client, keys.group(group))
