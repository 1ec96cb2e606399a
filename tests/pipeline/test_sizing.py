"""Partitions split by size: empty time slices dropped, big ones cut by entry count, from
samples of ids (never a walk over every entry), every entry in exactly one range."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from redisq_django.pipeline import redis_io, sizing
from redisq_django.pipeline.sizing import SAMPLE, estimate
from redisq_django.pipeline.source_options import SourceOptions

BASE_MS = 1_700_000_000_000


def test_estimates_from_samples() -> None:
    head = [(5, i) for i in range(SAMPLE)]
    # Fewer entries than a sample: counted
    assert estimate(head[:3], head[:3][::-1], None) == (3.0, True)
    # Head and tail overlap: counted
    both = [(5, i) for i in range(20)]
    assert estimate(both[:SAMPLE], both[::-1][:SAMPLE], None) == (20.0, True)
    # One millisecond: its sequence numbers count it, whatever its size
    tail = [(5, 99_999 - i) for i in range(SAMPLE)]
    assert estimate(head, tail, None) == (100_000.0, True)
    # A burst at the start of a slice, then a quiet tail reaching into it
    tail = [(5 + 1000 * (15 - i), 0) for i in range(SAMPLE - 1)] + [(5, 2999)]
    assert estimate(head, tail, None) == (2 * SAMPLE + 2999 - (SAMPLE - 1) - 1, True)
    # Quiet ends and a gap: extrapolated from the samples' density, plus the rest of the
    # head's last millisecond and the start of the tail's first
    head = [(1000 + i, 0) for i in range(SAMPLE)]
    tail = [(9000 - i, 0) for i in range(SAMPLE)]
    count, exact = estimate(head, tail, rest=7)
    assert not exact and 7_000 < count < 9_000


@pytest.fixture
def conn(redis_url: str) -> Any:
    client = redis_io.client(SourceOptions.parse({"url": redis_url}))
    yield client
    client.close()


def _add(client: redis.Redis, key: str, ids: list[str]) -> None:
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xadd(key, {"payload": "{}"}, id=entry_id)
    pipe.execute()


def _sizes(conn: Any, key: str, ranges: list[tuple[str, str]]) -> list[int]:
    """Entries per range; also checks that the ranges cover every entry exactly once."""
    seen: list[bytes] = []
    for lo, hi in ranges:
        seen += [e[0] for e in conn.execute_command("XRANGE", key, lo, hi)]
    every = [e[0] for e in conn.execute_command("XRANGE", key, "-", "+")]
    assert seen == every
    return [len(conn.execute_command("XRANGE", key, lo, hi)) for lo, hi in ranges]


def _plan(conn: Any, key: str, parts: int, limit: int) -> list[tuple[str, str]]:
    edges = redis_io.bounds(conn, key)
    assert edges is not None
    slices = redis_io.split(edges[0], edges[1], parts)
    return sizing.size_split(conn, key, slices, limit, whole=True)


def test_a_millisecond_burst_with_a_quiet_tail_is_cut_by_count(
    redis_client: redis.Redis, conn: Any, queue_name: str
) -> None:
    # Given 3,000 entries in one millisecond, then one a second for a minute
    key = f"raw:{queue_name}"
    _add(redis_client, key, [f"{BASE_MS}-{i}" for i in range(3000)])
    _add(redis_client, key, [f"{BASE_MS + 1000 * s}-0" for s in range(1, 61)])
    # When it is planned in 4 time slices of at most 500 entries
    sizes = _sizes(conn, key, _plan(conn, key, 4, 500))
    # Then the burst is cut into parts of at most 500, and the quiet tail is not split up
    assert max(sizes) <= 500
    assert sum(sizes) == 3060
    assert len(sizes) <= 3000 // 500 + 4


def test_a_busy_minute_in_quiet_hours_is_found_and_cut(
    redis_client: redis.Redis, conn: Any, queue_name: str
) -> None:
    # Given an entry a minute for 4 hours and, in hour 2, a minute with 20,000 entries
    key = f"raw:{queue_name}"
    ids = []
    for minute in range(240):
        ids.append(f"{BASE_MS + 60_000 * minute}-0")
        if minute == 100:
            ids += [f"{BASE_MS + 60_000 * minute + 1 + 3 * k}-0" for k in range(20_000)]
    _add(redis_client, key, ids)
    # When it is planned in 4 time slices of at most 2,000 entries
    sizes = _sizes(conn, key, _plan(conn, key, 4, 2000))
    # Then no slice holds the busy minute: it is cut into parts of about the limit
    # (estimated: within a factor of 2), and the quiet hours stay few slices
    assert max(sizes) <= 2 * 2000
    assert 20_000 // 2000 <= len(sizes) <= 40


def test_empty_slices_are_dropped_and_a_short_stream_is_not_probed(
    redis_client: redis.Redis, conn: Any, queue_name: str
) -> None:
    key = f"raw:{queue_name}"
    # Two bursts of 200 an hour apart: the 6 slices between them hold nothing
    _add(redis_client, key, [f"{BASE_MS}-{i}" for i in range(200)])
    _add(redis_client, key, [f"{BASE_MS + 3_600_000}-{i}" for i in range(200)])
    ranges = _plan(conn, key, 8, 100)
    assert _sizes(conn, key, ranges) == [100, 100, 100, 100]
    # Under the limit (XLEN <= limit): the time slices as they are
    assert len(_plan(conn, key, 8, 400)) == 8
