"""A SASL-checking gateway for tests: it authenticates clients itself (PLAIN,
SCRAM-SHA-256/512, OAUTHBEARER with unsecured JWTs) and then relays their bytes to a real
broker. No broker installable here both checks credentials and lets a test create the
users (Tansu 0.6 with ``--authentication`` checks SCRAM but cannot be given users: see
docs/security.md), so the server side of these tests is this helper, itself validated
with confluent-kafka (librdkafka) as the client and with RFC 7677's SCRAM test vector.
The public test cluster (``kafka_client.testing``) has its own SASL server.

Behaviour follows Kafka's broker: before authentication only ApiVersions (forwarded to
the broker), SaslHandshake and SaslAuthenticate are served and anything else closes the
connection; a failed authentication is answered with SASL_AUTHENTICATION_FAILED and the
connection closed; with ``session_lifetime_ms`` the SaslAuthenticate answer carries the
lifetime (KIP-368) and a request other than a re-authentication after it expired closes
the connection. The broker must advertise the gateway's port (e.g.
:class:`~kafka_client._testing.tls.TlsTansu`).

Everything runs on plain threads with blocking sockets; ``stop()`` ends them.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from kafka_client._net.security.sasl import SCRAM_HASHES, scram_keys, scram_salted_password
from kafka_client._testing.brokers import LOOPBACK, free_port
from kafka_proto.errors import ErrorCode
from kafka_proto.framing import encode_request_header
from kafka_proto.messages import (
    ApiKey,
    ResponseHeader,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    request_header_version,
    response_header_version,
)

__all__ = ["SaslGateway", "SaslTansu", "ScramServer", "ScramCredential", "MECHANISMS",
           "check_unsecured_jwt"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")


@dataclass(frozen=True)
class ScramCredential:
    """What a Kafka broker stores for a SCRAM user (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(cls, mechanism: str, password: str, salt: Optional[bytes] = None,
             iterations: int = 4096) -> "ScramCredential":
        hash_name = SCRAM_HASHES[mechanism]
        salt = salt if salt is not None else os.urandom(16)
        salted = scram_salted_password(hash_name, password, salt, iterations)
        _client_key, stored_key, server_key = scram_keys(hash_name, salted)
        return cls(salt, iterations, stored_key, server_key)


class ScramServer:
    """The server side of one SCRAM exchange. ``credentials`` maps user -> credential;
    ``nonce`` (the server's part) is for RFC 7677's test vector. :meth:`first` and
    :meth:`final` return the server message, or raise ValueError when authentication
    fails."""

    def __init__(self, mechanism: str, credentials: Dict[str, ScramCredential],
                 nonce: Optional[str] = None) -> None:
        self.hash_name = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.user = ""
        self._auth_prefix = ""
        self._full_nonce = ""
        self._cred: Optional[ScramCredential] = None

    def first(self, client_first: bytes) -> bytes:
        text = client_first.decode()
        if not text.startswith("n,,"):
            raise ValueError("channel binding is not supported")
        bare = text[3:]
        attrs = dict(p.split("=", 1) for p in bare.split(","))
        self.user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        cred = self.credentials.get(self.user)
        if cred is None:
            raise ValueError(f"unknown user {self.user}")
        self._cred = cred
        self._full_nonce = attrs["r"] + self.nonce
        server_first = (f"r={self._full_nonce},s={base64.b64encode(cred.salt).decode()},"
                        f"i={cred.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        text = client_final.decode()
        without_proof, _, proof_part = text.rpartition(",p=")
        attrs = dict(p.split("=", 1) for p in without_proof.split(","))
        if attrs.get("c") != "biws" or attrs.get("r") != self._full_nonce:
            raise ValueError("bad channel binding or nonce")
        cred = self._cred
        assert cred is not None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        signature = hmac.new(cred.stored_key, auth_message, self.hash_name).digest()
        proof = base64.b64decode(proof_part)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(),
                                   cred.stored_key):
            raise ValueError("invalid credentials")
        server_signature = hmac.new(cred.server_key, auth_message, self.hash_name).digest()
        return b"v=" + base64.b64encode(server_signature)


def check_unsecured_jwt(message: bytes) -> Tuple[str, float, Dict[str, str]]:
    """(principal, expiry, extensions) of an OAUTHBEARER client message carrying an
    unsecured JWT; ValueError when it is malformed or expired."""
    text = message.decode()
    if not text.startswith("n,,\x01") or not text.endswith("\x01\x01"):
        raise ValueError("malformed OAUTHBEARER message")
    pairs = dict(p.split("=", 1) for p in text[4:-2].split("\x01") if p)
    auth = pairs.pop("auth", "")
    if not auth.startswith("Bearer "):
        raise ValueError("no bearer token")
    token = auth[len("Bearer "):]
    header, payload, _sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    exp = float(claims.get("exp", 0))
    if exp <= time.time():
        raise ValueError("token expired")
    return str(claims.get("sub", "")), exp, pairs


class _Client:
    """One client connection: its socket, a lock for whole-frame writes, the backend."""

    def __init__(self, sock: socket.socket, backend: socket.socket) -> None:
        self.sock = sock
        self.backend = backend
        self.lock = threading.Lock()
        self.authenticated = False
        self.session_expires = 0.0
        self.mechanism = ""
        self.exchange: Optional[object] = None
        self.oauth_failed = ""

    def send(self, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(data)


def _read_frame(sock: socket.socket) -> Optional[bytes]:
    head = _read_exact(sock, 4)
    if head is None:
        return None
    (size,) = _SIZE.unpack(head)
    if size < 0 or size > 200_000_000:
        return None
    return _read_exact(sock, size)


def _read_exact(sock: socket.socket, n: int) -> Optional[bytes]:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class SaslGateway:
    """Listens on ``127.0.0.1:port`` (a free port unless given) and relays authenticated
    clients to ``backend``. ``users`` maps user -> password (PLAIN and SCRAM);
    ``mechanisms`` are those enabled. Counters: ``authentications`` (successes, by
    mechanism, re-authentications included), ``failures``, ``closed_expired``."""

    def __init__(self, backend_host: str, backend_port: int, users: Dict[str, str], *,
                 mechanisms: Sequence[str] = MECHANISMS, port: Optional[int] = None,
                 session_lifetime_ms: int = 0) -> None:
        self.backend = (backend_host, backend_port)
        self.users = dict(users)
        self.mechanisms = list(mechanisms)
        self.session_lifetime_ms = session_lifetime_ms
        self.host = LOOPBACK
        self.port = port or free_port()
        self.scram = {m: {u: ScramCredential.make(m, p) for u, p in self.users.items()}
                      for m in SCRAM_HASHES}
        self.authentications: List[str] = []
        self.failures: List[str] = []
        self.closed_expired = 0
        self._listener: Optional[socket.socket] = None
        self._threads: List[threading.Thread] = []
        self._clients: List[_Client] = []
        self._stopping = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "SaslGateway":
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((self.host, self.port))
        lsock.listen(64)
        lsock.settimeout(0.2)
        self._listener = lsock
        self._spawn(self._accept_loop)
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.close()
        for c in list(self._clients):
            self._close(c)
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> "SaslGateway":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        t = threading.Thread(target=fn, args=args, daemon=True, name="sasl-gateway")
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                sock, _ = self._listener.accept()  # type: ignore[union-attr]
            except socket.timeout:
                continue
            except OSError:
                return
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                backend = socket.create_connection(self.backend, timeout=10)
            except OSError:
                sock.close()
                continue
            backend.settimeout(None)
            backend.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client = _Client(sock, backend)
            self._clients.append(client)
            self._spawn(self._serve, client)
            self._spawn(self._relay_back, client)

    def _close(self, c: _Client) -> None:
        for s in (c.sock, c.backend):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _relay_back(self, c: _Client) -> None:
        """Broker -> client, whole frames (a SASL answer of ours may go in between)."""
        while True:
            frame = _read_frame(c.backend)
            if frame is None:
                self._close(c)
                return
            try:
                c.send(_SIZE.pack(len(frame)) + frame)
            except OSError:
                self._close(c)
                return

    def _serve(self, c: _Client) -> None:
        """Client -> broker, with SaslHandshake / SaslAuthenticate answered here."""
        while True:
            frame = _read_frame(c.sock)
            if frame is None:
                self._close(c)
                return
            api_key, version, correlation_id = _HEAD.unpack_from(frame)
            if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                body = frame[_header_length(frame, api_key, version):]
                if not self._sasl(c, api_key, version, correlation_id, body):
                    self._close(c)
                    return
                continue
            if api_key != ApiKey.API_VERSIONS:
                if not c.authenticated:
                    self._close(c)  # Kafka closes a connection that skips authentication
                    return
                if c.session_expires and time.monotonic() > c.session_expires:
                    self.closed_expired += 1
                    self._close(c)
                    return
            try:
                c.backend.sendall(_SIZE.pack(len(frame)) + frame)
            except OSError:
                self._close(c)
                return

    def _respond(self, c: _Client, api_key: int, version: int, correlation_id: int,
                 response: object) -> None:
        header = ResponseHeader(correlation_id=correlation_id).encode(
            response_header_version(api_key, version))
        body = response.encode(version)  # type: ignore[attr-defined]
        c.send(_SIZE.pack(len(header) + len(body)) + header + body)

    def _sasl(self, c: _Client, api_key: int, version: int, correlation_id: int,
              body: bytes) -> bool:
        """Answer one SASL request; False when the connection must close."""
        if api_key == ApiKey.SASL_HANDSHAKE:
            req = SaslHandshakeRequest.decode(body, version)
            ok = req.mechanism in self.mechanisms
            c.mechanism = req.mechanism if ok else ""
            c.exchange = None
            c.oauth_failed = ""
            self._respond(c, api_key, version, correlation_id, SaslHandshakeResponse(
                error_code=ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                mechanisms=self.mechanisms))
            return ok
        req = SaslAuthenticateRequest.decode(body, version)
        data = bytes(req.auth_bytes)
        try:
            reply, done, lifetime = self._step(c, data)
        except ValueError as exc:
            self.failures.append(f"{c.mechanism}: {exc}")
            self._respond(c, api_key, version, correlation_id, SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message=f"Authentication failed during authentication due to "
                              f"invalid credentials with SASL mechanism {c.mechanism}"))
            return False
        if done:
            c.authenticated = True
            self.authentications.append(c.mechanism)
            c.session_expires = time.monotonic() + lifetime / 1000.0 if lifetime else 0.0
        self._respond(c, api_key, version, correlation_id, SaslAuthenticateResponse(
            error_code=ErrorCode.NONE, auth_bytes=reply,
            session_lifetime_ms=lifetime if done else 0))
        return True

    def _step(self, c: _Client, data: bytes) -> Tuple[bytes, bool, int]:
        """(server message, authenticated now, session lifetime ms)."""
        mech = c.mechanism
        if not mech:
            raise ValueError("SaslAuthenticate before SaslHandshake")
        lifetime = self.session_lifetime_ms
        if mech == "PLAIN":
            try:
                _authz, user, password = data.decode().split("\0")
            except ValueError:
                raise ValueError("malformed PLAIN message") from None
            if self.users.get(user) != password:
                raise ValueError(f"bad password for {user}")
            return b"", True, lifetime
        if mech in SCRAM_HASHES:
            if c.exchange is None:
                c.exchange = ScramServer(mech, self.scram[mech])
                return c.exchange.first(data), False, 0  # type: ignore[attr-defined]
            final = c.exchange.final(data)  # type: ignore[attr-defined]
            c.exchange = None
            return final, True, lifetime
        # OAUTHBEARER: an invalid token gets the RFC 7628 error challenge first.
        if c.oauth_failed:
            raise ValueError(c.oauth_failed)
        try:
            _principal, exp, _ext = check_unsecured_jwt(data)
        except (ValueError, KeyError) as exc:
            c.oauth_failed = str(exc) or "invalid token"
            return b'{"status":"invalid_token"}', False, 0
        left = int((exp - time.time()) * 1000)
        return b"", True, min(lifetime, left) if lifetime else left


def _header_length(frame: bytes, api_key: int, version: int) -> int:
    """Bytes of the request header: its fixed part, the client id, and (flexible
    versions) the empty tag buffer; checked against kafka_proto's own encoding."""
    header_version = request_header_version(api_key, version)
    (id_len,) = struct.unpack_from(">h", frame, 8)
    client_id = frame[10:10 + id_len].decode() if id_len >= 0 else None
    expected = encode_request_header(api_key, version, _HEAD.unpack_from(frame)[2],
                                     client_id, header_version)
    if frame[:len(expected)] != expected:
        raise ValueError("request header with tagged fields is not supported here")
    return len(expected)


class SaslTansu:
    """A Tansu broker behind a :class:`SaslGateway` (Tansu advertises the gateway's
    port), optionally behind stunnel too (``certs`` given: SASL_SSL). ``bootstrap`` is
    where clients connect; ``create_topic`` goes to the broker's plaintext port."""

    def __init__(self, users: Dict[str, str], certs: object = None,
                 **gateway_kwargs: object) -> None:
        from kafka_client._testing.tls import Stunnel, TlsTansu

        gateway_port = free_port()
        front_port = free_port() if certs is not None else gateway_port
        self.broker = TlsTansu(front_port)
        self.broker.start()
        self.stunnel = None
        try:
            self.gateway = SaslGateway(self.broker.host, self.broker.port, users,
                                       port=gateway_port, **gateway_kwargs).start()
            if certs is not None:
                self.stunnel = Stunnel(LOOPBACK, gateway_port, certs.server_cert,  # type: ignore[attr-defined]
                                       certs.server_key, port=front_port).start()  # type: ignore[attr-defined]
        except BaseException:
            self.stop()
            raise
        self.bootstrap = f"{LOOPBACK}:{front_port}"

    def create_topic(self, name: str, partitions: int = 1) -> None:
        self.broker.create_topic(name, partitions)

    def stop(self) -> None:
        if self.stunnel is not None:
            self.stunnel.stop()
            self.stunnel.cleanup()
        gateway = getattr(self, "gateway", None)
        if gateway is not None:
            gateway.stop()
        self.broker.stop()
        self.broker.cleanup()

    def __enter__(self) -> "SaslTansu":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
