"""A bare protocol client for the cluster tests: one socket, requests framed with
``kafka_proto.framing``, responses decoded with the generated classes. Independent of
``kafka_client``'s own connection code, and able to send malformed bytes."""
from __future__ import annotations

import socket
import struct
from typing import Any, Optional

from kafka_proto.framing import decode_response_header, encode_request
from kafka_proto.messages import response_class


class RawClient:
    def __init__(self, address: str, client_id: str = "raw-test", timeout: float = 10.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send(self, request: Any, version: int) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(request, version, self.correlation_id, self.client_id))
        return self.correlation_id

    def request(self, request: Any, version: int) -> Any:
        self.send(request, version)
        return self.receive(request.API_KEY, version)

    def receive(self, api_key: int, version: int) -> Any:
        """The answer to the last request sent (for a request sent with send())."""
        frame = self.recv_frame()
        assert frame is not None, "connection closed by the broker"
        got, body = decode_response_header(frame, api_key, version)
        assert got == self.correlation_id
        return response_class(api_key).decode(body, version)

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> Optional[bytes]:
        """The next response frame, or None if the broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def closed_by_broker(self) -> bool:
        """True if the broker closes the connection (EOF or reset) within the timeout."""
        try:
            data = self.sock.recv(1)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return data == b""

    def _recv_exact(self, n: int) -> Optional[bytes]:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)
