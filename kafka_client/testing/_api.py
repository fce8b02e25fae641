"""The registry of request handlers, and the request context they are given.

A handler module registers ``@handles(ApiKey.X)`` for its function ``f(ctx)``, which
answers through ``ctx.respond(response)`` at once or later (a produce waiting for its
replicas, a long-polling fetch, a group join), or ``ctx.no_response()`` (acks=0). A
module may also register ``@error_answer(ApiKey.X)``: ``g(request, version, code)``
builds the answer carrying ``code`` everywhere, for injected errors.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from ._protocol import RequestHead

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker, ClientConnection

__all__ = ["RequestContext", "HANDLERS", "ERROR_ANSWERS", "handles", "error_answer"]

Handler = Callable[["RequestContext"], None]
ErrorAnswer = Callable[[Any, int, int], Any]

_log = logging.getLogger("kafka_client.testing")

HANDLERS: Dict[int, Handler] = {}
ERROR_ANSWERS: Dict[int, ErrorAnswer] = {}


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[api_key] = fn
        return fn
    return register


def error_answer(api_key: int) -> Callable[[ErrorAnswer], ErrorAnswer]:
    def register(fn: ErrorAnswer) -> ErrorAnswer:
        ERROR_ANSWERS[api_key] = fn
        return fn
    return register


class RequestContext:
    """One request being served: who sent it, what it is, and how to answer."""

    __slots__ = ("broker", "conn", "head", "request", "received", "log_entry", "answered",
                 "replace_error", "__weakref__")

    def __init__(self, broker: "Broker", conn: "ClientConnection", head: RequestHead,
                 request: Any, log_entry: Optional[Dict[str, Any]]) -> None:
        self.broker = broker
        self.conn = conn
        self.head = head
        self.request = request
        self.received = time.monotonic()
        self.log_entry = log_entry
        self.answered = False
        #: An injected error that replaces the answer once the request was executed.
        self.replace_error: Optional[int] = None

    @property
    def api_key(self) -> int:
        return self.head.api_key

    @property
    def version(self) -> int:
        return self.head.api_version

    @property
    def server(self):
        return self.broker.server

    def respond(self, response: Any, regions: Optional[List[Any]] = None) -> None:
        """Send the response (``regions``: file ranges standing in for the placeholder
        records buffers of a Fetch response, in order)."""
        if self.answered:
            return
        self.answered = True
        if self.replace_error is not None:
            response = ERROR_ANSWERS[self.api_key](self.request, self.version,
                                                   self.replace_error)
            regions = None
        try:
            self.broker.send_response(self, response, regions)
        except Exception as exc:
            # A response we cannot encode is our bug; the client must not hang on it.
            _log.exception("broker %d: cannot answer %s v%d", self.broker.broker_id,
                           type(self.request).__name__, self.version)
            self.note(handler_error=f"{type(exc).__name__}: {exc}")
            self.conn.close("internal error while answering")

    def no_response(self) -> None:
        if self.answered:
            return
        self.answered = True
        self.broker.finish_without_response(self)

    def note(self, **details: Any) -> None:
        """Add details to this request's entry in the request log."""
        if self.log_entry is not None:
            self.log_entry.update(details)
