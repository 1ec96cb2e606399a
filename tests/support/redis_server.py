"""Real ``redis-server`` processes for the test suite.

The tests never talk to a shared Redis: every server here is a private
subprocess bound to 127.0.0.1 on a free port, with its data in a temporary
directory, and it is stopped by the fixture that started it.

Binary discovery (see :func:`find_redis_server` / :func:`find_redis_cli`):

* ``REDISQ_TEST_REDIS_SERVER``, else ``redis-server`` on ``PATH``;
* ``REDISQ_TEST_REDIS_CLI``, else the ``redis-cli`` next to the chosen server,
  else ``redis-cli`` on ``PATH``.

``make test`` sets these variables (see ``.ci/ensure-redis.sh``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

HOST = "127.0.0.1"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
CLUSTER_TIMEOUT = 20.0
PORT_ATTEMPTS = 5

SERVER_ENV = "REDISQ_TEST_REDIS_SERVER"
CLI_ENV = "REDISQ_TEST_REDIS_CLI"


class RedisServerError(RuntimeError):
    """A redis-server (or cluster) could not be started."""


class _PortInUseError(RedisServerError):
    """The chosen port was taken between picking it and redis binding it."""


# ---------------------------------------------------------------------------
# Binary discovery
# ---------------------------------------------------------------------------


def _executable(path: str | os.PathLike[str]) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_redis_server() -> str | None:
    """Path of the redis-server to use, or None when there is none."""
    env = os.environ.get(SERVER_ENV)
    if env:
        return env if _executable(env) else None
    return shutil.which("redis-server")


def find_redis_cli(server_binary: str | None) -> str | None:
    """Path of the redis-cli to use, or None when there is none."""
    env = os.environ.get(CLI_ENV)
    if env:
        return env if _executable(env) else None
    if server_binary:
        sibling = Path(server_binary).resolve().parent / "redis-cli"
        if _executable(sibling):
            return str(sibling)
    return shutil.which("redis-cli")


# ---------------------------------------------------------------------------
# Ports and process helpers
# ---------------------------------------------------------------------------


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A port on 127.0.0.1 that is free right now.

    With ``cluster_bus`` the port + 10000 (Redis Cluster's bus port) must be
    free too, so the port is drawn below the kernel's ephemeral range.
    """
    if not cluster_bus:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
            return port
    for _ in range(200):
        port = random.randint(20000, 29999)
        if _port_is_free(port) and _port_is_free(port + 10000):
            return port
    raise RedisServerError("could not find a free port pair for a cluster node")


def _parse_args(args: Iterable[str]) -> dict[str, list[str]]:
    """Split ``["--name", "v1", "v2", "--other", ...]`` into {name: [values]}."""
    parsed: dict[str, list[str]] = {}
    current: str | None = None
    for arg in args:
        if arg.startswith("--"):
            current = arg[2:]
            parsed[current] = []
        elif current is None:
            raise ValueError(f"redis-server argument {arg!r} does not follow an --option")
        else:
            parsed[current].append(arg)
    return parsed


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGKILL the child if the test runner dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)

    return preexec


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


# ---------------------------------------------------------------------------
# A single server
# ---------------------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` subprocess on 127.0.0.1."""

    def __init__(
        self,
        binary: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        port: int | None = None,
        extra_args: Sequence[str] = (),
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.binary = os.fspath(binary)
        #: How long a start waits for PING (a data set slowed to load on purpose needs
        #: more than the default on a loaded machine).
        self.start_timeout = start_timeout
        self.workdir = Path(workdir)
        self.extra_args = tuple(extra_args)
        self._fixed_port = port
        self._port: int | None = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._version: tuple[int, ...] | None = None
        self._cluster_bus = "cluster-enabled" in _parse_args(self.extra_args)

    # -- properties --------------------------------------------------------

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        if self._port is None:
            raise RedisServerError("server has not been started yet")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def logfile(self) -> Path:
        return self.workdir / "redis-server.log"

    @property
    def stdout_file(self) -> Path:
        return self.workdir / "redis-server.stdout"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def version(self) -> tuple[int, ...]:
        """The server's version, e.g. ``(7, 0, 15)``, from ``INFO server``."""
        if self._version is None:
            with self.client() as conn:
                info = conn.info("server")
            self._version = tuple(int(part) for part in str(info["redis_version"]).split("."))
        return self._version

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` connected to this server (caller closes it)."""
        return redis.Redis(host=HOST, port=self.port, **kwargs)

    # -- lifecycle ---------------------------------------------------------

    def _command(self, port: int) -> list[str]:
        options: dict[str, list[str]] = {
            "bind": [HOST],
            "port": [str(port)],
            "dir": [str(self.workdir)],
            "save": [""],
            "appendonly": ["no"],
            "protected-mode": ["no"],
            "daemonize": ["no"],
            "logfile": [str(self.logfile)],
        }
        options.update(_parse_args(self.extra_args))
        cmd = [self.binary]
        for name, values in options.items():
            cmd.append(f"--{name}")
            cmd.extend(values)
        return cmd

    def start(self) -> RedisServer:
        """Start the server and wait (bounded) until it answers PING."""
        if self.running:
            raise RedisServerError(f"server on port {self._port} is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self._fixed_port is not None else PORT_ATTEMPTS
        last_error: RedisServerError | None = None
        for _ in range(attempts):
            port = (
                self._fixed_port
                if self._fixed_port is not None
                else free_port(cluster_bus=self._cluster_bus)
            )
            try:
                self._spawn(port)
                return self
            except _PortInUseError as exc:  # lost a race for the port: try another
                last_error = exc
        assert last_error is not None
        raise last_error

    def _spawn(self, port: int) -> None:
        # Fresh log for this start, so errors show only this attempt's lines.
        self.logfile.unlink(missing_ok=True)
        with self.stdout_file.open("ab") as out:
            proc = subprocess.Popen(
                self._command(port),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent(),
            )
        self._proc = proc
        self._port = port
        self._version = None
        try:
            self._wait_ready(proc, port)
        except BaseException:
            self._terminate(proc)
            self._proc = None
            if self._fixed_port is None:
                self._port = None
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> None:
        deadline = time.monotonic() + self.start_timeout
        last_exc: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = _tail(self.logfile) + "\n" + _tail(self.stdout_file, 10)
                if "Address already in use" in log and self._fixed_port is None:
                    raise _PortInUseError(f"port {port} was taken:\n{log}")
                raise RedisServerError(
                    f"redis-server exited with code {proc.returncode} while starting "
                    f"on port {port}:\n{log}"
                )
            conn = redis.Redis(host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1)
            try:
                if conn.ping():
                    return
            except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                last_exc = exc
            finally:
                conn.close()
            time.sleep(0.05)
        raise RedisServerError(
            f"redis-server on port {port} did not answer PING within {self.start_timeout:.0f}s "
            f"(last error: {last_exc!r}); log tail:\n{_tail(self.logfile)}"
        )

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        else:
            proc.wait()

    def stop(self) -> None:
        """SIGTERM, wait up to 10 s, then SIGKILL.  Safe to call twice."""
        if self._proc is not None:
            self.thaw()  # a frozen process would not answer SIGTERM
            self._terminate(self._proc)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL at once (simulates a crash: no shutdown save/fsync)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
            self._proc.wait()
            self._proc = None

    def freeze(self) -> None:
        """SIGSTOP: the process stops answering (and replicating) until :meth:`thaw`."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze` (harmless on a running process)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)

    def role(self) -> str:
        """``master`` or ``slave``, from ``INFO replication``."""
        with self.client(socket_timeout=2) as conn:
            return str(conn.info("replication")["role"])

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port and workdir."""
        port = self._port
        self.stop()
        if port is not None:
            self._fixed_port = port
        return self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {HOST}:{self._port} {state} {self.binary}>"


# ---------------------------------------------------------------------------
# Replicas
# ---------------------------------------------------------------------------


def link_up(replica: RedisServer) -> bool:
    """Whether ``replica`` has finished its sync with its master."""
    try:
        with replica.client(socket_timeout=2) as conn:
            info = conn.info("replication")
    except redis.RedisError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"


def wait_link_up(replicas: Iterable[RedisServer], what: str) -> None:
    """Wait (bounded) until every replica of ``replicas`` finished its sync."""
    pending = list(replicas)
    deadline = time.monotonic() + CLUSTER_TIMEOUT
    while pending:
        pending = [r for r in pending if not link_up(r)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RedisServerError(
                f"{what}: replica(s) did not sync within {CLUSTER_TIMEOUT:.0f}s:\n"
                + "\n".join(f"{r!r}:\n{_tail(r.logfile, 10)}" for r in pending)
            )
        time.sleep(0.1)


def start_replica(
    binary: str | os.PathLike[str], workdir: str | os.PathLike[str], master: RedisServer
) -> RedisServer:
    """A replica of ``master`` (no persistence, as the master), synced when returned."""
    replica = RedisServer(binary, workdir, extra_args=("--replicaof", HOST, str(master.port)))
    replica.start()
    try:
        wait_link_up([replica], f"replica of {master!r}")
    except BaseException:
        replica.stop()
        raise
    return replica


def replicated(master: redis.Redis, key: str, replicas: int = 1, timeout_ms: int = 10_000) -> None:
    """Wait until ``replicas`` replicas of ``master`` have every write made so far: a write
    of ``key`` (a key of the master's own slots, on a cluster node), then ``WAIT`` on the
    same connection, whose offset is then past everything the master had."""
    with master.pipeline(transaction=False) as pipe:
        pipe.incr(key)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        _, confirmed = pipe.execute()
    if int(confirmed) < replicas:
        raise RedisServerError(f"only {confirmed} of {replicas} replica(s) confirmed in time")


# ---------------------------------------------------------------------------
# A Redis Cluster: masters, and replicas if asked
# ---------------------------------------------------------------------------


class RedisClusterHandle:
    """Nodes of a running Redis Cluster started by :func:`start_cluster`."""

    def __init__(self, nodes: list[RedisServer]) -> None:
        self.nodes = nodes

    def node_at(self, port: int) -> RedisServer:
        """The node listening on ``port``."""
        (node,) = [n for n in self.nodes if n.port == port]
        return node

    def master_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now (asked to a live node)."""
        with self.client() as client:
            return self.node_at(client.get_node_from_key(key).port)

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        """The live nodes that replicate ``master`` now."""
        found = []
        for node in self.nodes:
            if node is master or not node.running:
                continue
            with contextlib.suppress(redis.RedisError), node.client(socket_timeout=2) as conn:
                info = conn.info("replication")
                if info.get("role") == "slave" and int(info["master_port"]) == master.port:
                    found.append(node)
        return found

    def take_over(self, replica: RedisServer) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica`` (its master may be dead), then wait
        (bounded) until it is a master and every live node says ``cluster_state:ok``."""
        with replica.client(socket_timeout=5) as conn:
            conn.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        deadline = time.monotonic() + CLUSTER_TIMEOUT
        live = [n for n in self.nodes if n.running]
        while not (replica.role() == "master" and all(_cluster_state_ok(n) for n in live)):
            if time.monotonic() > deadline:
                raise RedisServerError(
                    f"{replica!r} did not take over within {CLUSTER_TIMEOUT:.0f}s:\n"
                    + _tail(replica.logfile, 15)
                )
            time.sleep(0.1)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new ``RedisCluster`` client (caller closes it)."""
        nodes = [
            ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in self.startup_nodes
        ]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def flushall(self) -> None:
        for node in self.nodes:
            with node.client() as conn:
                if conn.info("replication")["role"] == "master":  # replicas follow
                    conn.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _cluster_state_ok(node: RedisServer) -> bool:
    try:
        with node.client(socket_timeout=2) as conn:
            info = conn.execute_command("CLUSTER", "INFO")
    except redis.RedisError:
        return False
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


def start_cluster(
    binary: str | os.PathLike[str],
    cli_binary: str | os.PathLike[str],
    workdir: str | os.PathLike[str],
    masters: int = 3,
    replicas: int = 0,
) -> RedisClusterHandle:
    """Start ``masters`` cluster-enabled servers, each with ``replicas`` replicas, and
    join them into one cluster (returned once every replica has synced)."""
    root = Path(workdir)
    nodes: list[RedisServer] = []
    try:
        for index in range(masters * (1 + replicas)):
            node = RedisServer(
                binary,
                root / f"node{index}",
                extra_args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ),
            )
            nodes.append(node)
            node.start()
        cmd = [
            os.fspath(cli_binary),
            "--cluster",
            "create",
            *(f"{node.host}:{node.port}" for node in nodes),
            "--cluster-replicas",
            str(replicas),
            "--cluster-yes",
        ]
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLUSTER_TIMEOUT * 2,
            check=False,
        )
        if result.returncode != 0:
            raise RedisServerError(
                f"{' '.join(cmd)} failed with code {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        deadline = time.monotonic() + CLUSTER_TIMEOUT
        while not all(_cluster_state_ok(node) for node in nodes):
            if time.monotonic() > deadline:
                raise RedisServerError(
                    f"cluster did not reach cluster_state:ok within {CLUSTER_TIMEOUT:.0f}s:\n"
                    + "\n".join(f"{node!r}:\n{_tail(node.logfile, 10)}" for node in nodes)
                )
            time.sleep(0.1)
        if replicas:
            wait_link_up([n for n in nodes if n.role() != "master"], "cluster")
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return RedisClusterHandle(nodes)
