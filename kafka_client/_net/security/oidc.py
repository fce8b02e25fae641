"""OAUTHBEARER tokens from an OAuth 2.0 / OpenID Connect token endpoint
(``sasl.oauthbearer.method=oidc``), as librdkafka fetches them: the client credentials
grant (RFC 6749 section 4.4).

One POST to ``sasl.oauthbearer.token.endpoint.url`` with HTTP Basic authentication
(``sasl.oauthbearer.client.id`` and ``.client.secret``) and the form
``grant_type=client_credentials`` plus ``scope`` when ``sasl.oauthbearer.scope`` is set.
The answer's ``access_token`` must be a JWT: as librdkafka does, its ``exp`` claim gives
the expiry (the refresh comes at 80% of the lifetime, see :mod:`.oauth`) and its ``sub``
claim the principal. ``sasl.oauthbearer.extensions`` (``name=value`` pairs separated by
commas) travel with the token as SASL extensions (KIP-342). HTTPS endpoints are verified
against ``https.ca.location`` / ``https.ca.pem`` or the system's CAs.

The request runs on the calling thread (the client's constructor, then the token
refresh thread), never on the I/O thread.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Mapping, Optional

from kafka_client._net.security.sasl import OAuthToken
from kafka_client._net.security.tls import build_https_context

__all__ = ["OidcError", "OidcTokenEndpoint", "parse_extensions", "token_from_jwt"]

#: seconds one token request may take (connect and answer)
REQUEST_TIMEOUT_S = 10.0
#: the most of an answer read: a token answer is a few KB
MAX_ANSWER_BYTES = 1 << 20
#: HTTP statuses worth asking again for (the endpoint is busy or briefly down)
_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
#: KIP-342: extension names are letters only, values printable ASCII (and whitespace)
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")


class OidcError(Exception):
    """No token could be had; the message says why. ``transient``: asking again later
    may succeed (the endpoint was unreachable, timed out or answered 5xx / 429)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def parse_extensions(text: Optional[str]) -> Dict[str, str]:
    """``sasl.oauthbearer.extensions`` as a dict; ValueError naming a bad pair."""
    extensions: Dict[str, str] = {}
    for pair in (text or "").split(","):
        pair = pair.strip()
        if not pair:
            continue
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f'"sasl.oauthbearer.extensions": expected name=value pairs '
                             f'separated by commas, got "{pair}"')
        if not _EXTENSION_NAME.fullmatch(name) or name == "auth":
            raise ValueError(f'"sasl.oauthbearer.extensions": "{name}" is not a valid '
                             f'extension name (letters only, and not "auth")')
        if not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f'"sasl.oauthbearer.extensions": the value of "{name}" must be '
                             f"printable ASCII")
        extensions[name] = value
    return extensions


def token_from_jwt(access_token: str, extensions: Optional[Dict[str, str]] = None,
                   now: Optional[float] = None) -> OAuthToken:
    """An :class:`OAuthToken` from a JWT access token: expiry from its ``exp`` claim,
    principal from ``sub`` (the signature is the broker's to check). OidcError says
    what is missing."""
    parts = access_token.split(".")
    if len(parts) != 3 or not parts[1]:
        raise OidcError("the access token is not a JWT (header.payload.signature)")
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        raise OidcError("the access token's JWT payload is not base64url-encoded JSON") \
            from None
    if not isinstance(claims, dict):
        raise OidcError("the access token's JWT payload is not a JSON object")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)):
        raise OidcError('the access token has no numeric "exp" claim (its expiry)')
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise OidcError('the access token has no "sub" claim (its principal)')
    now = time.time() if now is None else now
    if exp <= now:
        raise OidcError(f'the access token expired already ("exp" {exp:.0f}, now '
                        f"{now:.0f} s since the epoch)")
    return OAuthToken(access_token, float(exp), sub, extensions)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A token endpoint that redirects is reported, not followed (a POST would turn into
    a GET without the credentials' form)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


class OidcTokenEndpoint:
    """Fetches tokens from one token endpoint with the client credentials grant."""

    def __init__(self, url: str, client_id: str, client_secret: str,
                 scope: Optional[str] = None, extensions: Optional[Dict[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url
        self.scope = scope
        self.extensions = dict(extensions or {})
        self.timeout = timeout
        credentials = f"{client_id}:{client_secret}".encode("utf-8")
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
            "Authorization": "Basic " + base64.b64encode(credentials).decode("ascii"),
        }
        form = {"grant_type": "client_credentials"}
        if scope:
            form["scope"] = scope
        self._body = urllib.parse.urlencode(form, quote_via=urllib.parse.quote).encode()
        handlers = [_NoRedirect()]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> "OidcTokenEndpoint":
        """From a client configuration (the checks of ClientConfig made: the endpoint,
        client id and secret are set). ValueError names a bad property."""
        url = conf["sasl.oauthbearer.token.endpoint.url"]
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f'"sasl.oauthbearer.token.endpoint.url": "{url}" is not an '
                             f"http:// or https:// URL")
        context = None
        if scheme == "https":
            context = build_https_context(conf["https.ca.location"], conf["https.ca.pem"])
        return cls(url, conf["sasl.oauthbearer.client.id"],
                   conf["sasl.oauthbearer.client.secret"], conf["sasl.oauthbearer.scope"],
                   parse_extensions(conf["sasl.oauthbearer.extensions"]), context)

    def fetch(self) -> OAuthToken:
        """Ask the endpoint for a token; OidcError says why there is none."""
        request = urllib.request.Request(self.url, data=self._body, headers=self._headers,
                                         method="POST")
        where = f"token endpoint {self.url}"
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                body = answer.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = _snippet(exc.read(4096) if exc.fp is not None else b"")
            raise OidcError(f"{where} answered HTTP {exc.code} {exc.reason}"
                            + (f": {detail}" if detail else ""),
                            transient=exc.code in _TRANSIENT_STATUS) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError):
                raise OidcError(f"{where}: TLS failed: {reason}") from None
            raise OidcError(f"{where} cannot be reached: {reason}", transient=True) from None
        except (socket.timeout, TimeoutError):
            raise OidcError(f"{where} did not answer within {self.timeout:g} s",
                            transient=True) from None
        except (OSError, ValueError) as exc:   # connection reset, a malformed answer
            raise OidcError(f"{where}: {exc}", transient=True) from None
        if len(body) > MAX_ANSWER_BYTES:
            raise OidcError(f"{where} answered with over {MAX_ANSWER_BYTES} bytes")
        try:
            answer_json = json.loads(body)
        except ValueError:
            raise OidcError(f"{where} answered with something other than JSON: "
                            f"{_snippet(body)}") from None
        token = answer_json.get("access_token") if isinstance(answer_json, dict) else None
        if not isinstance(token, str) or not token:
            raise OidcError(f'{where} answered without an "access_token": '
                            f"{_snippet(body)}")
        try:
            return token_from_jwt(token, self.extensions)
        except OidcError as exc:
            raise OidcError(f"{where}: {exc}") from None


def _snippet(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."
