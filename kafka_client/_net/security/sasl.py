"""SASL mechanisms, sans-I/O: each turns the broker's challenges into the client's
responses. The connection carries them in SaslAuthenticate requests (KIP-152).

* PLAIN (RFC 4616): one message, ``\\0user\\0password``.
* SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): client-first, server-first (nonce,
  salt, iterations), client-final with the proof, server-final whose signature is
  verified: a server that does not know the password cannot pass it.
* OAUTHBEARER (RFC 7628, KIP-255): the token from a :class:`TokenSource` (``oauth_cb``
  or librdkafka's unsecured JWT), with its extensions (KIP-342).

A mechanism object serves one authentication; :meth:`SaslMechanism.respond` raises
:class:`SaslError` with the reason when the exchange cannot go on.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Callable, Dict, Optional

__all__ = [
    "SaslError",
    "SaslMechanism",
    "PlainMechanism",
    "ScramMechanism",
    "OAuthBearerMechanism",
    "OAuthToken",
    "SCRAM_HASHES",
    "MIN_SCRAM_ITERATIONS",
    "scram_salted_password",
    "scram_keys",
]

#: SCRAM mechanism name -> hashlib name.
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka refuses SCRAM credentials with fewer iterations; so does this client (a server
#: offering fewer is not a Kafka broker, or wants a cheap guess at the password).
MIN_SCRAM_ITERATIONS = 4096


class SaslError(Exception):
    """The SASL exchange failed on the client side (bad server message, signature
    mismatch, no token); the message says why."""


class SaslMechanism:
    """One authentication. :meth:`initial` gives the first client message;
    :meth:`respond` takes each server message and gives the next client message, or None
    once the exchange is complete (then :attr:`complete` is True)."""

    name = ""
    complete = False
    #: initial() may wait on the network (GSSAPI's KDC): called off the I/O thread
    may_block = False

    def initial(self) -> bytes:
        raise NotImplementedError

    def respond(self, challenge: bytes) -> Optional[bytes]:
        raise NotImplementedError


class PlainMechanism(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self.password = password

    def initial(self) -> bytes:
        return b"\0" + self.username.encode() + b"\0" + self.password.encode()

    def respond(self, challenge: bytes) -> Optional[bytes]:
        self.complete = True
        return None


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def scram_attributes(message: str, what: str) -> Dict[str, str]:
    """The ``k=value`` attributes of a SCRAM message (RFC 5802), the first of each
    kind kept; SaslError naming ``what`` for a malformed one."""
    attrs: Dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslError(f"malformed SCRAM {what}: {message!r}")
        attrs.setdefault(part[0], part[2:])
    return attrs


def scram_salted_password(hash_name: str, password: "str | bytes", salt: bytes,
                          iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802 (PBKDF2 with HMAC); a str password as UTF-8."""
    if isinstance(password, str):
        password = password.encode()
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def scram_keys(hash_name: str, salted_password: bytes) -> "tuple[bytes, bytes, bytes]":
    """(ClientKey, StoredKey, ServerKey) from a salted password (RFC 5802 section 3)."""
    client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", hash_name).digest()
    return client_key, stored_key, server_key


class ScramMechanism(SaslMechanism):
    """SCRAM-SHA-256 or SCRAM-SHA-512 without channel binding (gs2 header ``n,,``), as
    Kafka uses it. ``nonce`` is for tests (RFC 7677's vectors); by default 24 random
    bytes, base64."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: Optional[str] = None) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.name = mechanism
        self.hash_name = SCRAM_HASHES[mechanism]
        self.username = username
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._client_first_bare = ""
        self._server_signature = b""
        self._step = 0

    def initial(self) -> bytes:
        self._client_first_bare = f"n={_saslname(self.username)},r={self.nonce}"
        self._step = 1
        return ("n,," + self._client_first_bare).encode()

    def respond(self, challenge: bytes) -> Optional[bytes]:
        try:
            text = bytes(challenge).decode()
        except UnicodeDecodeError:
            raise SaslError("SCRAM server message is not UTF-8") from None
        if self._step == 1:
            return self._client_final(text)
        if self._step == 2:
            self._verify_server_final(text)
            return None
        raise SaslError("unexpected SCRAM message after the exchange completed")

    def _client_final(self, server_first: str) -> bytes:
        attrs = scram_attributes(server_first, "server-first-message")
        if "m" in attrs:
            raise SaslError("SCRAM server requires an extension this client does not know")
        nonce, salt_b64, iter_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iter_text is None:
            raise SaslError(f"SCRAM server-first-message lacks r, s or i: {server_first!r}")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise SaslError("SCRAM server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iter_text)
        except ValueError:
            raise SaslError(f"SCRAM server-first-message has a bad salt or iteration "
                            f"count: {server_first!r}") from None
        if iterations < MIN_SCRAM_ITERATIONS:
            raise SaslError(f"SCRAM iteration count {iterations} is below the minimum "
                            f"{MIN_SCRAM_ITERATIONS}")
        salted = scram_salted_password(self.hash_name, self.password, salt, iterations)
        client_key, stored_key, server_key = scram_keys(self.hash_name, salted)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = hmac.new(server_key, auth_message, self.hash_name).digest()
        self._step = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_server_final(self, server_final: str) -> None:
        attrs = scram_attributes(server_final, "server-final-message")
        if "e" in attrs:
            raise SaslError(f"SCRAM server refused the authentication: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            signature = b""
        if not signature or not hmac.compare_digest(signature, self._server_signature):
            raise SaslError("SCRAM server signature does not match: the server does not "
                            "know this user's credentials")
        self._step = 3
        self.complete = True


class OAuthToken:
    """An OAUTHBEARER token: the compact token string, when it expires (seconds since the
    epoch), the principal and the SASL extensions sent with it."""

    __slots__ = ("value", "expires_at", "principal", "extensions")

    def __init__(self, value: str, expires_at: float, principal: str = "",
                 extensions: Optional[Dict[str, str]] = None) -> None:
        self.value = value
        self.expires_at = float(expires_at)
        self.principal = principal
        self.extensions = dict(extensions or {})

    def __repr__(self) -> str:
        return f"<OAuthToken principal={self.principal!r} expires_at={self.expires_at:.0f}>"


class OAuthBearerMechanism(SaslMechanism):
    """RFC 7628's client message with the current token; a non-empty server message is an
    error report (JSON), answered with the single 0x01 the RFC asks for, after which the
    broker fails the authentication with its own error."""

    name = "OAUTHBEARER"

    def __init__(self, token: Callable[[], OAuthToken]) -> None:
        self._token = token
        self.server_error = ""

    def initial(self) -> bytes:
        token = self._token()
        ext = "".join(f"{k}={v}\x01" for k, v in sorted(token.extensions.items()))
        return f"n,,\x01auth=Bearer {token.value}\x01{ext}\x01".encode()

    def respond(self, challenge: bytes) -> Optional[bytes]:
        if challenge:
            self.server_error = bytes(challenge).decode(errors="replace")
            return b"\x01"
        self.complete = True
        return None
