"""The serde properties of the serializing clients: a ready-made serde
(``key.serializer``) or a builder of one (``key.serializer.builder``), as confluent-kafka
2.16 takes them.

A builder has ``build(conf, is_key)`` returning ``(serde, conf left over)`` (the asyncio
clients also await a coroutine from it): it is given the client's configuration, may take
properties of its own out of it, and the client is configured with what every builder
left. The serdes built so are the client's: its ``close()`` closes them (``close()``,
``aclose()`` for the asyncio ones), and so does a client collected, or left open at exit,
without ``close()`` (``ClientBase._close_serdes_unclosed``); ready-made ones stay the
application's.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._cluster_id_resolver import ClusterIdResolver, offer_resolver

__all__ = ["SerdeProperties", "ClientSerdes", "AsyncClientSerdes", "take_serdes",
           "close_serdes", "aclose_serdes"]

log = logging.getLogger(__name__)

#: how long an asyncio client collected, or left open at exit, without close() waits for
#: the serdes it built to close (as long as a consumer's farewell then)
UNCLOSED_ACLOSE_S = 5.0


class SerdeProperties:
    """What a client configuration says about its key and value serdes, taken out of
    it: ``conf`` (the rest), and per field the ready-made serde or the builder."""

    def __init__(self, conf: Dict[str, Any], kind: str) -> None:
        if not isinstance(conf, dict):
            raise TypeError(f"conf must be a dict, not {type(conf).__name__}")
        self.conf = dict(conf)
        #: (property name, serde, builder, is_key) for the key, then the value
        self.fields: List[Tuple[str, Any, Any, bool]] = []
        for field in ("key", "value"):
            name = f"{field}.{kind}"
            serde = self.conf.pop(name, None)
            builder = self.conf.pop(f"{name}.builder", None)
            if serde is not None and builder is not None:
                raise ValueError(f"{name} and {name}.builder are both configured: give one")
            if serde is not None and not callable(serde):
                raise TypeError(f"{name} must be callable, not {type(serde).__name__}")
            if builder is not None and not callable(getattr(builder, "build", None)):
                raise TypeError(f"{name}.builder must have a build(conf, is_key) method, "
                                f"not be a {type(builder).__name__}")
            self.fields.append((name, serde, builder, field == "key"))

    def build(self) -> Tuple[List[Optional[Callable]], List[Any], Dict[str, Any]]:
        """Run the builders: the key and value serdes, those built here (the client's
        to close) and the configuration left for the client. A builder that fails closes
        those built before it."""
        serdes, owned, leftovers = [], [], []
        try:
            for name, serde, builder, is_key in self.fields:
                if builder is not None:
                    serde, left = _checked(name, builder.build(dict(self.conf), is_key))
                    owned.append(serde)
                    leftovers.append(left)
                serdes.append(serde)
        except BaseException:
            close_serdes(owned)
            raise
        return serdes, owned, _common_leftover(self.conf, leftovers)

    async def abuild(self) -> Tuple[List[Optional[Callable]], List[Any], Dict[str, Any]]:
        """:meth:`build` for the asyncio clients: a ``build()`` may return a coroutine."""
        serdes, owned, leftovers = [], [], []
        try:
            for name, serde, builder, is_key in self.fields:
                if builder is not None:
                    result = builder.build(dict(self.conf), is_key)
                    if inspect.isawaitable(result):
                        result = await result
                    serde, left = _checked(name, result)
                    owned.append(serde)
                    leftovers.append(left)
                serdes.append(serde)
        except BaseException:
            await aclose_serdes(owned)
            raise
        return serdes, owned, _common_leftover(self.conf, leftovers)


class ClientSerdes:
    """A (blocking) serializing client's key and value serdes: built from its
    configuration, given the client's cluster id once the client exists, and closed with
    it where the client built them."""

    def __init__(self, conf: Dict[str, Any], kind: str) -> None:
        serdes, self._owned, self.client_conf = take_serdes(conf, kind).build()
        self.key: Optional[Callable] = serdes[0]
        self.value: Optional[Callable] = serdes[1]

    def start_client(self, init: Callable[[Dict[str, Any]], None],
                     cluster_id: Callable[..., Optional[str]]) -> None:
        """Run the client's own constructor ``init`` with the configuration the serdes
        left (closing the serdes built here if it raises), then offer them the client's
        cluster id (``set_cluster_id_resolver``)."""
        try:
            init(self.client_conf)
        except BaseException:
            self.close()
            raise
        offer_resolver("set_cluster_id_resolver", ClusterIdResolver(cluster_id),
                       (self.key, self.value))

    def close(self) -> None:
        """Close the serdes built from builders (ready-made ones are the application's),
        once: after the client's own close(), so a close that raised keeps them for the
        next call."""
        owned, self._owned = self._owned, []
        close_serdes(owned)


class AsyncClientSerdes:
    """The serdes an asyncio serializing client built: :meth:`aclose` by the client's
    ``close()``; :meth:`close` by the blocking client it wraps when that is collected,
    or left open at exit, without one (it holds this as its ``_serdes``, as a
    SerializingProducer its :class:`ClientSerdes`)."""

    def __init__(self, owned: List[Any]) -> None:
        self._owned = owned

    async def aclose(self) -> None:
        """Close them (:func:`aclose_serdes`), once."""
        owned, self._owned = self._owned, []
        await aclose_serdes(owned)

    def close(self) -> None:
        """:meth:`aclose` from code that cannot await, waiting at most
        ``UNCLOSED_ACLOSE_S``: on an event loop of its own, in a thread of its own when
        this thread runs one (the client was collected inside a coroutine)."""
        owned, self._owned = self._owned, []
        if not owned:
            return

        def run() -> None:
            asyncio.run(asyncio.wait_for(aclose_serdes(owned), UNCLOSED_ACLOSE_S))

        try:
            asyncio.get_running_loop()
        except RuntimeError:        # none here (at exit, or collected outside a loop)
            run()
            return
        failures: List[BaseException] = []

        def in_thread() -> None:
            try:
                run()
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=in_thread, name="kafka-serdes-close", daemon=True)
        thread.start()
        thread.join(UNCLOSED_ACLOSE_S + 1)   # wait_for has given up by then
        if failures:
            raise failures[0]


def take_serdes(conf: Dict[str, Any], kind: str) -> SerdeProperties:
    """The ``key.<kind>``/``value.<kind>`` properties and their ``.builder`` forms of
    ``conf`` (``kind``: "serializer" or "deserializer"), checked."""
    return SerdeProperties(conf, kind)


def _checked(name: str, result: Any) -> Tuple[Callable, Dict[str, Any]]:
    try:
        serde, left = result
    except (TypeError, ValueError):
        raise ValueError(f"{name}.builder: build() must return (serde, configuration), "
                         f"not {type(result).__name__}") from None
    if not isinstance(left, dict):
        raise ValueError(f"{name}.builder: build() returned a {type(left).__name__} as the "
                         f"configuration left over, not a dict")
    if not callable(serde):
        raise ValueError(f"{name}.builder: build() returned a {type(serde).__name__}, "
                         f"which is not callable")
    return serde, left


def _common_leftover(conf: Dict[str, Any], leftovers: List[Dict[str, Any]]
                     ) -> Dict[str, Any]:
    """The client's configuration: without builders ``conf``; else the properties every
    builder left (one a builder took is not the client's), as the last one left them."""
    if not leftovers:
        return conf
    *others, last = leftovers
    return {k: v for k, v in last.items() if all(k in other for other in others)}


def close_serdes(serdes: List[Any]) -> None:
    """``close()`` each serde that has one, every one tried; the first failure is raised
    after, the others logged."""
    first: Optional[BaseException] = None
    for serde in serdes:
        close = getattr(serde, "close", None)
        if not callable(close):
            continue
        try:
            close()
        except BaseException as exc:
            if first is None:
                first = exc
            else:
                log.warning("closing %r failed", serde, exc_info=True)
    if first is not None:
        raise first


async def aclose_serdes(serdes: List[Any]) -> None:
    """:func:`close_serdes` for the asyncio clients: ``aclose()`` where a serde has it,
    else ``close()``, awaited when it returns an awaitable."""
    first: Optional[BaseException] = None
    for serde in serdes:
        close = getattr(serde, "aclose", None)
        if not callable(close):
            close = getattr(serde, "close", None)
        if not callable(close):
            continue
        try:
            result = close()
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            if first is None:
                first = exc
            else:
                log.warning("closing %r failed", serde, exc_info=True)
    if first is not None:
        raise first
