"""The peer benchmark's own arithmetic (bench/peers/harness.py): no peer is imported."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.redis_server import RedisServer

HARNESS = Path(__file__).resolve().parent.parent / "bench" / "peers" / "harness.py"


def _load() -> ModuleType:
    # By path: bench/ is no package, and the module's plain name must not shadow others.
    spec = importlib.util.spec_from_file_location("bench_peers_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


harness = _load()


def test_interleaved_runs_every_row_once_per_round_in_changing_orders() -> None:
    rows = [f"row{i}" for i in range(8)]
    order = harness.interleaved(rows, rounds=5, seed=7)
    assert len(order) == 5
    assert all(sorted(r) == sorted(rows) for r in order)
    assert len({tuple(r) for r in order}) > 1  # shuffled per round, not once
    assert order == harness.interleaved(rows, rounds=5, seed=7)  # the seed reruns it


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert harness.percentile(values, 50) == 51.0  # rank round(0.5 * 99) = 50
    assert harness.percentile(values, 99) == 99.0
    assert harness.percentile(values, 0) == 1.0
    assert harness.percentile(values, 100) == 100.0
    assert harness.percentile([3.0], 99) == 3.0
    assert math.isnan(harness.percentile([], 50))


def test_command_delta_takes_out_the_harness_own_commands() -> None:
    before = {"get": 10, "info": 3, "xack": 5}
    after = {"get": 40, "info": 4, "xack": 105, "incrby": 100}
    delta = harness.command_delta(before, after, {"get": 30, "info": 1})
    assert delta == {"xack": 100, "incrby": 100}


def test_command_delta_refuses_an_own_count_above_the_server_s() -> None:
    with pytest.raises(ValueError, match="'get'"):
        harness.command_delta({"get": 1}, {"get": 2}, {"get": 5})


def test_own_commands_on_a_real_server_leave_nothing(
    redis_server_binary: str, tmp_path: Path
) -> None:
    """The accounting the harness uses (its GET polls, one INFO) matches what Redis
    counts: with no worker, nothing is left."""
    server = RedisServer(redis_server_binary, tmp_path / "redis").start()
    try:
        with server.client() as conn:
            conn.ping()  # connected before the first snapshot, as the harness is
            before = harness.command_calls(conn.info("commandstats"))
            for _ in range(25):
                conn.get("peers:counter")
            after = harness.command_calls(conn.info("commandstats"))
            assert harness.command_delta(before, after, {"get": 25, "info": 1}) == {}
            conn.incr("peers:counter")
            last = harness.command_calls(conn.info("commandstats"))
            assert harness.command_delta(after, last, {"info": 1}) == {"incrby": 1}
    finally:
        server.stop()


def test_ratios_per_round_compare_with_the_best_peer_of_the_same_round() -> None:
    results = [
        {"round": 1, "key": "ours", "rate": 600.0},
        {"round": 1, "key": "huey", "rate": 300.0},
        {"round": 1, "key": "celery", "rate": 100.0},
        {"round": 2, "key": "ours", "rate": 500.0},
        {"round": 2, "key": "huey", "rate": 200.0},
        {"round": 2, "key": "celery", "rate": 400.0},
        {"round": 3, "key": "huey", "rate": 200.0},  # ours missing: no ratio
    ]
    ratios = harness.ratios_per_round(results, "ours", ["huey", "celery"], "rate")
    assert [(r["round"], r["best_key"], r["ratio"]) for r in ratios] == [
        (1, "huey", 2.0),
        (2, "celery", 1.25),
    ]


def test_summary_and_cell_leave_out_what_was_not_measured() -> None:
    stats = harness.summary([3.0, None, 1.0, 2.0])
    assert stats == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    load = harness.summary([1.5, 2.5])
    assert harness.cell(stats, load) == "2 (1-3) @2.0"
    assert harness.cell(harness.summary([None]), load) == "-"
    assert harness.summary([]) == {"median": None, "min": None, "max": None, "n": 0}
