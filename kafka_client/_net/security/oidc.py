"""OAUTHBEARER tokens from an OAuth 2.0 / OpenID Connect token endpoint
(``sasl.oauthbearer.method=oidc``), as librdkafka fetches them, with one of two grants:

* the client credentials grant (RFC 6749 section 4.4, the default): HTTP Basic
  authentication with ``sasl.oauthbearer.client.id`` and ``.client.secret`` and the form
  ``grant_type=client_credentials``;
* the JWT bearer grant (RFC 7523, ``sasl.oauthbearer.grant.type=
  urn:ietf:params:oauth:grant-type:jwt-bearer``): the form ``grant_type`` and an
  ``assertion``, a JWT the client signs with its private key for each request
  (:class:`JwtAssertion`) or one read from ``sasl.oauthbearer.assertion.file``.

Or, with ``sasl.oauthbearer.metadata.authentication.type=azure_imds``, a GET to Azure's
instance metadata service (:class:`AzureImds`).

The grants POST to ``sasl.oauthbearer.token.endpoint.url``, with ``scope`` when
``sasl.oauthbearer.scope`` is set. The answer's ``access_token`` must be a JWT: as
librdkafka does, its ``exp`` claim gives the expiry (the refresh comes at 80% of the
lifetime, see :mod:`.oauth`) and its ``sub`` claim the principal.
``sasl.oauthbearer.extensions`` (``name=value`` pairs separated by commas) travel with
the token as SASL extensions (KIP-342). HTTPS endpoints are verified against
``https.ca.location`` / ``https.ca.pem`` or the system's CAs.

The request runs on the calling thread (the client's constructor, then the token
refresh thread), never on the I/O thread.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional

from kafka_client._net.security.oauth import b64url, b64url_decode, jwt_segment
from kafka_client._net.security.sasl import OAuthToken
from kafka_client._net.security.tls import build_https_context

__all__ = ["OidcError", "OidcTokenEndpoint", "ClientCredentials", "JwtBearer", "JwtAssertion",
           "AzureImds", "JWT_BEARER_GRANT", "AZURE_IMDS_URL", "parse_extensions",
           "token_from_jwt"]

#: sasl.oauthbearer.grant.type of the JWT bearer grant (RFC 7523)
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
#: Azure's instance metadata service token endpoint (azure_imds without an endpoint URL)
AZURE_IMDS_URL = "http://169.254.169.254/metadata/identity/oauth2/token"

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
                   now: Optional[float] = None, sub_claim: str = "sub") -> OAuthToken:
    """An :class:`OAuthToken` from a JWT access token: expiry from its ``exp`` claim,
    principal from the ``sub_claim`` claim (``sasl.oauthbearer.sub.claim.name``; the
    signature is the broker's to check). OidcError says what is missing."""
    parts = access_token.split(".")
    if len(parts) != 3 or not parts[1]:
        raise OidcError("the access token is not a JWT (header.payload.signature)")
    try:
        claims = json.loads(b64url_decode(parts[1]))
    except (ValueError, binascii.Error, UnicodeError):
        raise OidcError("the access token's JWT payload is not base64url-encoded JSON") \
            from None
    if not isinstance(claims, dict):
        raise OidcError("the access token's JWT payload is not a JSON object")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)):
        raise OidcError('the access token has no numeric "exp" claim (its expiry)')
    sub = claims.get(sub_claim)
    if not isinstance(sub, str) or not sub:
        raise OidcError(f'the access token has no "{sub_claim}" claim (its principal)')
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


class ClientCredentials:
    """The client credentials grant (RFC 6749 section 4.4): HTTP Basic authentication
    with the client id and secret, ``grant_type=client_credentials``."""

    method = "POST"

    def __init__(self, client_id: str, client_secret: str) -> None:
        credentials = f"{client_id}:{client_secret}".encode("utf-8")
        self.headers = {"Authorization": "Basic " + base64.b64encode(credentials).decode()}

    def form(self) -> Dict[str, str]:
        return {"grant_type": "client_credentials"}


class JwtBearer:
    """The JWT bearer grant (RFC 7523 section 2.1) as librdkafka makes it: no HTTP
    authentication, ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` and an
    ``assertion`` made for each request (see :class:`JwtAssertion`) or read from
    ``sasl.oauthbearer.assertion.file`` each time (another process may renew it)."""

    method = "POST"
    headers: Dict[str, str] = {}

    def __init__(self, assertion: "Optional[JwtAssertion]" = None,
                 assertion_file: Optional[str] = None) -> None:
        self.assertion = assertion
        self.assertion_file = assertion_file

    def form(self) -> Dict[str, str]:
        if self.assertion is not None:
            value = self.assertion.make()
        else:
            try:
                with open(str(self.assertion_file), encoding="utf-8") as f:
                    value = f.read().strip()
            except (OSError, UnicodeError) as exc:
                raise OidcError(f'"sasl.oauthbearer.assertion.file": cannot be read: {exc}') \
                    from None
            if not value:
                raise OidcError(f'"sasl.oauthbearer.assertion.file": {self.assertion_file} '
                                f"is empty")
        return {"grant_type": JWT_BEARER_GRANT, "assertion": value}


class JwtAssertion:
    """The signed JWT of the JWT bearer grant, made afresh for each token request as
    librdkafka makes it: header ``{"alg": "RS256" | "ES256", "typ": "JWT"}`` after the
    template's header fields; claims ``iat`` (now), ``exp`` (now +
    ``assertion.claim.exp.seconds``), ``nbf`` (now - ``assertion.claim.nbf.seconds``),
    then ``sub``, ``iss``, ``aud`` when set and a random ``jti`` when
    ``assertion.claim.jti.include``, after (and over) the template's payload fields
    (``sasl.oauthbearer.assertion.jwt.template.file``: a JSON object with ``header`` and
    ``payload`` objects). RS256 is RSASSA-PKCS1-v1_5 with SHA-256; ES256 is ECDSA on
    P-256 with SHA-256, its signature the 64 bytes of r and s (RFC 7518 section 3.4).
    Needs the ``cryptography`` package (the ``oidc`` extra)."""

    def __init__(self, algorithm: str, sign: Callable[[bytes], bytes],
                 claims: Dict[str, str], exp_seconds: int, nbf_seconds: int,
                 include_jti: bool, template: Optional[Dict[str, Any]] = None) -> None:
        self.algorithm = algorithm.upper()
        self._sign = sign
        self.claims = dict(claims)
        self.exp_seconds = exp_seconds
        self.nbf_seconds = nbf_seconds
        self.include_jti = include_jti
        template = template or {}
        self._header = {**template.get("header", {}), "alg": self.algorithm, "typ": "JWT"}
        self._payload = dict(template.get("payload", {}))

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> "JwtAssertion":
        """From the ``sasl.oauthbearer.assertion.*`` properties; ValueError names what
        cannot be loaded."""
        algorithm = conf["sasl.oauthbearer.assertion.algorithm"]
        passphrase = conf["sasl.oauthbearer.assertion.private.key.passphrase"]
        key_file = conf["sasl.oauthbearer.assertion.private.key.file"]
        if key_file:
            prop = "sasl.oauthbearer.assertion.private.key.file"
            try:
                with open(key_file, "rb") as f:
                    pem = f.read()
            except OSError as exc:
                raise ValueError(f'"{prop}": {key_file}: {exc.strerror}') from None
        else:
            prop = "sasl.oauthbearer.assertion.private.key.pem"
            raw = conf[prop]
            pem = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        sign = _signer(algorithm, pem, passphrase, prop)
        template: Dict[str, Any] = {}
        template_file = conf["sasl.oauthbearer.assertion.jwt.template.file"]
        if template_file:
            template = _read_template(template_file)
        claims = {name: conf[f"sasl.oauthbearer.assertion.claim.{name}"]
                  for name in ("sub", "iss", "aud")
                  if conf[f"sasl.oauthbearer.assertion.claim.{name}"]}
        return cls(algorithm, sign, claims,
                   conf["sasl.oauthbearer.assertion.claim.exp.seconds"],
                   conf["sasl.oauthbearer.assertion.claim.nbf.seconds"],
                   conf["sasl.oauthbearer.assertion.claim.jti.include"], template)

    def make(self, now: Optional[float] = None) -> str:
        """A signed assertion valid from now."""
        issued = int(time.time() if now is None else now)
        payload = {**self._payload, "iat": issued, "exp": issued + self.exp_seconds,
                   "nbf": issued - self.nbf_seconds, **self.claims}
        if self.include_jti:
            payload["jti"] = str(uuid.uuid4())
        signing_input = f"{jwt_segment(self._header)}.{jwt_segment(payload)}"
        return f"{signing_input}.{b64url(self._sign(signing_input.encode('ascii')))}"


def _read_template(path: str) -> Dict[str, Any]:
    prop = "sasl.oauthbearer.assertion.jwt.template.file"
    try:
        with open(path, encoding="utf-8") as f:
            template = json.load(f)
    except OSError as exc:
        raise ValueError(f'"{prop}": {path}: {exc.strerror}') from None
    except ValueError as exc:
        raise ValueError(f'"{prop}": {path} is not JSON: {exc}') from None
    if not isinstance(template, dict) or not all(
            isinstance(template.get(part, {}), dict) for part in ("header", "payload")):
        raise ValueError(f'"{prop}": {path} must be a JSON object whose "header" and '
                         f'"payload" are objects')
    return template


def _signer(algorithm: str, pem: bytes, passphrase: Optional[str],
            prop: str) -> Callable[[bytes], bytes]:
    """A function signing with the PEM private key for ``algorithm`` (rs256, es256)."""
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    except ImportError:
        raise ValueError(f'"sasl.oauthbearer.grant.type" {JWT_BEARER_GRANT} signs its '
                         f"assertion with the cryptography package, which is not "
                         f"installed (pip install 'kafka-native[oidc]')") from None
    try:
        key = serialization.load_pem_private_key(
            pem, password=passphrase.encode("utf-8") if passphrase else None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f'"{prop}": the private key cannot be loaded: {exc}') from None
    if algorithm == "rs256":
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError(f'"{prop}": "sasl.oauthbearer.assertion.algorithm" rs256 needs '
                             f"an RSA key")
        rsa_key = key
        return lambda data: rsa_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError(f'"{prop}": "sasl.oauthbearer.assertion.algorithm" es256 needs an '
                         f"EC key on P-256")
    ec_key = key

    def sign_es256(data: bytes) -> bytes:
        r, s = decode_dss_signature(ec_key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return sign_es256


class AzureImds:
    """Azure's instance metadata service (``sasl.oauthbearer.metadata.authentication.type
    =azure_imds``), as librdkafka asks it: a GET with the header ``Metadata: true`` to
    the endpoint URL, its query string extended by the ``query`` entry of
    ``sasl.oauthbearer.config`` (comma-separated ``name=value`` entries, such as
    ``query=api-version=2018-02-01&resource=api://kafka``)."""

    method = "GET"
    headers = {"Metadata": "true"}

    def form(self) -> None:
        return None   # a GET: no body

    @staticmethod
    def url(configured: Optional[str], oauthbearer_config: Optional[str]) -> str:
        """The URL asked: ``sasl.oauthbearer.token.endpoint.url`` (Azure's own address
        when unset) with the query of ``sasl.oauthbearer.config`` appended."""
        query = ""
        for entry in (oauthbearer_config or "").split(","):
            name, sep, value = entry.strip().partition("=")
            if sep and name == "query":
                query = value
        if not configured and not query:
            raise ValueError('"sasl.oauthbearer.metadata.authentication.type" azure_imds '
                             'needs "sasl.oauthbearer.token.endpoint.url" or a query=... '
                             'entry in "sasl.oauthbearer.config"')
        url = configured or AZURE_IMDS_URL
        if query:
            url += ("&" if urllib.parse.urlsplit(url).query else "?") + query
        return url


class OidcTokenEndpoint:
    """Fetches tokens from one token endpoint with a grant (:class:`ClientCredentials`,
    :class:`JwtBearer` or :class:`AzureImds`)."""

    def __init__(self, url: str, grant: Any, scope: Optional[str] = None,
                 extensions: Optional[Dict[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 timeout: float = REQUEST_TIMEOUT_S, sub_claim: str = "sub") -> None:
        self.url = url
        self.sub_claim = sub_claim
        self.grant = grant
        self.scope = scope
        self.extensions = dict(extensions or {})
        self.timeout = timeout
        self._headers = {"Accept": "application/json", **grant.headers}
        handlers: List[urllib.request.BaseHandler] = [_NoRedirect()]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> "OidcTokenEndpoint":
        """From a client configuration (the checks of ClientConfig made: what the grant
        needs is set). ValueError names a bad property."""
        url = conf["sasl.oauthbearer.token.endpoint.url"]
        azure = conf["sasl.oauthbearer.metadata.authentication.type"] == "azure_imds"
        if azure:
            url = AzureImds.url(url, conf["sasl.oauthbearer.config"])
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f'"sasl.oauthbearer.token.endpoint.url": "{url}" is not an '
                             f"http:// or https:// URL")
        context = None
        if scheme == "https":
            context = build_https_context(conf["https.ca.location"], conf["https.ca.pem"])
        grant: Any
        if azure:
            grant = AzureImds()
        elif conf["sasl.oauthbearer.grant.type"] == JWT_BEARER_GRANT:
            file = conf["sasl.oauthbearer.assertion.file"]
            if file:
                if not os.path.isfile(file):
                    raise ValueError(f'"sasl.oauthbearer.assertion.file": {file}: no such '
                                     f"file")
                grant = JwtBearer(assertion_file=file)
            else:
                grant = JwtBearer(JwtAssertion.from_config(conf))
        else:
            grant = ClientCredentials(conf["sasl.oauthbearer.client.id"],
                                      conf["sasl.oauthbearer.client.secret"])
        return cls(url, grant, conf["sasl.oauthbearer.scope"],
                   parse_extensions(conf["sasl.oauthbearer.extensions"]), context,
                   sub_claim=conf["sasl.oauthbearer.sub.claim.name"])

    def fetch(self) -> OAuthToken:
        """Ask the endpoint for a token; OidcError says why there is none."""
        data = None
        headers = dict(self._headers)
        form = self.grant.form()
        if form is not None:
            if self.scope:
                form["scope"] = self.scope
            data = urllib.parse.urlencode(form, quote_via=urllib.parse.quote).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(self.url, data=data, headers=headers,
                                         method=self.grant.method)
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
            return token_from_jwt(token, self.extensions, sub_claim=self.sub_claim)
        except OidcError as exc:
            raise OidcError(f"{where}: {exc}") from None


def _snippet(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."
