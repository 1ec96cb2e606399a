"""Slices of bounded size: a stream's time slices split further by entry count.

Redis cannot count the entries of an id range without walking them (XRANGE ... COUNT n
builds a reply of n entries: about 3 us each in Redis, a second read of everything), so
sizes are estimated from samples. A round of probes is one pipelined round trip (two
when an estimate needs it): per slice its first and last :data:`SAMPLE` entry ids and
the last id of one millisecond. Entry ids tell more than their order: a generated id's
sequence number counts the entries of its millisecond before it, so a burst within one
millisecond is counted exactly, whatever its size; between the samples the count is
extrapolated from their density. A slice with no entry is dropped; one estimated over
``maxEntriesPerSlice`` is cut in time (one millisecond by sequence number) and its
parts probed again. When the slices cover a whole stream its length (XLEN) says how many
entries they hold, and while the estimates leave more than the limit unexplained (a busy
minute between quiet samples) every unsure slice is cut and probed too. At most
:data:`MAX_PROBES` slices are probed per range (at most ~2,000 entries and ~128 ids
sent back); what is still too big then is cut evenly by its estimate. Neighbours cut
from one slice are merged again up to the limit.

Estimates are exact for slices of up to 32 entries and for one-millisecond bursts; in
a read of part of a stream a busy period between two samples can still leave one
slice bigger than asked (read correctly, with less parallelism). A stream no longer
than the limit is not probed at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redisq_django.core.clock import last_id_of_ms
from redisq_django.pipeline.redis_io import parse_id, split, text

#: Entry ids sampled at each end of a slice.
SAMPLE = 16
#: Most slices probed when planning one range (a bound on the planning cost).
MAX_PROBES = 64
#: Most parts one slice is cut into before its parts are probed again.
MAX_FANOUT = 8

Id = tuple[int, int]


@dataclass(frozen=True)
class StreamSlice:
    """A slice of a stream: ``lo`` to ``hi`` (entry ids, inclusive), about ``count``
    entries; ``origin`` is the index of the time slice it was cut from."""

    lo: str
    hi: str
    count: float
    origin: int


def estimate(head: Sequence[Id], tail: Sequence[Id], rest: int | None) -> tuple[float, bool]:
    """Entries of a slice from its samples: ``(count, exact)``.

    Args:
        head: its first ids, ascending (up to :data:`SAMPLE`).
        tail: its last ids, descending (as XREVRANGE gives them).
        rest: the entries of the millisecond of ``head[-1]`` after it (None: unknown).

    ``exact`` counts are upper bounds that hold for ids Redis generated (entries never
    deleted one by one make them exact).
    """
    if len(head) < SAMPLE:
        return float(len(head)), True
    h, t = head[-1], tail[-1]  # the last entry of the head, the first of the tail
    if t <= h:  # the samples overlap: they hold every entry
        return float(len(set(head) | set(tail))), True
    if head[0][0] == tail[0][0]:  # one millisecond: sequence numbers count it
        return float(tail[0][1] - head[0][1] + 1), True
    if h[0] == t[0]:
        return float(2 * SAMPLE + t[1] - h[1] - 1), True
    # Entries of t's millisecond before t: its sequence number (the millisecond starts
    # inside the slice, after h's); the milliseconds between: the samples' density.
    spans = (h[0] - head[0][0]) + (tail[0][0] - t[0]) + 2
    density = 2 * SAMPLE / spans
    between = density * (t[0] - h[0] - 1)
    return 2 * SAMPLE + (rest or 0) + t[1] + between, False


def _ids(reply: Any) -> list[Id]:
    return [parse_id(text(entry[0])) for entry in reply or []]


@dataclass(frozen=True)
class Probe:
    """What one probe found out about a cell."""

    count: float
    exact: bool
    head: list[Id]
    tail: list[Id]


def _probe(conn: Any, key: str, cells: list[StreamSlice]) -> list[Probe]:
    """Sample and estimate each cell, in two round trips at most."""
    with conn.pipeline(transaction=False) as pipe:
        for cell in cells:
            pipe.execute_command("XRANGE", key, cell.lo, cell.hi, "COUNT", SAMPLE)
            pipe.execute_command("XREVRANGE", key, cell.hi, cell.lo, "COUNT", SAMPLE)
        replies = pipe.execute()
    samples = [(_ids(replies[2 * i]), _ids(replies[2 * i + 1])) for i in range(len(cells))]
    out = [Probe(*estimate(head, tail, None), head, tail) for head, tail in samples]
    unsure = [i for i, probe in enumerate(out) if not probe.exact]
    if unsure:
        # The rest of the millisecond the head ends in: a burst there is invisible to
        # the samples, and the last id of that millisecond counts it.
        with conn.pipeline(transaction=False) as pipe:
            for i in unsure:
                h = out[i].head[-1]
                end = min(parse_id(cells[i].hi), parse_id(last_id_of_ms(h[0])))
                pipe.execute_command("XREVRANGE", key, _id(end), _id(h), "COUNT", 1)
            replies = pipe.execute()
        for i, reply in zip(unsure, replies, strict=True):
            last = _ids(reply)
            probe = out[i]
            rest = last[0][1] - probe.head[-1][1] if last else 0
            out[i] = Probe(estimate(probe.head, probe.tail, rest)[0], False, probe.head, probe.tail)
    return out


def _id(entry_id: Id) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


def _cut(cell: StreamSlice, probe: Probe, parts: int) -> tuple[list[StreamSlice], bool]:
    """``cell`` cut into ``parts`` parts: ``(parts, final)``; final when they need no
    probe (one millisecond, cut by sequence number: each part holds at most its share)."""
    first, last = probe.head[0], probe.tail[0]
    if first[0] == last[0]:
        step = math.ceil((last[1] - first[1] + 1) / parts)
        cuts = [first[1] + step * i for i in range(1, parts) if first[1] + step * i <= last[1]]
        starts = [cell.lo, *(f"{first[0]}-{c}" for c in cuts)]
        ends = [*(f"{first[0]}-{c - 1}" for c in cuts), cell.hi]
        share = probe.count / len(starts)
        return [
            StreamSlice(a, b, share, cell.origin) for a, b in zip(starts, ends, strict=True)
        ], True
    ranges = split(cell.lo, cell.hi, min(MAX_FANOUT, max(2, parts)))
    share = probe.count / len(ranges)
    return [StreamSlice(a, b, share, cell.origin) for a, b in ranges], False


def _merged(cells: list[StreamSlice], max_entries: int) -> list[tuple[str, str]]:
    """Neighbours cut from the same slice merged while they hold ``max_entries`` in all
    (a merged range also covers the empty cells between them: nothing to read there)."""
    out: list[tuple[str, str]] = []
    run: StreamSlice | None = None
    for cell in sorted(cells, key=lambda c: parse_id(c.lo)):
        if run is not None and run.origin == cell.origin and run.count + cell.count <= max_entries:
            run = StreamSlice(run.lo, cell.hi, run.count + cell.count, run.origin)
            continue
        if run is not None:
            out.append((run.lo, run.hi))
        run = cell
    if run is not None:
        out.append((run.lo, run.hi))
    return out


def size_split(
    conn: Any, key: str, ranges: Sequence[tuple[str, str]], max_entries: int, *, whole: bool
) -> list[tuple[str, str]]:
    """``ranges`` (time slices of stream ``key``, inclusive ids, in order) with empty
    ones dropped and those holding more than ``max_entries`` entries cut by count.

    A stream no longer than ``max_entries`` (XLEN) is returned as it is, unprobed. Cells
    whose estimate is over the limit are cut and probed again, within
    :data:`MAX_PROBES`. When the ranges cover the ``whole`` stream, its length tells how
    many entries they hold: while the estimates leave more than ``max_entries`` of them
    unexplained (a busy minute between two quiet samples), every unsure cell is cut and
    probed again too.
    """
    if not ranges:
        return []
    total = int(conn.xlen(key))
    if total <= max_entries:
        return list(ranges)
    pending = [StreamSlice(lo, hi, math.inf, i) for i, (lo, hi) in enumerate(ranges)]
    done: list[StreamSlice] = []
    probes = 0
    while pending and probes + len(pending) <= MAX_PROBES:
        probes += len(pending)
        again: list[StreamSlice] = []
        unsure: list[tuple[StreamSlice, Probe]] = []
        for cell, probe in zip(pending, _probe(conn, key, pending), strict=True):
            if not probe.head:
                continue  # no entry: nothing to read (no new one can fall in past ids)
            cell = StreamSlice(cell.lo, cell.hi, probe.count, cell.origin)
            if probe.count > max_entries:
                cut, final = _cut(cell, probe, math.ceil(probe.count / max_entries))
                (done if final else again).extend(cut)
            elif probe.exact:
                done.append(cell)
            else:
                unsure.append((cell, probe))
        known = sum(c.count for c in (*done, *again)) + sum(c.count for c, _ in unsure)
        hunt = whole and total - known > max_entries  # entries the samples did not see: look closer
        for cell, probe in unsure:
            if hunt:
                again.extend(_cut(cell, probe, MAX_FANOUT)[0])
            else:
                done.append(cell)
        pending = again
    for cell in pending:  # out of probes: cut what is left evenly in time by its estimate
        parts = 1 if math.isinf(cell.count) else math.ceil(cell.count / max_entries)
        pieces = split(cell.lo, cell.hi, parts) if parts > 1 else [(cell.lo, cell.hi)]
        done += [StreamSlice(a, b, cell.count / len(pieces), cell.origin) for a, b in pieces]
    return _merged(done, max_entries)
