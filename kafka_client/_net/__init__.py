"""Broker connections. :mod:`kafka_client._net.blocking` is the synchronous one used by
the demo and the tests; the I/O thread of the real client reuses its pieces
(framing, version negotiation)."""
from kafka_client._net.blocking import (  # noqa: F401
    BlockingConnection,
    BrokerConnectionError,
    ConnectionClosedError,
    RequestTimeoutError,
)
