"""The rows of the peer benchmark: each library in each worker mode, its command line."""

from __future__ import annotations

from dataclasses import dataclass, field

OURS = "ours c=1"
PEER_PACKAGES = ["celery", "kombu", "rq", "dramatiq", "huey", "redis", "hiredis"]


@dataclass(frozen=True)
class Row:
    """One library in one worker mode.

    ``worker`` is the command line, with ``{bin}`` (the peers' venv's bin directory),
    ``{py}`` (our interpreter), ``{url}`` and ``{dir}`` (bench/peers) filled in.
    """

    key: str
    module: str
    worker: tuple[str, ...] = ()
    ours: bool = False
    #: At most this many jobs (RQ's fork per job drains at a few hundred a second).
    max_jobs: int | None = None
    #: A bulk-enqueue row: no worker, the driver's ``bulk`` command.
    bulk: bool = False
    note: str = field(default="", compare=False)


_OURS_CMD = ("{py}", "-m", "django", "runconsumer", "peers", "--settings", "peersproject")
ROWS = [
    Row(
        "celery solo",
        "peer_celery",
        ("{bin}/celery", "-A", "peer_celery", "worker", "--pool", "solo", "-c", "1"),
        note="Celery 5, pool solo (the job runs in the worker process)",
    ),
    Row(
        "celery prefork c=1",
        "peer_celery",
        ("{bin}/celery", "-A", "peer_celery", "worker", "--pool", "prefork", "-c", "1"),
        note="Celery's default pool, one child process",
    ),
    Row(
        "rq fork",
        "peer_rq",
        ("{bin}/rq", "worker", "-u", "{url}", "-P", "{dir}", "--logging_level", "WARNING", "peers"),
        max_jobs=500,
        note="rq worker: a work horse forked per job (RQ's default); at most 500 jobs "
        "(it drains tens a second)",
    ),
    Row(
        "rq simple",
        "peer_rq",
        (
            "{bin}/rq",
            "worker",
            "-u",
            "{url}",
            "-P",
            "{dir}",
            "--logging_level",
            "WARNING",
            "--worker-class",
            "rq.worker.SimpleWorker",
            "peers",
        ),
        note="SimpleWorker: jobs run in the worker process, no fork",
    ),
    Row(
        "dramatiq t=1",
        "peer_dramatiq",
        ("{bin}/dramatiq", "peer_dramatiq", "--processes", "1", "--threads", "1", "-P", "{dir}"),
        note="one worker process (under Dramatiq's supervisor), one thread",
    ),
    Row(
        "dramatiq t=8",
        "peer_dramatiq",
        ("{bin}/dramatiq", "peer_dramatiq", "--processes", "1", "-P", "{dir}"),
        note="one worker process, its default 8 threads",
    ),
    Row(
        "huey",
        "peer_huey",
        ("{bin}/huey_consumer", "peer_huey.huey", "-w", "1", "-k", "thread", "-q"),
        note="huey_consumer -w 1 -k thread (RedisHuey, blocking reads)",
    ),
    Row(OURS, "peer_ours", (*_OURS_CMD, "--concurrency", "1"), ours=True),
    Row("ours c=8", "peer_ours", (*_OURS_CMD, "--concurrency", "8"), ours=True),
    Row(
        "ours processes=2",
        "peer_ours",
        (*_OURS_CMD, "--concurrency", "1", "--processes", "2"),
        ours=True,
        note="two worker processes under the supervisor (not one process: for scale)",
    ),
    Row(
        "ours batch-ack", "peer_ours", (*_OURS_CMD, "--concurrency", "1", "--batch-ack"), ours=True
    ),
    Row("bulk rq", "peer_rq", bulk=True, note="Queue.enqueue_many, 1,000 per call"),
    Row("bulk ours", "peer_ours", ours=True, bulk=True, note="publish_many, 1,000 per call"),
]
