"""Pure functions of the peer benchmark: order, statistics, Redis command counts, tables.

Standard library only, so tests/bench/test_peers_harness.py can import it without the
peers or a server.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def interleaved(items: Sequence[str], rounds: int, seed: int) -> list[list[str]]:
    """Each round runs every item once, in an order shuffled afresh per round, so that
    a slow stretch of the shared machine falls on different items each time.

    Args:
        items: the rows to run (library/mode keys).
        rounds: how many rounds.
        seed: the shuffle's seed (printed with the results, to rerun the same order).
    """
    rng = random.Random(seed)
    order = []
    for _ in range(rounds):
        row = list(items)
        rng.shuffle(row)
        order.append(row)
    return order


def percentile(values: Iterable[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile (0-100) of ``values``; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = round(p / 100.0 * (len(ordered) - 1))
    return ordered[min(len(ordered) - 1, max(0, rank))]


def command_calls(commandstats: Mapping[str, Any]) -> dict[str, int]:
    """``{command: calls}`` from redis-py's ``info("commandstats")``
    (``{"cmdstat_get": {"calls": 3, ...}, ...}``)."""
    calls = {}
    for key, stats in commandstats.items():
        name = key.removeprefix("cmdstat_")
        calls[name] = int(stats["calls"])
    return calls


def command_delta(
    before: Mapping[str, int], after: Mapping[str, int], own: Mapping[str, int]
) -> dict[str, int]:
    """Commands the others ran between two ``INFO commandstats`` snapshots: ``after -
    before`` minus the harness's ``own`` (its counter polls, the ``INFO`` that took
    ``before``), without the commands that were not run.

    Raises:
        ValueError: ``own`` claims more calls of a command than the server counted (the
            harness counted its own commands wrongly).
    """
    delta = {}
    for name in sorted(set(after) | set(own)):
        count = after.get(name, 0) - before.get(name, 0) - own.get(name, 0)
        if count < 0:
            raise ValueError(
                f"the harness counted {own.get(name, 0)} {name!r} of its own but the server "
                f"counted {after.get(name, 0) - before.get(name, 0)}: its count is wrong"
            )
        if count:
            delta[name] = count
    return delta


def summary(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Median, min and max of the values that were measured (``None`` left out)."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": statistics.median(present),
        "min": min(present),
        "max": max(present),
        "n": len(present),
    }


def ratios_per_round(
    results: Sequence[Mapping[str, Any]], ours: str, peers: Sequence[str], metric: str
) -> list[dict[str, Any]]:
    """Per round, ``ours``'s ``metric`` over the best peer's in the same round.

    Args:
        results: one dict per run with ``round``, ``key`` and the metric.
        ours: the key of our row (``ours c=1``).
        peers: the keys of the peers' rows.
        metric: a higher-is-better figure (jobs/s).

    Returns:
        ``{"round", "ours", "best", "best_key", "ratio"}`` for each round where ours and
        at least one peer were measured.
    """
    by_round: dict[int, dict[str, float]] = {}
    for run in results:
        value = run.get(metric)
        if value is not None:
            by_round.setdefault(run["round"], {})[run["key"]] = value
    out = []
    for rnd in sorted(by_round):
        row = by_round[rnd]
        measured = {k: v for k, v in row.items() if k in peers}
        if ours not in row or not measured:
            continue
        best_key = max(measured, key=lambda k: measured[k])
        out.append(
            {
                "round": rnd,
                "ours": row[ours],
                "best": measured[best_key],
                "best_key": best_key,
                "ratio": row[ours] / measured[best_key],
            }
        )
    return out


def fmt(value: float | None, digits: int = 0) -> str:
    """A figure for the table: thousands separated, ``-`` when not measured."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def cell(stats: Mapping[str, Any], load: Mapping[str, Any], digits: int = 0) -> str:
    """``median (min-max) @load``: a figure over the rounds with the median 1-minute
    load average at the times it was taken."""
    if stats.get("median") is None:
        return "-"
    text = fmt(stats["median"], digits)
    if stats["n"] > 1:
        text += f" ({fmt(stats['min'], digits)}-{fmt(stats['max'], digits)})"
    if load.get("median") is not None:
        text += f" @{load['median']:.1f}"
    return text


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
