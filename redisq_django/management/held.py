"""An ordered consumer's held-back keys from the shell: ``manage.py redisq held QUEUE
CONSUMER`` lists them as the live page's *Keys held back* does, ``manage.py redisq
release-key QUEUE CONSUMER KEY`` does what its *Release…* does (the same functions, the
same admin history with ``--user``)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from django.core.management.base import CommandError

from redisq_django import operations
from redisq_django.arguments import positive_int
from redisq_django.connection import get_broker
from redisq_django.core.ordered import HELD_LIMIT, HeldKey
from redisq_django.core.wire import visible
from redisq_django.management.console import (
    Write,
    add_user_option,
    check_names,
    table,
    user_named,
)


def add_held(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    """The ``held`` and ``release-key`` sub-commands' arguments."""
    held = sub.add_parser(
        "held",
        parents=common,
        help="an ordered consumer's ordering keys that hold back later messages, and why",
        description="Each ordering key whose later messages wait behind an earlier one: how "
        "many wait, the message holding the key and why (running on an instance, retrying, "
        "queued in the consumer's input, or not found), most waiting first. As 'Keys held "
        "back' on the consumer's live page.",
    )
    held.add_argument("queue")
    held.add_argument("consumer")
    held.add_argument(
        "--limit",
        type=positive_int,
        default=HELD_LIMIT,
        help=f"show at most this many keys (default {HELD_LIMIT})",
    )
    held.set_defaults(handler=show_held)
    release = sub.add_parser(
        "release-key",
        parents=common,
        help="let the next waiting message of an ordering key go now",
        description="Free ordering KEY of an ordered consumer by hand: the next of its "
        "waiting messages goes to the consumer's input now and holds the key. Meant for a "
        "holder that is not found (lost outside redisq); if the holder still runs or "
        "retries, the next message may run beside it, out of order. As 'Release…' on the "
        "consumer's live page.",
    )
    release.add_argument("queue")
    release.add_argument("consumer")
    release.add_argument("key", metavar="KEY", help="the ordering key, exactly ('held' shows it)")
    add_user_option(release)
    release.set_defaults(handler=release_key)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def why(held: HeldKey) -> str:
    """Why ``held``'s key holds, in the live page's words."""
    if held.state == "running":
        return f"running on {held.instance or '?'}"
    if held.state == "retrying":
        return f"retrying at {_when(held.due_ms)} after: {visible(held.last_error or '-')[:60]}"
    if held.state == "queued":
        return "queued in the consumer's input"
    if held.state == "unseen":
        return "holder not among the first 1,000 in flight, queued or retrying: most likely busy"
    return "holder not found: release the key to let its next message go"


def show_held(opts: dict[str, Any], write: Write) -> None:
    """``redisq held QUEUE CONSUMER``: see :func:`add_held`."""
    queue, consumer, limit = opts["queue"], opts["consumer"], opts["limit"]
    check_names(queue, consumer)
    found = get_broker().operator.held_keys(queue, consumer, limit + 1)
    if not found:
        write(f"No ordering key of {queue}/{consumer} holds back a message.")
        return
    rows = [["KEY", "WAITING", "HELD BY", "WHY"]]
    for h in found[:limit]:
        rows.append([visible(h.key), str(h.waiting), h.holder, why(h)])
    write(table(rows))
    if len(found) > limit:
        write(f"(the {limit} keys with the most messages waiting shown; more are held back)")
    write("Times in UTC. Let a key's next message go: redisq release-key QUEUE CONSUMER KEY.")


def release_key(opts: dict[str, Any], write: Write) -> None:
    """``redisq release-key QUEUE CONSUMER KEY``: see :func:`add_held`."""
    queue, consumer, key = opts["queue"], opts["consumer"], opts["key"]
    user = user_named(opts["user"])
    check_names(queue, consumer)
    if not get_broker().operator.release_key(queue, consumer, key):
        raise CommandError(
            f"Ordering key '{visible(key)}' holds back nothing on {queue}/{consumer} (its holder "
            f"finished, or it was released): nothing was released. 'redisq held {queue} "
            f"{consumer}' lists the held keys."
        )
    write(
        f"Released ordering key '{visible(key)}' of {queue}/{consumer}: the next of its "
        "waiting messages went to the consumer's input and holds the key now."
    )
    text = operations.released_key_log(key)
    if user is not None and not operations.record_change(user, queue, consumer, text):
        write(f"Not recorded in the admin history: there is no database row for {queue}.")
