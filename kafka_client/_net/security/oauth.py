"""OAUTHBEARER tokens: from the application's ``oauth_cb``, from an OIDC token endpoint
(:mod:`.oidc`) or, for development and tests, librdkafka's unsecured JWT
(``enable.sasl.oauthbearer.unsecure.jwt``), refreshed before they expire.

``oauth_cb(sasl.oauthbearer.config)`` is called as confluent-kafka calls it and returns
``(token, expiry)`` or ``(token, expiry, principal, extensions)``, ``expiry`` in seconds
since the epoch. The first token is fetched when the client is created (a client that
cannot get one fails there, as confluent-kafka's does); later ones on a helper thread at
80% of the token's lifetime (librdkafka's rule), so a slow token endpoint never stalls
the I/O thread; a failed refresh is retried every 10 seconds and reported.
"""
from __future__ import annotations

import base64
import json
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from kafka_client._net.security.sasl import OAuthToken, SaslError

__all__ = ["TokenSource", "unsecured_jwt", "token_from_callback"]

_log = logging.getLogger("kafka_client.security")

#: Wait before retrying a failed refresh (librdkafka's 10 s).
RETRY_AFTER = 10.0


def b64url(data: bytes) -> str:
    """base64url without padding, as JWTs encode their parts (RFC 7515)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """The bytes of a base64url part without padding (a JWT's); binascii.Error or
    ValueError when it is not base64url."""
    return base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode("ascii"))


def jwt_segment(obj: Any) -> str:
    """A JWT header or claims set: compact JSON, base64url-encoded."""
    return b64url(json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def unsecured_jwt(config: str, now: Optional[float] = None) -> OAuthToken:
    """librdkafka's unsecured JWT (RFC 7515 appendix A.5, ``alg: none``) from
    ``sasl.oauthbearer.config``: space-separated ``name=value`` pairs among
    ``principalClaimName`` (default ``sub``), ``principal`` (required),
    ``scopeClaimName`` (default ``scope``), ``scope`` (comma-separated), ``lifeSeconds``
    (default 3600) and ``extension_NAME=value``. Raises ValueError naming a bad pair."""
    now = time.time() if now is None else now
    values: Dict[str, str] = {}
    extensions: Dict[str, str] = {}
    for pair in (config or "").split():
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f'"sasl.oauthbearer.config": expected name=value, got "{pair}"')
        if name.startswith("extension_"):
            extensions[name[len("extension_"):]] = value
        elif name in ("principalClaimName", "principal", "scopeClaimName", "scope",
                      "lifeSeconds"):
            values[name] = value
        else:
            raise ValueError(f'"sasl.oauthbearer.config": unknown name "{name}"')
    principal = values.get("principal")
    if not principal:
        raise ValueError('"sasl.oauthbearer.config" must set principal=... for the '
                         "unsecured JWT")
    try:
        life = int(values.get("lifeSeconds", "3600"))
    except ValueError:
        raise ValueError('"sasl.oauthbearer.config": lifeSeconds must be an integer') from None
    if life <= 0:
        raise ValueError('"sasl.oauthbearer.config": lifeSeconds must be positive')
    issued = int(now)
    claims: Dict[str, Any] = {values.get("principalClaimName", "sub"): principal,
                              "iat": issued, "exp": issued + life}
    scope = [s for s in values.get("scope", "").split(",") if s]
    if scope:
        claims[values.get("scopeClaimName", "scope")] = scope
    token = f"{jwt_segment({'alg': 'none'})}.{jwt_segment(claims)}."
    return OAuthToken(token, issued + life, principal, extensions)


def token_from_callback(result: Any) -> OAuthToken:
    """An :class:`OAuthToken` from what ``oauth_cb`` returned (see the module docstring);
    ValueError naming what is wrong."""
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 4):
        raise ValueError("oauth_cb must return (token, expiry) or "
                         "(token, expiry, principal, extensions)")
    token, expiry = result[0], result[1]
    principal, extensions = (result[2], result[3]) if len(result) == 4 else ("", None)
    if not isinstance(token, str) or not token:
        raise ValueError("oauth_cb returned an empty token")
    try:
        expires_at = float(expiry)
    except (TypeError, ValueError):
        raise ValueError(f"oauth_cb returned a bad expiry: {expiry!r}") from None
    if expires_at <= time.time():
        raise ValueError(f"oauth_cb returned a token that already expired (expiry "
                         f"{expires_at:.0f} s since the epoch)")
    return OAuthToken(token, expires_at, principal or "", dict(extensions or {}))


class TokenSource:
    """Holds the current token and refreshes it before it expires.

    ``fetch()`` returns a new :class:`OAuthToken` or raises. ``on_error(message,
    exception)`` is told about failed refreshes (the client's error_cb path, and the
    exception for the caller of poll() when the application's oauth_cb raised it).
    """

    def __init__(self, fetch: Callable[[], OAuthToken],
                 on_error: Optional[Callable[[str, Exception], None]] = None,
                 log: Any = None) -> None:
        self._fetch = fetch
        #: the client's configured logger when given
        self.log = log if log is not None else _log
        self._lock = threading.Lock()
        self._token: Optional[OAuthToken] = None
        self._error = ""
        self._timer: Optional[threading.Timer] = None
        self._closed = False
        self.on_error = on_error
        #: a failure that came while nobody was told (no on_error yet), for report_errors_to
        self._unreported: Optional[Tuple[str, Exception]] = None
        self.refreshes = 0
        self.listeners: List[Callable[[], None]] = []

    def start(self) -> None:
        """Fetch the first token now (on the calling thread); raises what fetch raised."""
        token = self._fetch()
        self._set(token)

    def current(self) -> OAuthToken:
        """The token to authenticate with; SaslError when there is none or it expired."""
        with self._lock:
            token, error = self._token, self._error
        if token is None:
            raise SaslError(f"no OAUTHBEARER token: {error or 'not fetched yet'}")
        if token.expires_at <= time.time():
            raise SaslError(f"the OAUTHBEARER token expired at {token.expires_at:.0f} "
                            f"(s since the epoch) and no new one was obtained"
                            + (f": {error}" if error else ""))
        return token

    def set_token(self, token: OAuthToken) -> None:
        """Use ``token`` from now on (the refresh schedule follows its expiry)."""
        self._set(token)

    def close(self) -> None:
        self._closed = True
        timer = self._timer
        if timer is not None:
            timer.cancel()

    def _set(self, token: OAuthToken) -> None:
        with self._lock:
            self._token = token
            self._error = ""
        now = time.time()
        self._schedule(max(0.0, (token.expires_at - now) * 0.8))
        for cb in list(self.listeners):
            cb()

    def _schedule(self, delay: float) -> None:
        if self._closed:
            return
        old = self._timer
        if old is not None:
            old.cancel()
        timer = threading.Timer(delay, self._refresh)
        timer.daemon = True
        timer.name = "kafka-oauth-refresh"
        self._timer = timer
        timer.start()

    def _refresh(self) -> None:
        if self._closed:
            return
        self.refreshes += 1
        try:
            token = self._fetch()
        except Exception as exc:
            self.failed(exc)
            return
        self._set(token)

    def failed(self, exc: Exception) -> None:
        """No token could be had (``exc`` says why): reported, kept as the reason
        :meth:`current` gives, and asked again in RETRY_AFTER seconds."""
        message = f"OAUTHBEARER token refresh failed: {exc}"
        with self._lock:
            self._error = str(exc)
            on_error = self.on_error
            if on_error is None:
                self._unreported = (message, exc)
        self.log.warning("%s (retrying in %gs)", message, RETRY_AFTER)
        if on_error is not None:
            on_error(message, exc)
        self._schedule(RETRY_AFTER)

    def report_errors_to(self, on_error: Callable[[str, Exception], None]) -> None:
        """Tell ``on_error`` about failed refreshes from now on, and at once about one
        that failed before: the client is wired up after its first token came, and a
        short-lived token's refresh (or a first fetch from a busy endpoint) may fail in
        between, which then reached neither error_cb nor the caller of poll()."""
        with self._lock:
            self.on_error = on_error
            missed, self._unreported = self._unreported, None
        if missed is not None:
            on_error(*missed)
