"""Small pieces every client class shares: configuration from keyword arguments,
``debug`` contexts, and calling application callbacks."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence

from kafka_client.config import ClientConfig
from kafka_client.errors import KafkaException

__all__ = ["make_config", "apply_debug", "call_safely", "serve_errors", "stop_client"]

_log = logging.getLogger("kafka_client")

# librdkafka debug contexts -> our loggers (one per component)
DEBUG_LOGGERS = {
    "broker": ("kafka_client.connection", "kafka_client.io"),
    "protocol": ("kafka_client.connection",),
    "metadata": ("kafka_client.metadata", "kafka_client.cluster"),
    "topic": ("kafka_client.metadata",),
    "msg": ("kafka_client.producer", "kafka_client.producer.sender"),
    "queue": ("kafka_client.producer",),
    "eos": ("kafka_client.producer.idempotence",),
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
    from kafka_client.config import describe

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
