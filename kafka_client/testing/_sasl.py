"""SASL authentication: SaslHandshake and SaslAuthenticate with PLAIN and SCRAM-SHA-256/512.

With ``sasl.enabled.mechanisms`` set, every listener requires authentication: before it,
only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything else closes the
connection, as Kafka does). After SaslHandshake v0 the tokens travel as bare
size-prefixed frames (the pre-KIP-152 exchange); after v1, inside SaslAuthenticate.

SCRAM follows RFC 5802 / 7677 with 4096 iterations (Kafka's minimum); the credentials of
each user are derived once, when the cluster starts, from the ``users`` passwords. The
client-final nonce must be the server's, or the client nonce followed by it: librdkafka
before 2.6.1 (Debian's kcat among others) sends the latter, which Kafka 3.8.1-3.9 accepted
and Kafka 4 refuses; a test cluster lets those clients in.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from kafka_proto.errors import ErrorCode
from kafka_proto.messages import ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse

from ._api import RequestContext, error_answer, handles

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker, ClientConnection

__all__ = ["ScramCredential", "scram_credential", "SaslSession"]

SCRAM_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_SIZE = struct.Struct(">i")


class AuthenticationFailed(Exception):
    pass


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(password: str, hash_name: str, salt: Optional[bytes] = None,
                     iterations: int = SCRAM_ITERATIONS) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(24)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hash_name).digest()
    return ScramCredential(salt, iterations, stored_key, server_key)


def _scram_name(raw: str) -> str:
    return raw.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> Dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"malformed SCRAM attribute {part!r}")
        out[part[0]] = part[2:]
    return out


class SaslSession:
    """The server side of one SASL exchange on one connection."""

    def __init__(self, mechanism: str, users: Dict[str, str],
                 credentials: Dict[Tuple[str, str], ScramCredential],
                 raw_tokens: bool) -> None:
        self.mechanism = mechanism
        self.users = users
        self.credentials = credentials
        self.raw_tokens = raw_tokens
        self.user: Optional[str] = None
        self.done = False
        self._scram_state: Optional[Tuple[str, str, str]] = None  # bare, server-first, nonce

    def step(self, token: bytes) -> bytes:
        """Consume a client token, return the server's; raises AuthenticationFailed."""
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram(token)

    def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode("utf-8").split("\x00")
        except ValueError:
            raise AuthenticationFailed("malformed PLAIN message") from None
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.user = user
        self.done = True
        return b""

    def _scram(self, token: bytes) -> bytes:
        hash_name = _HASHES[self.mechanism]
        text = token.decode("utf-8", errors="replace")
        if self._scram_state is None:
            # client-first: gs2 header ("n,," / "y,," / with "a=authzid") then the bare part
            parts = text.split(",", 2)
            if len(parts) != 3 or parts[0] not in ("n", "y"):
                raise AuthenticationFailed("malformed SCRAM client-first message")
            bare = parts[2]
            attrs = _attributes(bare)
            user = _scram_name(attrs.get("n", ""))
            nonce = attrs.get("r", "")
            if not nonce:
                raise AuthenticationFailed("SCRAM client-first message without a nonce")
            credential = self.credentials.get((self.mechanism, user))
            if credential is None:
                raise AuthenticationFailed(f"Authentication failed during authentication due "
                                           f"to invalid credentials with SASL mechanism "
                                           f"{self.mechanism}")
            full_nonce = nonce + base64.b64encode(os.urandom(18)).decode()
            server_first = (f"r={full_nonce},s={base64.b64encode(credential.salt).decode()},"
                            f"i={credential.iterations}")
            self.user = user
            self._scram_state = (bare, server_first, full_nonce)
            return server_first.encode()
        bare, server_first, nonce = self._scram_state
        attrs = _attributes(text)
        client_nonce = _attributes(bare)["r"]
        if attrs.get("r") not in (nonce, client_nonce + nonce):
            raise AuthenticationFailed("SCRAM nonce mismatch")
        proof_b64 = attrs.get("p")
        if proof_b64 is None:
            raise AuthenticationFailed("SCRAM client-final message without a proof")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        credential = self.credentials[(self.mechanism, self.user or "")]
        signature = hmac.new(credential.stored_key, auth_message, hash_name).digest()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM proof") from None
        if len(proof) != len(signature):
            raise AuthenticationFailed("malformed SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(),
                                   credential.stored_key):
            raise AuthenticationFailed(f"Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism "
                                       f"{self.mechanism}")
        server_signature = hmac.new(credential.server_key, auth_message, hash_name).digest()
        self.done = True
        return b"v=" + base64.b64encode(server_signature)


def build_credentials(users: Dict[str, str], mechanisms: Any) -> Dict[Tuple[str, str],
                                                                      ScramCredential]:
    out = {}
    for mechanism in mechanisms:
        hash_name = _HASHES.get(mechanism)
        if hash_name is None:
            continue
        for user, password in users.items():
            out[(mechanism, user)] = scram_credential(password, hash_name)
    return out


def _authenticated(conn: "ClientConnection", session: SaslSession) -> None:
    conn.authenticated = True
    conn.principal = f"User:{session.user}"
    conn.sasl = None


@handles(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(ctx: RequestContext) -> None:
    server = ctx.server
    enabled = list(server.settings.sasl_mechanisms)
    mechanism = ctx.request.mechanism
    ctx.note(mechanism=mechanism)
    if ctx.conn.authenticated and server.sasl_required:
        ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                          mechanisms=enabled))
        return
    if mechanism not in enabled:
        ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                          mechanisms=enabled))
        return
    ctx.conn.sasl = SaslSession(mechanism, server.users, server.scram_credentials,
                                raw_tokens=ctx.version == 0)
    ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled))


@error_answer(ApiKey.SASL_HANDSHAKE)
def sasl_handshake_error(request: Any, version: int, code: int) -> Any:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


@handles(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate(ctx: RequestContext) -> None:
    conn = ctx.conn
    session = conn.sasl
    if session is None or session.raw_tokens:
        ctx.respond(SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                             error_message="SaslAuthenticate without a "
                                             "SaslHandshake v1 first", auth_bytes=b""))
        return
    try:
        reply = session.step(bytes(ctx.request.auth_bytes))
    except AuthenticationFailed as exc:
        ctx.note(authentication="failed", user=session.user)
        ctx.respond(SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
            auth_bytes=b""))
        # Kafka closes the connection once the failure is sent.
        conn.broker.loop.call_later(0.05, conn.close, "SASL authentication failed")
        return
    if session.done:
        ctx.note(authentication="ok", user=session.user)
        _authenticated(conn, session)
    ctx.respond(SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=reply,
                                         session_lifetime_ms=0))


@error_answer(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate_error(request: Any, version: int, code: int) -> Any:
    return SaslAuthenticateResponse(error_code=code, error_message="injected", auth_bytes=b"")


def on_raw_token(broker: "Broker", conn: "ClientConnection", frame: memoryview) -> None:
    """A bare SASL token after SaslHandshake v0."""
    session: SaslSession = conn.sasl
    try:
        reply = session.step(bytes(frame))
    except AuthenticationFailed as exc:
        broker.server.request_log.add_event(broker.broker_id, "closed",
                                            f"SASL authentication failed: {exc}")
        conn.close(f"SASL authentication failed: {exc}")
        return
    if session.done:
        _authenticated(conn, session)
    conn.send([_SIZE.pack(len(reply)) + reply])
    conn.finished()
