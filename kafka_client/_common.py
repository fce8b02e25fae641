"""What every client class shares: its lifecycle (:class:`ClientBase`: configuration,
I/O thread, cluster, start, close, drop), configuration from keyword arguments, ``debug``
contexts, and calling application callbacks."""
from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence, TypeVar

from kafka_client._cluster.cluster import Cluster
from kafka_client._net.io_thread import IOThread
from kafka_client.config import ClientConfig, describe
from kafka_client.errors import KafkaException

__all__ = ["ClientBase", "make_config", "apply_debug", "call_safely", "serve_errors",
           "stop_client"]

_log = logging.getLogger("kafka_client")

# librdkafka debug contexts -> our loggers (one per component)
DEBUG_LOGGERS = {
    "broker": ("kafka_client.connection", "kafka_client.io"),
    "protocol": ("kafka_client.connection",),
    "metadata": ("kafka_client.metadata", "kafka_client.cluster"),
    "topic": ("kafka_client.metadata",),
    "msg": ("kafka_client.producer", "kafka_client.producer.sender"),
    "queue": ("kafka_client.producer",),
    "eos": ("kafka_client.producer.idempotence", "kafka_client.producer.transactions"),
    "fetch": ("kafka_client.consumer.fetcher",),
    "consumer": ("kafka_client.consumer",),
    "cgrp": ("kafka_client.consumer.group",),
    "generic": ("kafka_client",),
    "all": ("kafka_client",),
}


def make_config(config: Optional[Dict[str, Any]], kwargs: Dict[str, Any],
                role: str) -> ClientConfig:
    """A client's configuration from a dict plus keyword overrides (``linger_ms=5`` is
    ``linger.ms``); raises KafkaException(_INVALID_ARG) naming a bad property."""
    conf = dict(config or {})
    for k, v in kwargs.items():
        conf[_kwarg_name(k)] = v
    return ClientConfig.from_dict(conf, role=role)  # type: ignore[arg-type]


def apply_debug(contexts: Sequence[str]) -> None:
    """``debug=...``: turn on DEBUG logging for the components the contexts name."""
    for ctx in contexts or ():
        for name in DEBUG_LOGGERS.get(ctx, ()):
            logging.getLogger(name).setLevel(logging.DEBUG)


def _kwarg_name(name: str) -> str:
    """A keyword argument's property name: as given if it is one (``log_level``,
    ``on_delivery``), else with underscores as dots (``linger_ms`` -> ``linger.ms``)."""
    try:
        describe(name)
        return name
    except KafkaException:
        return name.replace("_", ".")


def call_safely(cb: Callable, *args: Any) -> None:
    """Run an application callback (error_cb, stats_cb, ...); its exception is logged,
    not raised into the client."""
    try:
        cb(*args)
    except Exception:
        _log.exception("callback %r failed", cb)


def serve_errors(cluster: Any, error_cb: Optional[Callable], log: Any) -> int:
    """Hand the client-level errors the I/O thread collected to ``error_cb`` (or the
    debug log when there is none); returns how many there were."""
    errors = cluster.take_errors()
    for e in errors:
        if error_cb is not None:
            call_safely(error_cb, e)
        else:
            log.debug("client error: %s", e.str())
    return len(errors)


def stop_client(io: Any, cluster: Any, first: Optional[Callable[[], None]] = None,
                grace: float = 2.0) -> None:
    """Close a client's connections on its I/O thread (after ``first()``, run there too),
    letting ready ones close gracefully for up to ``grace`` seconds, then stop the
    thread."""
    done = threading.Event()
    deadline = time.monotonic() + grace

    def stop() -> None:
        if first is not None:
            first()
        closing = cluster.close()

        def check() -> None:
            if all(c.sock is None for c in closing) or time.monotonic() >= deadline:
                for c in closing:
                    c.close(None)
                done.set()
            else:
                io.call_later(0.005, check)

        check()

    if io.alive:
        io.call_soon(stop)
        done.wait(grace + 1)
    io.stop(5)


_Client = TypeVar("_Client", bound="ClientBase")

#: per role, numbers the clients' I/O threads (kafka-producer-1, kafka-consumer-1, ...)
_client_numbers: Dict[str, "itertools.count[int]"] = {}


class ClientBase:
    """The lifecycle Producer and Consumer share: configuration, logger, one I/O thread
    and the cluster it drives; start, close, context manager, and what happens when the
    application drops a client it never closed.

    A subclass calls :meth:`_init_client` first in its ``__init__`` and
    :meth:`_start_client` last, implements ``close()``, and may override
    :meth:`_on_shutdown`. Nothing the I/O thread holds may refer to the client itself
    (no bound methods of it as callbacks or ticks, only of the parts it owns): an
    unclosed client the application lets go of is then garbage at once, and
    ``__del__`` stops its thread and connections.
    """

    _role = "client"            # "producer", "consumer": config role, thread and log names
    _work = "done"              # what nothing will be without brokers ("delivered", ...)
    _closed = True

    def _init_client(self, config: Optional[Dict[str, Any]],
                     kwargs: Dict[str, Any]) -> ClientConfig:
        """Parse the configuration; make the logger, the I/O thread (not started) and
        the cluster."""
        self._closed = True
        self._config = cfg = make_config(config, kwargs, self._role)
        logger = cfg["logger"]
        self._log = logger if logger is not None else \
            logging.getLogger(f"kafka_client.{self._role}")
        number = next(_client_numbers.setdefault(self._role, itertools.count(1)))
        self._io = IOThread(name=f"kafka-{self._role}-{number}")
        self._cluster = Cluster(cfg, self._io)
        self._error_cb: Optional[Callable] = cfg["error_cb"]
        self._stats_cb: Optional[Callable] = cfg["stats_cb"]
        return cfg

    def _start_client(self) -> None:
        """Apply ``debug``, start the I/O thread; the client is open from here."""
        cfg = self._config
        apply_debug(cfg["debug"])
        self._closed = False
        self._io.start()
        if cfg["bootstrap.servers"] is None or not cfg.broker_addresses():
            self._log.warning("No bootstrap.servers configured: nothing will be %s",
                              self._work)

    def close(self) -> Any:  # pragma: no cover - every client defines its own
        raise NotImplementedError

    def _on_shutdown(self) -> Optional[Callable[[], None]]:
        """Application thread, once, as the client shuts down: refuse further use;
        returns what the I/O thread runs before the connections close (or None)."""
        return None

    def _shutdown(self) -> None:
        """Stop the I/O thread and close the connections (once)."""
        if self._closed:
            return
        self._closed = True
        stop_client(self._io, self._cluster, first=self._on_shutdown())

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close(): the thread stops and the connections close, nothing
        # more (no flush, no LeaveGroup, no commit).
        try:
            if self._io.in_thread():
                # Collected on its own I/O thread (a cycle the collector found there):
                # it cannot wait for itself; the loop ends after this turn.
                self._closed = True
                self._io.stop(0)
            else:
                self._shutdown()
        except Exception:
            pass
