"""Django tasks across languages (PROTOCOL.md, "Django task results", issue 19): a client
of another language — raw redis-py commands and the shipped ``.lua`` files read from
disk, nothing of our code — enqueues a task that our worker runs, and runs tasks our
backend enqueued, settling them with ``task_start.lua`` and ``task_settle.lua``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends

import redisq_django.core.scripts as shipped
from tests.tasks.conftest import TasksEnv, tasks_setting

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPTS_DIR = Path(shipped.__file__).parent
PROTOCOL = "redisq/2"
G = "tasks"
DAY_MS = 86_400_000


@dataclass
class ForeignTasks:
    """A task client of another language on one task queue (its normal level)."""

    client: redis.Redis
    queue: str  # the redisq queue: tasks.<Django queue name>
    shas: dict[str, str] = field(default_factory=dict)

    def key(self, rest: str) -> str:
        return f"redisq:{{{self.queue}}}:{rest}"

    def g(self, rest: str) -> str:
        return self.key(f"g:{G}:{rest}")

    def script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if name not in self.shas:
            self.shas[name] = self.client.script_load((SCRIPTS_DIR / f"{name}.lua").read_text())
        return self.client.evalsha(self.shas[name], len(keys), *keys, PROTOCOL, *args)

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def result(self, rid: str) -> dict[str, str]:
        raw = self.client.hgetall(self.key(f"result:{rid}"))
        return {k.decode(): v.decode() for k, v in raw.items()}

    def fetch(self, stream: str) -> tuple[str, dict[bytes, bytes]]:
        [[_, [(entry_id, fields)]]] = self.client.xreadgroup(G, "node-1", {stream: ">"}, count=1)
        return entry_id.decode(), fields

    def start(self, rid: str, stream: str, entry_id: str) -> Any:
        tag = ("log:" if stream == self.key("log") else "direct:") + entry_id
        keys = [self.key(f"result:{rid}"), self.key("results"), stream, self.g("leases")]
        return self.script(
            "task_start", keys, [f"+{DAY_MS}", rid, "node-1", self.now_ms(), G, entry_id, tag, 0]
        )

    def settle(
        self,
        rid: str,
        stream: str,
        entry_id: str,
        mode: str,
        due: str,
        result: dict[str, Any],
        error: str = "",
        envelope: tuple[Any, ...] = (),
        event: tuple[Any, ...] | None = None,
    ) -> int:
        # The settle layout's seven keys (PROTOCOL.md, "The settle layout"), then the
        # task's result, the index of results and the leases
        keys = [self.key("log"), *[self.g(k) for k in ("direct", "retry", "dead")],
                self.g("holders"), self.g("held_back"), self.key("events"),
                self.key(f"result:{rid}"), self.key("results"), self.g("leases")]  # fmt: skip
        kind = "direct" if stream == self.g("direct") else "log"
        event = event or ()
        pairs = [x for kv in result.items() for x in kv]
        args = [G, "node-1", "", 1, kind, entry_id, rid, "", len(event) // 2, *event,
                mode, due, f"+{DAY_MS}", rid, error, len(result), *pairs]  # fmt: skip
        return int(self.script("task_settle", keys, [*args, *envelope]))


@pytest.fixture
def foreign(redis_client: redis.Redis, tasks_env: TasksEnv) -> ForeignTasks:
    return ForeignTasks(redis_client, f"tasks.{tasks_env.queue}")


def test_a_task_enqueued_by_another_language_is_run_by_our_worker(
    tasks_env: TasksEnv, foreign: ForeignTasks
) -> None:
    # Given a task enqueued as PROTOCOL.md says: the consumer `tasks` registered from the
    # start, then task_enqueue.lua with the twelve result fields and the payload
    rid = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    now = foreign.now_ms()
    payload = {
        "task": "tests.tasks.sample_tasks.calculate", "args": [2, 3], "kwargs": {"scale": 10},
        "backend": "default", "queue_name": tasks_env.queue, "priority": 0, "run_after": None,
        "takes_context": False, "enqueued_at": now, "retry": {"max_retries": 1},
        "visibility_timeout": None,
    }  # fmt: skip
    result = {
        "task": payload["task"], "backend": "default", "queue_name": tasks_env.queue,
        "priority": "0", "run_after": "", "takes_context": "0", "args": "[2, 3]",
        "kwargs": '{"scale": 10}', "status": "READY", "enqueued_at": str(now),
        "errors": "[]", "worker_ids": "[]",
    }  # fmt: skip
    foreign.script(
        "ensure_consumer",
        [foreign.key("meta"), foreign.key("log"), foreign.g("direct")],
        [1, G, "0-0"],
    )
    foreign.client.sadd("redisq:queues", foreign.queue)
    keys = [foreign.key(f"result:{rid}"), foreign.key("results"), foreign.key("log"),
            foreign.key("delayed")]  # fmt: skip
    pairs = [x for kv in result.items() for x in kv]
    entry = foreign.script(
        "task_enqueue",
        keys,
        [f"+{DAY_MS}", rid, "publish", 0, "", "", len(result), *pairs,
         "payload", json.dumps(payload), "id", rid],
    )  # fmt: skip
    assert entry
    # Then Django sees it READY, with what the foreign client wrote
    backend = task_backends["default"]
    ready = backend.get_result(rid)
    assert (ready.status, ready.args, ready.kwargs) == (
        TaskResultStatus.READY,
        [2, 3],
        {"scale": 10},
    )
    # When our worker runs
    tasks_env.run_worker()
    # Then the task ran, and its result is SUCCESSFUL with the return value
    done = backend.get_result(rid)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"sum": 50, "items": [2, 3]}
    assert done.enqueued_at is not None and int(done.enqueued_at.timestamp() * 1000) == now
    assert len(done.worker_ids) == 1 and done.errors == []
    # And it expires a day after its last change, by Redis's clock
    assert 0 < foreign.client.pttl(foreign.key(f"result:{rid}")) <= DAY_MS


def test_tasks_enqueued_by_our_backend_are_settled_by_another_language(
    tasks_env: TasksEnv, foreign: ForeignTasks, settings: Any
) -> None:
    # Given history on, a backend retrying a failed task once, and two tasks it enqueued
    settings.REDISQ = {**settings.REDISQ, "HISTORY": True}
    settings.TASKS = tasks_setting(tasks_env.queue, MAX_RETRIES=1)
    ok = tasks_env.task("calculate").enqueue(1, 2)
    bad = tasks_env.task("failing").enqueue("no")
    log = foreign.key("log")

    # When the foreign client takes the first, starts it, runs it and acks it
    entry_id, fields = foreign.fetch(log)
    assert fields[b"id"].decode() == ok.id
    job = json.loads(fields[b"payload"])
    assert job["task"] == "tests.tasks.sample_tasks.calculate" and job["args"] == [1, 2]
    assert "max_retries" in job["retry"]
    workers, errors, started = foreign.start(ok.id, log, entry_id)
    assert (json.loads(workers), json.loads(errors)) == (["node-1"], [])
    assert int(started) > 0  # ms, the foreign client's clock
    value = {"sum": sum(job["args"]), "items": job["args"]}
    finished = foreign.now_ms()
    done = {"status": "SUCCESSFUL", "finished_at": finished, "return_value": json.dumps(value)}
    handled = ("e", "handled", "g", G, "c", "node-1", "m", f'[["{ok.id}",1,4]]')
    # The 7th argument of an ack: "" (ignored)
    assert foreign.settle(ok.id, log, entry_id, "ack", "", done, event=handled) == 1
    # Then Django reads it SUCCESSFUL, run by node-1
    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL
    assert (ok.return_value, ok.worker_ids) == (value, ["node-1"])
    assert foreign.client.xpending(log, G)["pending"] == 0

    # When the second one fails on its first attempt: a retry, as its budget allows one
    entry_id, fields = foreign.fetch(log)
    job = json.loads(fields[b"payload"])
    assert job["retry"] == {"max_retries": 1}
    attempt = int(fields.get(b"attempts", b"0")) + 1
    assert attempt < job["retry"]["max_retries"] + 1
    foreign.start(bad.id, log, entry_id)
    error = json.dumps({"exception_class_path": "builtins.TypeError", "traceback": "at x.js:1"})
    published = entry_id.split("-")[0]
    retry_member = ("payload", fields[b"payload"], "id", bad.id, "published_at", published,
                    "attempts", 1, "first_failed_at", foreign.now_ms())  # fmt: skip
    retried = ("e", "retried", "g", G, "c", "node-1", "m", f'[["{bad.id}",1,2]]',
               "error_class", "builtins.TypeError", "error_message", "no")  # fmt: skip
    before = foreign.now_ms()
    settled = foreign.settle(bad.id, log, entry_id, "retry", "+50", {"status": "READY"}, error,
                             retry_member, retried)  # fmt: skip
    after = foreign.now_ms()
    assert settled == 1
    # Then the result is READY with one error, and the retried event's next_due is the
    # retry's due time by Redis's clock, written by the script
    bad.refresh()
    assert (bad.status, [e.exception_class_path for e in bad.errors]) == (
        TaskResultStatus.READY, ["builtins.TypeError"],
    )  # fmt: skip
    [(_, due)] = foreign.client.zrange(foreign.g("retry"), 0, -1, withscores=True)
    assert before + 50 <= due <= after + 50
    events = foreign_events(foreign)
    assert [e["e"] for e in events] == ["handled", "retried"]
    assert int(events[1]["next_due"]) == due

    # When it comes due, the foreign client promotes, starts and dead-letters it
    promote = [foreign.key("delayed"), log, foreign.g("retry"), foreign.g("direct")]
    moved = [0, 0]
    for _ in range(100):  # bounded: due 50 ms after the failure
        moved = foreign.script("promote", promote, ["", 10])[:2]
        if moved != [0, 0]:
            break
        time.sleep(0.02)
    assert moved == [0, 1]
    direct = foreign.g("direct")
    entry_id, fields = foreign.fetch(direct)
    attempt = int(fields[b"attempts"]) + 1
    assert attempt == job["retry"]["max_retries"] + 1  # the last one
    foreign.start(bad.id, direct, entry_id)
    now = foreign.now_ms()
    dead_letter = ("payload", fields[b"payload"], "id", bad.id, "published_at", published,
                   "attempts", 2, "first_failed_at", fields[b"first_failed_at"],
                   "last_failed_at", now, "reason", "failed", "error_class",
                   "builtins.TypeError", "error_message", "no", "traceback", "at x.js:1",
                   "group", G)  # fmt: skip
    failed = {"status": "FAILED", "finished_at": now}
    died = ("e", "dead", "g", G, "c", "node-1", "m", f'[["{bad.id}",2,3]]', "error_class",
            "builtins.TypeError", "error_message", "no", "reason", "failed")  # fmt: skip
    settled = foreign.settle(bad.id, direct, entry_id, "dead", "", failed, error, dead_letter, died)
    assert settled == 1
    # Then Django reads it FAILED after two attempts by node-1, and it is a dead letter
    bad.refresh()
    assert bad.status == TaskResultStatus.FAILED
    assert (len(bad.errors), bad.worker_ids) == (2, ["node-1", "node-1"])
    [(_, dead)] = foreign.client.xrange(foreign.g("dead"))
    assert (dead[b"id"].decode(), dead[b"reason"], dead[b"attempts"]) == (bad.id, b"failed", b"2")
    assert foreign.client.xlen(direct) == 0
    assert [e["e"] for e in foreign_events(foreign)] == ["handled", "retried", "dead"]


def foreign_events(foreign: ForeignTasks) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode() for k, v in f.items()}
        for _, f in foreign.client.xrange(foreign.key("events"))
    ]
