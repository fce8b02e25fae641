"""An OAuth 2.0 token endpoint for tests of ``sasl.oauthbearer.method=oidc``: a threaded
HTTP (or, with a certificate, HTTPS) server on a free loopback port that answers the
client credentials grant with unsecured JWTs (``alg: none``: the test cluster's
OAUTHBEARER check accepts those, as Kafka's default validator does) and records every
request it was sent.

It serves two grants: client credentials (HTTP Basic with ``client_id`` and
``client_secret``) and the JWT bearer grant (RFC 7523), whose ``assertion`` is accepted
when ``verify_assertion(assertion)`` (a test's check of the signature) returns True; and
GET requests with ``Metadata: true``, as Azure's instance metadata service.
Tests change what it answers through its attributes: ``lifetime`` (seconds of each
token), ``status`` / ``answer`` (an HTTP status and a raw body instead of a token),
``claims`` (claims added to, or with a value of None removed from, each token) and
``delay`` (seconds before answering).
"""
from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

from kafka_client._net.security.oauth import b64url_decode, jwt_segment
from kafka_client._testing.brokers import LOOPBACK

__all__ = ["TokenEndpoint", "TokenRequest", "unsecured_token", "JWT_BEARER_GRANT"]

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@dataclass
class TokenRequest:
    """One request the endpoint received."""

    method: str
    path: str
    headers: Dict[str, str]
    form: Dict[str, List[str]]
    body: bytes

    def basic_credentials(self) -> Optional[str]:
        """``id:secret`` of the Authorization header, when it is HTTP Basic."""
        value = self.headers.get("Authorization", "")
        if not value.startswith("Basic "):
            return None
        return base64.b64decode(value[len("Basic "):]).decode("utf-8")

    def assertion_parts(self) -> "tuple[Dict[str, Any], Dict[str, Any], bytes]":
        """Header, claims and signature of the JWT bearer grant's assertion."""
        header, claims, signature = self.form["assertion"][0].split(".")
        return (json.loads(b64url_decode(header)), json.loads(b64url_decode(claims)),
                b64url_decode(signature))


def unsecured_token(claims: Dict[str, Any]) -> str:
    """A JWT with ``alg: none`` carrying ``claims``."""
    return f"{jwt_segment({'alg': 'none'})}.{jwt_segment(claims)}."


class TokenEndpoint:
    """A token endpoint for ``client_id``/``client_secret`` whose tokens name
    ``principal`` (their ``sub``), on ``port`` (0: a free one). Use as a context manager
    or call :meth:`stop`."""

    def __init__(self, client_id: str = "kafka-client", client_secret: str = "s3cret",
                 principal: str = "alice", certificate: Optional[str] = None,
                 key: Optional[str] = None, path: str = "/oauth2/token",
                 port: int = 0) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.principal = principal
        self.lifetime = 600.0
        self.status: Optional[int] = None
        self.answer: Optional[bytes] = None
        self.claims: Dict[str, Any] = {}
        self.delay = 0.0
        self.verify_assertion: Callable[[str], bool] = lambda _assertion: False
        self.requests: List[TokenRequest] = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                endpoint._serve(self)

            def do_GET(self) -> None:
                endpoint._serve(self)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, port), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if certificate is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(certificate, key)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://{LOOPBACK}:{self._server.server_port}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="token-endpoint", daemon=True)
        self._thread.start()

    def __enter__(self) -> "TokenEndpoint":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def taken(self) -> List[TokenRequest]:
        """The requests so far."""
        with self._lock:
            return list(self.requests)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        request = TokenRequest(handler.command, handler.path, dict(handler.headers.items()),
                               urllib.parse.parse_qs(body.decode("utf-8", "replace")), body)
        with self._lock:
            self.requests.append(request)
        if self.delay:
            time.sleep(self.delay)
        status, answer = self._answer(request)
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        handler.wfile.write(answer)

    def _answer(self, request: TokenRequest) -> "tuple[int, bytes]":
        if self.status is not None or self.answer is not None:
            return self.status or 200, self.answer or b""
        grant = request.form.get("grant_type")
        if request.method == "GET":
            if request.headers.get("Metadata") != "true":   # as Azure's IMDS
                return 400, b'{"error":"bad_request","error_description":"no Metadata"}'
        elif grant not in (["client_credentials"], [JWT_BEARER_GRANT]):
            return 400, b'{"error":"unsupported_grant_type"}'
        elif grant == [JWT_BEARER_GRANT]:
            if not self.verify_assertion(request.form.get("assertion", [""])[0]):
                return 400, b'{"error":"invalid_grant"}'
        elif request.basic_credentials() != f"{self.client_id}:{self.client_secret}":
            return 401, b'{"error":"invalid_client"}'
        now = time.time()
        claims: Dict[str, Any] = {"sub": self.principal, "iat": int(now),
                                  "exp": now + self.lifetime}
        scope = request.form.get("scope")
        if scope:
            claims["scope"] = scope[0]
        for name, value in self.claims.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        token = unsecured_token(claims)
        return 200, json.dumps({"access_token": token, "token_type": "Bearer",
                                "expires_in": int(self.lifetime)}).encode()
