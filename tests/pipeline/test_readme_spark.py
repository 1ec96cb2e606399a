"""Every command of the README's "History on Spark" section runs as written against the
demo's data: the example project's orders (``example_project/shop/demo_data.py``, what
``make demo`` creates) on past days and today, with their lifecycle events, archived.

Each shell command is one test, in the README's order; its paths and Redis URL are the
test's (``/var/lib/redisq/`` and ``redis://127.0.0.1:6379/0`` are replaced), and
``manage.py`` is the example project's. A command passes when it exits 0 and did what
it says: files written, rows replayed, every message still read once. Blocks marked
``readme-test: skip: REASON`` are reported as skipped with that reason.

The ``python`` commands run one after the other in one process of the example project
with one Spark session (``tests/support/command_runner.py``): a process each took ~13
cold JVM starts of CI's time. What only a process of its own shows runs in one: the
continuous archive stopped by SIGTERM (``manage.py``), ``spark-submit``, the
``manage.py`` compaction (of an archive of its own, which ``manage.py`` reads from the
settings: not the runner's), and a cold ``python -m redisq_django.pipeline`` command's
output (``test_a_where_that_fails_on_the_data_says_so_in_one_line_and_publishes_nothing``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline import archive_dataset, archive_files
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.files import current_log_files
from redisq_django.pipeline.options import ArchiveOptions
from tests.support.command_runner import CommandRunner
from tests.support.readme import DOCS, Block, blocks, section, shell_commands
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example_project"
README_URL = "redis://127.0.0.1:6379/0"
README_VAR = "/var/lib/redisq/"
QUEUE = "orders"
#: Past days with the demo's orders (the README's examples select among them).
PAST_DAYS = [
    dt.date(2026, 10, 1),
    dt.date(2026, 10, 15),
    *(dt.date(2026, 11, d) for d in (1, 2, 5)),
]
#: Longest a README command may take (seconds).
COMMAND_TIMEOUT = 300


def _demo_data() -> Any:
    spec = importlib.util.spec_from_file_location("demo_data", EXAMPLE / "shop" / "demo_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo_data = _demo_data()


@dataclasses.dataclass
class Demo:
    """The demo's Redis and archive, as the README's commands see them."""

    url: str
    var: Path  # stands for /var/lib/redisq/
    broker: Broker
    orders: int = 0  # orders written so far (their numbers)

    @property
    def root(self) -> Path:
        return self.var / "archive"

    def write_orders(self, day: dt.date | None) -> None:
        """The demo's orders (one per total) and what its consumers did with them:
        billing and email handle each, the fraud check retries those over the limit
        and dead-letters them after its last attempt. ``day``: at 09:00 UTC that day
        (explicit entry ids); None: now."""
        client, keys = self.broker.client, self.broker.keys(QUEUE)
        nine = None if day is None else dt.datetime(day.year, day.month, day.day, 9, tzinfo=dt.UTC)
        base = None if nine is None else int(nine.timestamp()) * 1000
        for i, total in enumerate(demo_data.TOTALS):
            self.orders += 1
            envelope = self.broker.prepare(QUEUE, demo_data.order_payload(self.orders, total))
            at = "*" if base is None else f"{base + i * 1000}-0"
            entry = client.execute_command("XADD", keys.log, at, *envelope.fields()).decode()
            events = [("billing", 1, "handled"), ("email", 1, "handled")]
            if float(total) > demo_data.FRAUD_LIMIT:
                attempts = demo_data.FRAUD_ATTEMPTS
                events += [("fraud-check", n, "retried") for n in range(1, attempts)]
                events.append(("fraud-check", attempts, "dead"))
            else:
                events.append(("fraud-check", 1, "handled"))
            for k, (consumer, attempt, kind) in enumerate(events, start=1):
                fields = {
                    "e": kind,
                    "g": consumer,
                    "c": "web-1:1:ab",
                    "m": json.dumps([[entry, attempt, 12]]),
                }
                if kind != "handled":
                    fields |= {"error_class": "SuspiciousOrder", "error_message": "over the limit"}
                fields |= {"reason": "failed"} if kind == "dead" else {}
                event_at = "*" if base is None else f"{base + i * 1000 + k * 10}-0"
                client.xadd(keys.events, fields, id=event_at)

    def messages(self) -> int:
        return int(self.broker.client.xlen(self.broker.keys(QUEUE).log))


@pytest.fixture(scope="module")
def demo(
    spark: SparkSession, redis_server_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Demo]:
    """The demo's orders on PAST_DAYS and today, archived, in a Redis of their own (the
    README names the queue "orders")."""
    server = RedisServer(redis_server_binary, tmp_path_factory.mktemp("redis-readme")).start()
    client = server.client(decode_responses=False)
    made = Demo(server.url, tmp_path_factory.mktemp("var-lib-redisq"), Broker(client, CoreConfig()))
    try:
        for consumer in demo_data.CONSUMERS:
            made.broker.consumers.ensure(QUEUE, consumer)
        for day in PAST_DAYS:
            made.write_orders(day)
        made.write_orders(None)
        archive(spark, ArchiveOptions(redis_url=made.url, root=str(made.root)))
        # The example project's database, as the quick start leaves it (manage.py redisq).
        _run([sys.executable, "manage.py", "migrate", "--noinput"], EXAMPLE, _env(made, made.var))
        yield made
    finally:
        client.close()
        server.stop()


@pytest.fixture(scope="module")
def runner(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CommandRunner]:
    log = tmp_path_factory.mktemp("readme-runner") / "stderr"
    made = CommandRunner(EXAMPLE, _env(demo, demo.var), log, spark=True, timeout=COMMAND_TIMEOUT)
    try:
        yield made
    finally:
        made.stop()


def _cases() -> list[Any]:
    body, first = section("History on Spark", path=DOCS / "howto" / "history.md")
    cases = []
    for block in blocks(body, first):
        if block.lang == "sh":
            for n, command in enumerate(shell_commands(block.code)):
                case = pytest.param(block, command, id=f"L{block.line}-{_job(command)}-{n}")
                cases.append(_marked(case, block))
        elif block.lang == "python" and block.mark is not None:
            cases.append(_marked(pytest.param(block, None, id=f"L{block.line}-python"), block))
    return cases


def _marked(case: Any, block: Block) -> Any:
    if block.skip_reason:
        return pytest.param(
            *case.values, id=case.id, marks=pytest.mark.skip(reason=block.skip_reason)
        )
    return case


def _job(command: str) -> str:
    words = shlex.split(command)
    for anchor in (
        "redisq_pipeline",
        "redisq_django.pipeline",
        "redisq_django/pipeline/__main__.py",
        "redisq",  # manage.py redisq archives
    ):
        if anchor in words and words.index(anchor) + 1 < len(words):
            return words[words.index(anchor) + 1]
    return words[0]


def _env(demo: Demo, var: Path) -> dict[str, str]:
    import pyspark

    env = {
        **os.environ,
        "REDISQ_URL": demo.url,
        "EXAMPLE_ARCHIVE": str(var / "archive"),
        "EXAMPLE_DB": str(var / "db.sqlite3"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "PYTHONPATH": str(REPO),  # this checkout's redisq_django, also for manage.py
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _argv(command: str, var: Path) -> tuple[list[str], Path]:
    """The command's words with the test's URL and paths, and its working directory."""
    words = shlex.split(command)
    cwd = REPO
    if words[0] == "python":
        words[0] = sys.executable
        if words[1] == "manage.py":
            cwd = EXAMPLE
    elif words[0] == "spark-submit":
        import pyspark

        words[0] = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    return [_substitute(w, var) for w in words], cwd


def _substitute(text: str, var: Path) -> str:
    return text.replace(README_VAR, f"{var}/")


def _read_once(root: Path) -> tuple[int, int]:
    """(rows, distinct message ids) of the archived messages, read with pyarrow."""
    ids = archive_dataset(str(root), "messages").to_table(columns=["message_id"])["message_id"]
    return len(ids), len(set(ids.to_pylist()))


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT
    )
    assert done.returncode == 0, (
        f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    return done


def _run_continuous(argv: list[str], cwd: Path, env: dict[str, str], root: Path) -> str:
    """Run a continuous archive until it has committed a micro-batch, then stop it with
    SIGTERM, as a service manager would; its output."""
    log = root / "messages" / "_spark_metadata"
    before = max((f.batch for f in current_log_files(os.listdir(log))), default=-1)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while max((f.batch for f in current_log_files(os.listdir(log))), default=-1) <= before:
            assert proc.poll() is None, f"it exited {proc.returncode}: {proc.stderr.read()[-3000:]}"  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)  # what it said, for the failure message
                pytest.fail(f"no micro-batch committed: {proc.communicate(timeout=30)[1][-3000:]}")
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # its pipes closed: no warning in a later test
    assert proc.returncode == 0, err[-3000:]
    return out


@pytest.mark.parametrize(("block", "command"), _cases())
def test_readme_history_on_spark(
    block: Block,
    command: str | None,
    demo: Demo,
    runner: CommandRunner,
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if command is None:  # a Python block: run it against the demo's archive
        code = _substitute(block.code, demo.var)
        exec(compile(code, f"README.md:{block.line}", "exec"), {"spark": spark})  # our README
        assert capsys.readouterr().out.strip(), "the block printed nothing"
        return
    job = _job(command)
    var = demo.var
    if job == "compact":  # each compaction on an archive of its own: each has work to do
        var = tmp_path / "var-lib-redisq"
        # An archive of its own name (the demo's "default" is past every entry), in
        # micro-batches of 20 rows that split some days' orders over several files, as a
        # history archived through the day has them. Compaction takes a partition once
        # one log file names all its files: the sink gathers its log every 3rd batch here
        # (every 10th by default, which took 10 micro-batches of this test's time).
        options = ArchiveOptions(
            redis_url=demo.url,
            root=str(var / "archive"),
            name=f"compact-{tmp_path.name}",
            max_records_per_trigger=20,
        )
        interval = "spark.sql.streaming.fileSink.log.compactInterval"
        spark.conf.set(interval, "3")
        try:
            archive(spark, options)
        finally:
            spark.conf.unset(interval)
    argv, cwd = _argv(command.replace(README_URL, demo.url), var)
    env = _env(demo, var)
    if job == "archive":
        demo.write_orders(None)  # new orders for this run to archive
    if job == "archives" and "remove" in argv:  # an archive of that name to remove
        removed = argv[argv.index("remove") + 1]
        demo.broker.archives.register(QUEUE, removed, "messages")
    if job == "archive" and "--trigger" in argv:
        out = _run_continuous(argv, cwd, env, var / "archive")
    elif argv[0] == sys.executable and (argv[1] == "-m" or var == demo.var):
        # (manage.py takes the archive from the settings, which the runner read for the
        # demo's; python -m is told it on the command line)
        done = runner.run(argv[1:])
        assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr}"
        out = done.stdout
    else:
        out = _run(argv, cwd, env).stdout
    _check(job, argv, out, demo, var)


def _check(job: str, argv: list[str], out: str, demo: Demo, var: Path) -> None:
    """What the README says the command does, done."""
    root = var / "archive"
    if job == "archive":
        archived = re.search(r"archived messages=(\d+) events=(\d+)", out)
        assert archived and int(archived[1]) >= len(demo_data.TOTALS), out
        assert _read_once(root) == (demo.messages(), demo.messages())
    elif job == "report":
        made = re.search(r"published=(\d+) .* -> (\S+report\.html)$", out.strip())
        assert made and int(made[1]) > 0 and Path(made[2]).stat().st_size > 0, out
        assert Path(made[2]).is_relative_to(var)
    elif job == "replay":
        if "--dry-run" in argv:
            selected = re.search(r"replay dry run: selected=(\d+)", out)
            assert selected and int(selected[1]) > 0, out
            return
        replayed = re.search(r"replayed selected=(\d+) published=(\d+)", out)
        assert replayed and int(replayed[1]) == int(replayed[2]) > 0, out
        if "--consumer" in argv:
            target = demo.broker.keys(QUEUE).group(argv[argv.index("--consumer") + 1]).direct
            assert demo.broker.client.xlen(target) >= int(replayed[1])
    elif job == "compact":
        compacted = re.search(r"compacted messages: (\d+) directories, files (\d+) -> (\d+)", out)
        assert compacted and int(compacted[1]) > 0 and int(compacted[3]) <= int(compacted[2]), out
        assert _read_once(root) == (demo.messages(), demo.messages())
    elif job == "archives":
        positions = demo.broker.archives.positions
        if "remove" in argv:
            removed = argv[argv.index("remove") + 1]
            assert f"Removed archive {removed!r} from {QUEUE}" in out, out
            assert positions(QUEUE, removed) == {}
        else:  # the demo's archive, under the job's default name, is listed
            assert re.search(rf"^{QUEUE}\s+default\s+messages\s", out, re.M), out
        assert set(positions(QUEUE, "default")) == {"messages", "events"}
    elif job == "files":
        if "--manifest" in argv:
            manifests = Path(argv[argv.index("--manifest") + 1])
            named = [line for m in manifests.rglob("manifest") for line in m.read_text().split()]
            assert named and all(Path(p).is_file() for p in named), out
            return
        table = argv[argv.index("--table") + 1] if "--table" in argv else "messages"
        listed = out.split()
        assert listed == archive_files(str(root), table) and all(Path(p).is_file() for p in listed)
        assert sum(pq.read_metadata(p).num_rows for p in listed) > 0
    else:
        raise AssertionError(f"the README test does not know what {job!r} should do")


def test_every_command_of_the_section_is_run_or_skipped_with_a_reason() -> None:
    # The section's shell blocks are all taken, and each known job is checked above.
    cases = _cases()
    assert len(cases) >= 12
    jobs = {case.id.split("-")[1] for case in cases if not case.marks}
    assert jobs == {"archive", "archives", "report", "replay", "compact", "files", "python"}
    skipped = [case for case in cases if case.marks]
    assert all(mark.kwargs["reason"] for case in skipped for mark in case.marks)


def test_a_where_that_fails_on_the_data_says_so_in_one_line_and_publishes_nothing(
    demo: Demo,
) -> None:
    # Given the demo's orders, whose totals are JSON strings ("1499.00")
    fraud = demo.broker.keys(QUEUE).group("fraud-check").direct
    before = demo.broker.client.xlen(fraud)
    # When a replay compares them untyped, which Spark 4's ANSI mode refuses
    where = "get_json_object(payload, '$.total') > 1000"
    argv = [sys.executable, "-m", "redisq_django.pipeline", "replay", "--redis-url", demo.url]
    argv += ["--root", str(demo.root), "--queue", QUEUE, "--where", where]
    argv += ["--consumer", "fraud-check", "--master", "local[2]"]
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=_env(demo, demo.var),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    # Then it fails with one line that says why and what to write instead, no log dump
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    failed = [line for line in lines if "failed" in line]
    assert len(failed) == 1 and "'19.90'" in failed[0] and "try_cast(" in failed[0], lines
    assert len(failed[0]) < 400, failed[0]
    dump = [line for line in lines if "ERROR" in line or line.lstrip().startswith(("at ", "{"))]
    assert not dump and len(done.stderr) < 2000, done.stderr[-3000:]  # Spark's start-up lines
    # And nothing was published
    assert demo.broker.client.xlen(fraud) == before


def test_redis_url_placeholder_is_what_the_readme_uses() -> None:
    body, _ = section("History on Spark", path=DOCS / "howto" / "history.md")
    assert README_URL in body and README_VAR in body
