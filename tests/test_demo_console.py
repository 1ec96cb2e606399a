"""`make demo` leaves a console worth looking at: its incident step leaves dead letters of
several errors and delayed messages, its traffic step keeps orders coming while Spark
works, and every worker the demo runs or suggests consumes the schedule's queue (else
that queue would read "backlog, no instance alive")."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "example_project"
DEMO = EXAMPLE / "demo.sh"

pytestmark = pytest.mark.slow


def manage(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


# The example project declares its consumers in code, on the fixed queue "orders".
@pytest.mark.usefixtures("empty_redis")
def test_the_demo_leaves_dead_letters_of_several_errors_and_delayed_messages(
    redis_url: str, tmp_path: Path
) -> None:
    # Given the demo's first steps (demo.sh), against the session Redis
    env = {**os.environ, "REDISQ_URL": redis_url, "EXAMPLE_DB": str(tmp_path / "db.sqlite3")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    register = (
        "from redisq_django.connection import get_broker\n"
        "for n in ('billing', 'email', 'fraud-check'):\n"
        "    get_broker().consumers.ensure('orders', n)\n"
        "get_broker().consumers.ensure('ledger', 'postings')\n"
    )
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "shell", "--verbosity", "0", "-c", register)
    manage(env, "shop_demo", "setup")
    manage(env, "runconsumer", "orders", "--burst", "--stats-interval", "0")

    # When its incident step runs, then a worker, and two seconds of traffic
    manage(env, "shop_demo", "incident")
    manage(env, "runconsumer", "orders", "stock", "--burst", "--stats-interval", "0")
    traffic = manage(env, "shop_demo", "traffic", "--seconds", "1.5", "--every", "1")
    report = manage(env, "shop_demo", "report")

    # Then dead letters of three different errors wait in the console
    errors = set(re.findall(r"attempts: (\w+):", report))
    assert errors == {"SuspiciousOrder", "Reject", "KeyError"}, report
    assert report.count("does not exist") == 6  # 2 deleted orders x 3 consumers
    # And two reminders are delayed, and the traffic published its orders
    client = redis.Redis.from_url(redis_url)
    assert client.zcard("redisq:{orders}:delayed") == 2
    assert traffic.splitlines() == ["order 1: 19.90", "order 2: 250.00"]
    assert client.xlen("redisq:{orders}:log") == 6 + 3 + 2

    # When a worker runs the ledger (4 partitions) until the refund has failed once
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runconsumer", "ledger", "--stats-interval", "0"],
        env=env,
        cwd=EXAMPLE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    held = [f"redisq:{{ledger#{i}}}:g:postings:held_back" for i in range(4)]
    # Then the incident's 9 postings and the traffic's 2 were spread over the partitions,
    # and the customer's two postings after the refund are held back behind it, retrying
    # (as the demo's last line says)
    ledger = (
        "from redisq_django.connection import get_broker\n"
        "s = get_broker().stats('ledger')\n"
        "c = next(c for c in s.consumers if c.name == 'postings')\n"
        "print(len(s.partitions), s.length, c.waiting_retry, c.held_back, c.dead)\n"
    )
    expected = ("4", str(6 + 3 + 2), "1", "2", "0")
    state: tuple[str, ...] = ()
    try:
        for _ in range(600):  # 60 s at most: a loaded machine starts Django slowly
            if sum(int(client.get(k) or 0) for k in held) == 2:
                break
            time.sleep(0.1)
        # Read while the worker runs: the other partitions' postings may still be under
        # way when the refund has failed (a SIGTERM then hands them back, to be retried)
        for _ in range(30):
            state = tuple(manage(env, "shell", "-c", ledger).splitlines()[-1].split())
            if state == expected:
                break
            time.sleep(0.5)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    assert state == expected
    logs = [client.xlen(f"redisq:{{ledger#{i}}}:log") for i in range(4)]
    assert sum(logs) == 11 and sum(1 for n in logs if n) >= 2, logs  # spread by customer


def schedule_queues() -> set[str]:
    """The queues the example project's schedules publish to (shop/schedules.py)."""
    tree = ast.parse((EXAMPLE / "shop" / "schedules.py").read_text())
    return {
        kw.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "periodic"
        for kw in node.keywords
        if kw.arg == "queue" and isinstance(kw.value, ast.Constant)
    }


def test_every_worker_the_demo_leaves_running_or_suggests_consumes_the_schedules_queues() -> None:
    # Every runconsumer evaluates the schedules: a worker of the demo that does not consume
    # their queue fills it with ticks nobody handles ("backlog, no instance alive").
    queues = schedule_queues()
    assert queues == {"stock"}
    script = DEMO.read_text()
    # The workers it runs in the background, and the one its last lines suggest
    running = re.findall(r"^\s*\"\$PY\" manage.py runconsumer ([\w .-]+?) --.*&$", script, re.M)
    suggested = re.findall(r"a worker: the same with runconsumer ([\w .-]+)$", script, re.M)
    assert len(running) == 2 and len(suggested) == 1, script  # the schedule's, the traffic's
    for worker in [*running, *suggested]:
        assert queues <= set(worker.split()), f"runconsumer {worker} leaves {queues} alone"
