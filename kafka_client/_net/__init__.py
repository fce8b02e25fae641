"""Broker connections driven by the client's I/O thread: :mod:`.connection` (one broker
socket over a :class:`kafka_proto.protocol.BrokerConversation`), :mod:`.io_thread` (the
selector loop) and :mod:`.bootstrap` (address resolution). The synchronous connection of
the demo, tests and tools is :mod:`kafka_client._testing.blocking`."""
