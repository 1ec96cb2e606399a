"""The peer benchmark's report: the markdown table, versions and machine."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import redis
from harness import cell, fmt, markdown_table, ratios_per_round, summary
from rows import OURS, PEER_PACKAGES, Row


def _stats(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return summary(r.get(key) for r in runs)


def report(results: list[dict[str, Any]], rows: list[Row], meta: dict[str, Any]) -> str:
    """The markdown: the rows' table, bulk enqueue, ours over the fastest peer."""
    main, bulk = [], []
    flagged = False
    for row in rows:
        runs = [r for r in results if r["key"] == row.key and "error" not in r]
        if not runs:
            continue
        n = fmt(runs[0]["n"])
        if row.bulk:
            bulk.append([row.key, n, cell(_stats(runs, "bulk_rate"), _stats(runs, "bulk_load"))])
            continue
        drain_load = _stats(runs, "drain_load")
        lat_load = _stats(runs, "latency_load")
        # A worker that cannot keep up with the rate: its latency measures the backlog.
        span = _stats(runs, "drain_span_rate")["median"]
        behind = (span is not None and span < meta["rate"]) or any(
            r.get("latency_n", 0) < r.get("latency_sent", 0) for r in runs
        )
        flagged = flagged or behind
        mark = " *" if behind else ""
        main.append(
            [
                row.key,
                n,
                cell(_stats(runs, "enqueue_rate"), _stats(runs, "enqueue_load")),
                cell(_stats(runs, "startup_s"), drain_load, 2),
                cell(_stats(runs, "drain_wall_rate"), drain_load),
                cell(_stats(runs, "drain_span_rate"), drain_load),
                cell(_stats(runs, "commands_per_job"), drain_load, 2),
                cell(_stats(runs, "latency_p50"), lat_load, 2) + mark,
                cell(_stats(runs, "latency_p99"), lat_load, 2) + mark,
            ]
        )
    parts = [
        f"Peers, {meta['date']}: {meta['rounds']} interleaved round(s), seed {meta['seed']}; "
        f"{meta['cpu']} ({meta['cores']} cores), Python {meta['python']}, "
        f"Redis {meta['redis']}; {meta['versions_text']}.",
        "",
        "Each cell: median (min-max over the rounds) @ the median 1-minute load average "
        "when it was taken. Jobs/s unless marked.",
        "",
        markdown_table(
            [
                "row",
                "jobs",
                "enqueue/s",
                "start s",
                "drain wall/s",
                "drain first→last/s",
                "Redis cmds/job",
                f"p50 ms @{meta['rate']:.0f}/s",
                f"p99 ms @{meta['rate']:.0f}/s",
            ],
            main,
        ),
    ]
    if bulk:
        parts += ["", markdown_table(["bulk enqueue", "jobs", "jobs/s"], bulk)]
    peers = [r.key for r in rows if not r.ours and not r.bulk]
    for metric, label in (("drain_span_rate", "first→last"), ("drain_wall_rate", "wall")):
        ratios = ratios_per_round(results, OURS, peers, metric)
        if not ratios:
            continue
        parts += [
            "",
            f"{OURS} over the fastest peer, drain {label}, per round "
            f"(goal >= 2x in every round): "
            + "; ".join(
                f"round {r['round']}: {r['ratio']:.2f}x "
                f"({fmt(r['ours'])} vs {r['best_key']} {fmt(r['best'])})"
                for r in ratios
            ),
        ]
    failed = [r for r in results if "error" in r]
    if failed:
        parts += ["", "Failed runs (left out of the figures; the errors are in peers.json):"]
        parts += [f"- round {r['round']}: {r['key']}" for r in failed]
    notes = [f"- {r.key}: {r.note}" for r in rows if r.note]
    if flagged:
        parts += [
            "",
            f"\\* the worker drains fewer than {meta['rate']:.0f} jobs/s (or had not run "
            "every latency job 30 s after the last was enqueued): its latency measures "
            "the backlog, over the jobs that had run.",
        ]
    parts += [
        "",
        "start s: worker spawn to the first job done (the wall minus first->last).",
        "",
        "Rows:",
        *notes,
    ]
    return "\n".join(parts) + "\n"


def peer_versions(peers_python: str) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = 'absent'\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run(
        [peers_python, "-c", code, *PEER_PACKAGES], capture_output=True, check=True
    )
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


def machine(conn: redis.Redis) -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "redis": conn.info("server")["redis_version"],
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
