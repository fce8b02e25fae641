"""SASL authentication: SaslHandshake and SaslAuthenticate with PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER (unsecured JWTs) and GSSAPI (Kerberos), and KIP-368 session lifetimes.

With ``sasl.enabled.mechanisms`` set, every listener requires authentication: before it,
only ApiVersions, SaslHandshake and SaslAuthenticate are served (anything else closes the
connection, as Kafka does). After SaslHandshake v0 the tokens travel as bare
size-prefixed frames (the pre-KIP-152 exchange); after v1, inside SaslAuthenticate. A
failed authentication is answered with SASL_AUTHENTICATION_FAILED, then the connection
closes.

* PLAIN (RFC 4616) checks the password of the user; an authorization id other than the
  user is refused.
* SCRAM follows RFC 5802 / 7677 with 4096 iterations (Kafka's minimum). Each user's
  credential is derived from the password when it is set (at start from ``users``, later
  with ``Cluster.set_sasl_credentials``). The client-final nonce must be the server's, or
  the client nonce followed by it: librdkafka before 2.6.1 (Debian's kcat among others)
  sends the latter, which Kafka 3.8.1-3.9 accepted and Kafka 4 refuses; a test cluster
  lets those clients in.
* OAUTHBEARER (RFC 7628, KIP-255) accepts what Kafka's default (unsecured) validator
  accepts: a JWT with ``"alg": "none"``, a subject and an expiry in the future. Anything
  else gets RFC 7628's error challenge (``{"status":"invalid_token"}``), then the failure.
* GSSAPI (RFC 4752) accepts a Kerberos context for the key in the cluster process's
  keytab (``KRB5_KTNAME``, ``KRB5_CONFIG`` for the realm: set them in the environment
  the cluster starts with), offers no security layer and takes the client principal's
  first component as the user (``alice@REALM`` is ``User:alice``, as Kafka's DEFAULT
  principal rule for the default realm).

Session lifetimes (KIP-368): with ``connections.max.reauth.ms`` above 0, and for
OAUTHBEARER until the token expires, a SaslAuthenticate v1+ answer carries the session's
lifetime; a connection that sends anything but a re-authentication after it is closed.
A re-authentication (SaslHandshake v1 on an authenticated connection) must use the same
mechanism and end with the same principal.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, NamedTuple, Optional

from kafka_proto.enums import ScramMechanism
from kafka_proto.errors import ErrorCode
from kafka_proto.framing import encode_frame
from kafka_proto.messages import ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse

from kafka_client._net.security.gssapi import NO_SECURITY_LAYER, AcceptorContext, GssError
from kafka_client._net.security.sasl import (
    SCRAM_HASHES,
    SaslError,
    scram_attributes,
    scram_keys,
    scram_salted_password,
)

from ._api import RequestContext, error_answer, handles

if TYPE_CHECKING:  # pragma: no cover
    from ._broker import Broker, ClientConnection

__all__ = ["AuthenticationFailed", "ScramCredential", "Credentials", "ScramAdminError",
           "ScramServer", "OAuthClaims", "check_unsecured_jwt", "SaslExchange"]

SCRAM_ITERATIONS = 4096
#: The RFC 7628 error challenge sent for a token that is not accepted.
INVALID_TOKEN_CHALLENGE = b'{"status":"invalid_token"}'
#: Why a connection is closed when its session expired (also in the request log).
SESSION_EXPIRED = "SASL session expired (KIP-368): re-authentication was due"


class AuthenticationFailed(ValueError):
    """The client's credentials or messages were refused; the message is what the client
    is told (SaslAuthenticate's error_message)."""


def _invalid_credentials(mechanism: str) -> AuthenticationFailed:
    return AuthenticationFailed(f"Authentication failed during authentication due to "
                                f"invalid credentials with SASL mechanism {mechanism}")


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class ScramCredential:
    """What a Kafka broker stores for a SCRAM user (RFC 5802 section 3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(cls, mechanism: str, password: str, salt: Optional[bytes] = None,
             iterations: int = SCRAM_ITERATIONS) -> "ScramCredential":
        hash_name = SCRAM_HASHES[mechanism]
        salt = salt if salt is not None else os.urandom(24)
        salted = scram_salted_password(hash_name, password, salt, iterations)
        _client_key, stored_key, server_key = scram_keys(hash_name, salted)
        return cls(salt, iterations, stored_key, server_key)


#: Kafka's ceiling for a SCRAM credential's iterations.
MAX_SCRAM_ITERATIONS = 16384
#: SCRAM mechanisms by their number in the admin protocol (KIP-554).
SCRAM_WIRE = {ScramMechanism.SCRAM_SHA_256: "SCRAM-SHA-256",
              ScramMechanism.SCRAM_SHA_512: "SCRAM-SHA-512"}


class ScramAdminError(Exception):
    """A SCRAM credential alteration or description refused: error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Credentials:
    """The users the cluster knows: passwords (PLAIN) and, per enabled SCRAM mechanism,
    the credentials derived from them once, when a password is set."""

    def __init__(self, users: Mapping[str, str], mechanisms: Iterable[str]) -> None:
        self.scram_mechanisms = [m for m in mechanisms if m in SCRAM_HASHES]
        self.passwords: Dict[str, str] = {}
        # Every SCRAM mechanism has its table: AlterUserScramCredentials may store a
        # credential for one not enabled for login, as Kafka does.
        self.scram: Dict[str, Dict[str, ScramCredential]] = {m: {} for m in SCRAM_HASHES}
        for user, password in users.items():
            self.set(user, password)

    def set(self, user: str, password: str) -> None:
        if not user:
            raise ValueError("a SASL user name cannot be empty")
        self.passwords[user] = password
        for mechanism in self.scram_mechanisms:
            self.scram[mechanism][user] = ScramCredential.make(mechanism, password)

    def delete(self, user: str) -> bool:
        known = self.passwords.pop(user, None) is not None
        for table in self.scram.values():
            table.pop(user, None)
        return known

    def describe_scram(self, users: Optional[Iterable[str]]) -> Dict[str, Any]:
        """DescribeUserScramCredentials: ``{user: [(mechanism, iterations), ...]}`` for
        ``users`` (None: every user that has a SCRAM credential), or ``{user:
        ScramAdminError}``."""
        def infos(user: str) -> list:
            return [(m, t[user].iterations) for m, t in self.scram.items() if user in t]

        if users is None:
            every = sorted({u for t in self.scram.values() for u in t})
            return {u: infos(u) for u in every}
        out: Dict[str, Any] = {}
        seen: Dict[str, int] = {}
        for u in users:
            seen[u] = seen.get(u, 0) + 1
        for u, n in seen.items():
            if n > 1:
                out[u] = ScramAdminError(ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM "
                                         "credentials for the same user twice in a single "
                                         "request")
            else:
                out[u] = infos(u) or ScramAdminError(
                    ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to describe a user credential that does not exist")
        return out

    def alter_scram(self, deletions: Iterable[Any], upsertions: Iterable[Any]
                    ) -> Dict[str, Optional["ScramAdminError"]]:
        """AlterUserScramCredentials with Kafka's checks: per user, every alteration
        applies or (the first error) none does. ``deletions`` have ``name`` and
        ``mechanism`` numbers, ``upsertions`` also ``iterations``, ``salt`` and
        ``salted_password``."""
        by_user: Dict[str, list] = {}
        for d in deletions:
            by_user.setdefault(d.name, []).append((d, False))
        for u in upsertions:
            by_user.setdefault(u.name, []).append((u, True))
        results: Dict[str, Optional[ScramAdminError]] = {}
        for user, changes in by_user.items():
            try:
                apply = [self._check_alteration(user, a, upsert, changes)
                         for a, upsert in changes]
            except ScramAdminError as exc:
                results[user] = exc
                continue
            for mechanism, credential in apply:
                if credential is None:
                    self.scram[mechanism].pop(user, None)
                else:
                    self.scram[mechanism][user] = credential
            results[user] = None
        return results

    def _check_alteration(self, user: str, a: Any, upsert: bool,
                          changes: list) -> "tuple[str, Optional[ScramCredential]]":
        if not user:
            raise ScramAdminError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                  "Username must not be empty")
        mechanism = SCRAM_WIRE.get(a.mechanism)
        if mechanism is None:
            raise ScramAdminError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                  f"Unknown SCRAM mechanism {a.mechanism}")
        if sum(1 for other, _ in changes if other.mechanism == a.mechanism) > 1:
            raise ScramAdminError(ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot "
                                  "be altered twice in the same request")
        if not upsert:
            if user not in self.scram[mechanism]:
                raise ScramAdminError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a "
                                      "user credential that does not exist")
            return mechanism, None
        if not SCRAM_ITERATIONS <= a.iterations <= MAX_SCRAM_ITERATIONS:
            raise ScramAdminError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                  f"Too {'few' if a.iterations < SCRAM_ITERATIONS else 'many'}"
                                  f" iterations")
        if not a.salt or not a.salted_password:
            raise ScramAdminError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                  "Salt and salted password must not be empty")
        _client_key, stored_key, server_key = scram_keys(SCRAM_HASHES[mechanism],
                                                         a.salted_password)
        return mechanism, ScramCredential(bytes(a.salt), a.iterations, stored_key, server_key)

    def check_password(self, user: str, password: str) -> bool:
        expected = self.passwords.get(user)
        return expected is not None and hmac.compare_digest(expected.encode("utf-8"),
                                                            password.encode("utf-8"))


# --------------------------------------------------------------------------- SCRAM


def _attributes(message: str, what: str) -> Dict[str, str]:
    try:
        return scram_attributes(message, what)
    except SaslError as exc:   # the client's parser; the server fails the exchange
        raise AuthenticationFailed(str(exc)) from None


def _saslname(raw: str) -> str:
    return raw.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one SCRAM exchange, sans-I/O. ``credentials`` maps user to
    :class:`ScramCredential`; ``nonce`` (the server's part) is for RFC 7677's test vector.
    :meth:`first` and :meth:`final` return the server's message or raise
    :class:`AuthenticationFailed`."""

    def __init__(self, mechanism: str, credentials: Mapping[str, ScramCredential],
                 nonce: Optional[str] = None) -> None:
        self.mechanism = mechanism
        self.hash_name = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.user = ""
        self._gs2_header = ""
        self._client_nonce = ""
        self._full_nonce = ""
        self._auth_prefix = ""
        self._credential: Optional[ScramCredential] = None

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM client-first message is not UTF-8") from None
        # gs2 header: "n" (or "y": the client could bind but thinks we cannot), an
        # optional "a=authzid", then the bare message.
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise AuthenticationFailed("malformed SCRAM client-first message (channel "
                                       "binding is not supported)")
        attrs = _attributes(bare, "client-first message")
        if "m" in attrs:
            raise AuthenticationFailed("SCRAM extensions are not supported")
        self.user = _saslname(attrs.get("n", ""))
        if authzid and _saslname(authzid[2:]) != self.user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self._client_nonce = attrs.get("r", "")
        if not self._client_nonce:
            raise AuthenticationFailed("SCRAM client-first message without a nonce")
        credential = self.credentials.get(self.user)
        if credential is None:
            raise _invalid_credentials(self.mechanism)
        self._credential = credential
        self._gs2_header = f"{flag},{authzid},"
        self._full_nonce = self._client_nonce + self.nonce
        server_first = (f"r={self._full_nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._credential is None:
            raise AuthenticationFailed("SCRAM client-final message before client-first")
        try:
            text = client_final.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM client-final message is not UTF-8") from None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM client-final message without a proof")
        attrs = _attributes(without_proof, "client-final message")
        if attrs.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise AuthenticationFailed("SCRAM channel binding does not match the gs2 header")
        if attrs.get("r") not in (self._full_nonce, self._client_nonce + self._full_nonce):
            raise AuthenticationFailed("SCRAM nonce mismatch")
        credential = self._credential
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        signature = hmac.new(credential.stored_key, auth_message, self.hash_name).digest()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("malformed SCRAM proof") from None
        if len(proof) != len(signature):
            raise AuthenticationFailed("malformed SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(),
                                   credential.stored_key):
            raise _invalid_credentials(self.mechanism)
        server_signature = hmac.new(credential.server_key, auth_message, self.hash_name).digest()
        return b"v=" + base64.b64encode(server_signature)


# --------------------------------------------------------------------------- OAUTHBEARER


class OAuthClaims(NamedTuple):
    """What an accepted OAUTHBEARER message carried."""

    principal: str
    expires_at: float            # seconds since the epoch
    extensions: Dict[str, str]   # KIP-342 SASL extensions


def _b64url_json(part: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError):
        raise AuthenticationFailed("the token is not an unsecured JWT") from None


def check_unsecured_jwt(message: bytes, now: Optional[float] = None) -> OAuthClaims:
    """Check an OAUTHBEARER client message (RFC 7628 section 3.1) carrying an unsecured
    JWT as Kafka's default validator does; :class:`AuthenticationFailed` says why not."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("malformed OAUTHBEARER message") from None
    if not text.startswith(("n,", "y,")) or not text.endswith("\x01\x01"):
        raise AuthenticationFailed("malformed OAUTHBEARER message")
    _gs2, sep, body = text.partition("\x01")
    pairs: Dict[str, str] = {}
    for item in body[:-2].split("\x01"):
        key, found, value = item.partition("=")
        if not found or not key:
            raise AuthenticationFailed(f"malformed OAUTHBEARER key/value {item!r}")
        pairs[key] = value
    auth = pairs.pop("auth", "")
    if not auth.startswith("Bearer "):
        raise AuthenticationFailed("OAUTHBEARER message without a bearer token")
    token = auth[len("Bearer "):]
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise AuthenticationFailed("the token is not an unsecured JWT (header.claims.)")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    if not isinstance(header, dict) or header.get("alg") != "none" or \
            not isinstance(claims, dict):
        raise AuthenticationFailed("the token is not an unsecured JWT (alg none)")
    subject = claims.get("sub")
    expires = claims.get("exp")
    if not isinstance(subject, str) or not subject:
        raise AuthenticationFailed("the token has no subject (sub)")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        raise AuthenticationFailed("the token has no expiry (exp)")
    if expires <= (time.time() if now is None else now):
        raise AuthenticationFailed("the token expired")
    return OAuthClaims(subject, float(expires), pairs)


# --------------------------------------------------------------------------- one exchange


class SaslExchange:
    """The server side of one authentication on one connection: feed the client's tokens
    to :meth:`step`; when :attr:`done`, :attr:`user` is authenticated, until
    :attr:`expires_at` (seconds since the epoch) if the credential expires."""

    def __init__(self, mechanism: str, credentials: Credentials, raw_tokens: bool) -> None:
        self.mechanism = mechanism
        self.credentials = credentials
        self.raw_tokens = raw_tokens
        self.user: Optional[str] = None
        self.done = False
        self.expires_at: Optional[float] = None
        #: the SASL extensions (KIP-342) an OAUTHBEARER client sent
        self.extensions: Dict[str, str] = {}
        self._scram: Optional[ScramServer] = None
        self._oauth_error: Optional[str] = None
        self._gss: Any = None           # the Kerberos acceptor context (GSSAPI)
        self._gss_stage = ""

    def step(self, token: bytes) -> bytes:
        """Consume a client token, return the server's; raises AuthenticationFailed."""
        if self.done:
            raise AuthenticationFailed(f"SASL {self.mechanism}: the exchange is complete")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        if self.mechanism == "OAUTHBEARER":
            return self._oauthbearer(token)
        if self.mechanism == "GSSAPI":
            return self._gssapi(token)
        return self._scram_step(token)

    def _gssapi(self, token: bytes) -> bytes:
        try:
            if self._gss is None:
                self._gss = AcceptorContext()
            ctx = self._gss
            if not ctx.complete:
                reply = ctx.step(token)
                if not ctx.complete:
                    return reply
                if reply:     # mutual authentication: the client answers it empty
                    self._gss_stage = "await-empty"
                    return reply
                self._gss_stage = "offer"
            if self._gss_stage == "await-empty":
                self._gss_stage = "offer"
            if self._gss_stage == "offer":
                self._gss_stage = "await-choice"
                return ctx.wrap(bytes([NO_SECURITY_LAYER, 0, 0, 0]))
            choice = ctx.unwrap(token)
        except GssError as exc:
            raise AuthenticationFailed(f"GSSAPI: {exc}") from None
        if len(choice) < 4 or choice[0] != NO_SECURITY_LAYER:
            raise AuthenticationFailed("GSSAPI: the client chose a security layer this "
                                       "server did not offer")
        authzid = choice[4:].decode("utf-8", "replace")
        user = ctx.initiator.split("@")[0].split("/")[0]
        if authzid and authzid != ctx.initiator and authzid != user:
            raise AuthenticationFailed(f"GSSAPI: authorization id {authzid!r} is not the "
                                       f"authenticated {ctx.initiator!r}")
        self.user = user
        self.done = True
        ctx.close()
        return b""

    def _plain(self, token: bytes) -> bytes:
        try:
            authzid, user, password = token.decode("utf-8").split("\x00")
        except ValueError:
            raise AuthenticationFailed("malformed PLAIN message") from None
        if not self.credentials.check_password(user, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.user = user
        self.done = True
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        if self._scram is None:
            self._scram = ScramServer(self.mechanism,
                                      self.credentials.scram.get(self.mechanism, {}))
            reply = self._scram.first(token)
            self.user = self._scram.user
            return reply
        reply = self._scram.final(token)
        self.done = True
        return reply

    def _oauthbearer(self, token: bytes) -> bytes:
        if self._oauth_error is not None:
            # The client's answer (0x01) to the error challenge: now the failure.
            raise AuthenticationFailed(f"OAUTHBEARER token refused: {self._oauth_error}")
        try:
            claims = check_unsecured_jwt(token)
        except AuthenticationFailed as exc:
            self._oauth_error = str(exc)
            return INVALID_TOKEN_CHALLENGE
        self.user = claims.principal
        self.expires_at = claims.expires_at
        self.extensions = claims.extensions
        self.done = True
        return b""


# --------------------------------------------------------------------------- handlers


def _start(ctx: RequestContext, mechanism: str, raw_tokens: bool) -> None:
    conn = ctx.conn
    conn.sasl = SaslExchange(mechanism, ctx.server.credentials, raw_tokens)


@handles(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(ctx: RequestContext) -> None:
    server = ctx.server
    conn = ctx.conn
    enabled = list(server.settings.sasl_mechanisms)
    mechanism = ctx.request.mechanism
    ctx.note(mechanism=mechanism)
    reauthentication = conn.authenticated and conn.principal is not None
    if conn.internal or (conn.authenticated and not reauthentication):
        # Not a SASL connection (no SASL on the cluster, or inter-broker).
        ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                          mechanisms=enabled))
        return
    if mechanism not in enabled:
        ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                          mechanisms=enabled))
        return
    if reauthentication:
        ctx.note(reauthentication=True)
        if ctx.version < 1 or mechanism != conn.sasl_mechanism:
            # KIP-368: only through SaslAuthenticate, and with the same mechanism.
            ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                              mechanisms=enabled))
            conn.broker.loop.call_later(0.05, conn.close, "SASL re-authentication refused")
            return
    _start(ctx, mechanism, raw_tokens=ctx.version == 0)
    ctx.respond(SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled))


@error_answer(ApiKey.SASL_HANDSHAKE)
def sasl_handshake_error(request: Any, version: int, code: int) -> Any:
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


def _session_lifetime_ms(broker: "Broker", exchange: SaslExchange) -> int:
    """KIP-368: the smaller of connections.max.reauth.ms (when above 0) and the time
    the credential has left; 0 for no limit."""
    limits = []
    configured = broker.settings["connections.max.reauth.ms"]
    if configured > 0:
        limits.append(configured)
    if exchange.expires_at is not None:
        limits.append(max(int((exchange.expires_at - time.time()) * 1000), 1))
    return min(limits) if limits else 0


def _authenticated(broker: "Broker", conn: "ClientConnection", exchange: SaslExchange,
                   lifetime_ms: int) -> None:
    reauthentication = conn.principal is not None
    conn.authenticated = True
    conn.principal = f"User:{exchange.user}"
    conn.sasl_mechanism = exchange.mechanism
    conn.sasl = None
    conn.session_expires = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else None
    broker.server.request_log.add_event(
        broker.broker_id, "authenticated", f"{conn.principal} with {exchange.mechanism}",
        mechanism=exchange.mechanism, principal=conn.principal,
        reauthentication=reauthentication, session_lifetime_ms=lifetime_ms,
        extensions=exchange.extensions)


def _fail(ctx: RequestContext, exchange: SaslExchange, message: str) -> None:
    ctx.note(authentication="failed", user=exchange.user, reason=message)
    ctx.respond(SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                         error_message=message, auth_bytes=b""))
    # Kafka closes the connection once the failure is sent.
    ctx.conn.broker.loop.call_later(0.05, ctx.conn.close, f"SASL authentication failed: "
                                                          f"{message}")


@handles(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate(ctx: RequestContext) -> None:
    conn = ctx.conn
    exchange = conn.sasl
    if exchange is None or exchange.raw_tokens:
        ctx.respond(SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                             error_message="SaslAuthenticate without a "
                                             "SaslHandshake v1 first", auth_bytes=b""))
        return
    ctx.note(mechanism=exchange.mechanism)
    try:
        reply = exchange.step(bytes(ctx.request.auth_bytes))
    except AuthenticationFailed as exc:
        _fail(ctx, exchange, str(exc))
        return
    lifetime = 0
    if exchange.done:
        if conn.principal is not None and conn.principal != f"User:{exchange.user}":
            _fail(ctx, exchange, f"re-authentication as User:{exchange.user} on a "
                                 f"connection of {conn.principal}")
            return
        # Clients before SaslAuthenticate v1 cannot re-authenticate: no lifetime for them.
        lifetime = _session_lifetime_ms(ctx.broker, exchange) if ctx.version >= 1 else 0
        ctx.note(authentication="ok", user=exchange.user, session_lifetime_ms=lifetime)
        _authenticated(ctx.broker, conn, exchange, lifetime)
    ctx.respond(SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=reply,
                                         session_lifetime_ms=lifetime))


@error_answer(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate_error(request: Any, version: int, code: int) -> Any:
    return SaslAuthenticateResponse(error_code=code, error_message="injected", auth_bytes=b"")


def on_raw_token(broker: "Broker", conn: "ClientConnection", frame: memoryview) -> None:
    """A bare SASL token after SaslHandshake v0."""
    exchange: SaslExchange = conn.sasl
    try:
        reply = exchange.step(bytes(frame))
    except AuthenticationFailed as exc:
        broker.server.request_log.add_event(broker.broker_id, "closed",
                                            f"SASL authentication failed: {exc}")
        conn.close(f"SASL authentication failed: {exc}")
        return
    if exchange.done:
        _authenticated(broker, conn, exchange, 0)
    conn.send([encode_frame(reply)])
    conn.finished()
