"""The Kafka cluster id for the serializers of the serializing clients that ask for it.

confluent-kafka 2.16's Schema Registry serdes name subjects by default from the registry's
associations of the topic *in the Kafka cluster the client is connected to*: they take a
resolver of that cluster's id through ``set_cluster_id_resolver`` (blocking serdes) or
``set_async_cluster_id_resolver`` (asyncio serdes), and call it on their first lookup of a
topic. Without it they look the topic up in every cluster, and fail when two clusters
associate the same topic name. The serializing clients hand one to each serde that has the
method, as confluent-kafka's do; nothing is resolved before a serde asks.
"""
from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Awaitable, Callable, Iterable, Optional

__all__ = ["ClusterIdResolver", "AsyncClusterIdResolver", "offer_resolver"]

#: How long a serde waits for the cluster id (the Java client's default max.block.ms).
CLUSTER_ID_TIMEOUT = 60.0


def _weak(method: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """``method`` held weakly: a serde the application keeps must not keep its client
    alive (a client dropped without close() is collected at once, and closes)."""
    ref = weakref.WeakMethod(method)   # type: ignore[arg-type]

    def bound() -> Callable[..., Any]:
        target = ref()
        if target is None:
            raise RuntimeError("the client this serializer was given to is gone")
        return target
    return bound


class ClusterIdResolver:
    """``resolver()`` is the client's ``cluster_id(timeout)``; callers on several threads
    wait for one call (the client keeps the id once known, so later calls return at once)."""

    def __init__(self, cluster_id: Callable[..., Optional[str]],
                 timeout: float = CLUSTER_ID_TIMEOUT) -> None:
        self._cluster_id = _weak(cluster_id)
        self._timeout = timeout
        self._lock = threading.Lock()

    def __call__(self) -> Optional[str]:
        with self._lock:
            return self._cluster_id()(timeout=self._timeout)


class AsyncClusterIdResolver:
    """``await resolver()`` is the asyncio client's ``cluster_id(timeout)``; coroutines
    asking at the same time share one call, and one of them cancelled leaves it running
    for the others."""

    def __init__(self, cluster_id: Callable[..., Awaitable[Optional[str]]],
                 timeout: float = CLUSTER_ID_TIMEOUT) -> None:
        self._cluster_id = _weak(cluster_id)
        self._timeout = timeout
        self._pending: Optional["asyncio.Future[Optional[str]]"] = None

    async def __call__(self) -> Optional[str]:
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._resolve())
        return await asyncio.shield(self._pending)

    async def _resolve(self) -> Optional[str]:
        try:
            return await self._cluster_id()(timeout=self._timeout)
        finally:
            self._pending = None    # a failure is tried again by the next caller


def offer_resolver(setter: str, resolver: Callable[[], Any], serdes: Iterable[Any]) -> None:
    """Give ``resolver`` to each serde that has a ``setter`` method (plain functions and
    this package's serializers have none)."""
    for serde in serdes:
        set_resolver = getattr(serde, setter, None)
        if callable(set_resolver):
            set_resolver(resolver)
