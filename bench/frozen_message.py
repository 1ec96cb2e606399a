"""What a frozen ``Message`` costs where a worker builds one per fetched message.

Three ways to build the same twelve fields, positionally, as ``Subscription`` does:

* a plain slots dataclass (what ``Message`` was before it was frozen);
* a frozen slots dataclass (its ``__init__`` sets each field with ``object.__setattr__``);
* what ``core/message.py`` does: a ``MessageFields`` (plain slots dataclass), then its
  class set to ``Message``, which refuses every change.

And one field read of each. CPU time of this process (``time.process_time``), so that
other jobs on a shared machine move the figures less than wall time would; best and
median of interleaved runs (not part of ``make bench``).

    .venv/bin/python bench/frozen_message.py [--runs 15] [--number 200000]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import timeit
from typing import Any

from redisq_django.core.message import Message, MessageFields

_FIELDS = [(f.name, f.type, f) for f in dataclasses.fields(MessageFields)]
Plain = dataclasses.make_dataclass("Plain", _FIELDS, slots=True)
Frozen = dataclasses.make_dataclass("Frozen", _FIELDS, slots=True, frozen=True)

ARGS: tuple[Any, ...] = (
    *("0123456789abcdef0123456789abcdef", "orders", {"order": 42}, {}, 1, "billing"),
    *(1_700_000_000_000, None, None, 0, "host-1-w1", None),
)


def now() -> Message:
    message: Any = MessageFields(*ARGS)
    message.__class__ = Message
    return message


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--number", type=int, default=200_000, help="builds per run")
    args = ap.parse_args()
    builds = {
        "plain slots dataclass (before)": lambda: Plain(*ARGS),
        "frozen slots dataclass": lambda: Frozen(*ARGS),
        "MessageFields, then Message (now)": now,
    }
    reads = {"before": Plain(*ARGS), "frozen": Frozen(*ARGS), "now": now()}
    found: dict[str, list[float]] = {name: [] for name in [*builds, *reads]}
    for _ in range(args.runs):
        for name, build in builds.items():
            seconds = timeit.timeit(build, number=args.number, timer=time.process_time)
            found[name].append(seconds / args.number * 1e9)
        for name, value in reads.items():
            seconds = timeit.timeit(
                lambda v=value: v.attempts, number=args.number, timer=time.process_time
            )
            found[name].append(seconds / args.number * 1e9)
    for name, ns in found.items():
        what = "read .attempts" if name in reads else "build"
        print(
            f"{what:15s} {name:34s} best {min(ns):6.0f} ns  median {statistics.median(ns):6.0f} ns"
        )


if __name__ == "__main__":
    main()
