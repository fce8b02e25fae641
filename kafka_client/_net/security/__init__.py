"""Security of broker connections: TLS (:mod:`.tls`) and SASL (:mod:`.sasl`,
:mod:`.oauth`, :mod:`.oidc`, :mod:`.gssapi`).

:class:`SecuritySettings` is built once per client from its configuration (bad files,
missing credentials and unsupported mechanisms fail there, naming the property); every
connection of the client asks it for an :class:`ssl.SSLContext` and, per authentication,
a fresh :class:`~.sasl.SaslMechanism`.
"""
from __future__ import annotations

import logging
import ssl
import threading
from typing import Any, Callable, Mapping, Optional

from kafka_client._net.security import gssapi
from kafka_client._net.security.oauth import TokenSource, token_from_callback, unsecured_jwt
from kafka_client._net.security.oidc import OidcError, OidcTokenEndpoint
from kafka_client._net.security.sasl import (
    SCRAM_HASHES,
    OAuthBearerMechanism,
    OAuthToken,
    PlainMechanism,
    SaslError,
    SaslMechanism,
    ScramMechanism,
)
from kafka_client._net.security.tls import TlsConfigError, build_ssl_context

__all__ = ["SecuritySettings", "SecurityConfigError", "SUPPORTED_MECHANISMS",
           "SaslError", "SaslMechanism", "OAuthToken"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


class SecurityConfigError(ValueError):
    """The security configuration cannot work; the message names the property."""


class SecuritySettings:
    """What ``security.protocol``, ``ssl.*`` and ``sasl.*`` ask for, ready to use.

    ``ssl_context`` is None for plaintext and SASL_PLAINTEXT; ``mechanism`` None when no
    SASL is used. ``tokens`` is the OAUTHBEARER token source, if any; ``kerberos`` the
    GSSAPI ticket refresher (sasl.kerberos.kinit.cmd), if any, and ``service_name``
    the brokers' Kerberos service (sasl.kerberos.service.name).
    """

    def __init__(self, protocol: str = "plaintext",
                 ssl_context: Optional[ssl.SSLContext] = None,
                 mechanism: Optional[str] = None, username: Optional[str] = None,
                 password: Optional[str] = None,
                 tokens: Optional[TokenSource] = None,
                 kerberos: Optional[gssapi.KinitRefresher] = None,
                 service_name: str = "kafka") -> None:
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.mechanism = mechanism
        self._lock = threading.Lock()
        self._username = username
        self._password = password
        self.tokens = tokens
        self.kerberos = kerberos
        self.service_name = service_name

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> "SecuritySettings":
        """Build from a client configuration (every property present). Raises
        SecurityConfigError naming what is wrong; with OAUTHBEARER, fetches the first
        token (calling ``oauth_cb``); with GSSAPI, runs the kinit command."""
        protocol = conf["security.protocol"]
        ctx = None
        if protocol in ("ssl", "sasl_ssl"):
            try:
                ctx = build_ssl_context(conf)
            except TlsConfigError as exc:
                raise SecurityConfigError(str(exc)) from None
        if protocol not in ("sasl_plaintext", "sasl_ssl"):
            return cls(protocol, ctx)
        mechanism = conf["sasl.mechanism"].strip().upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise SecurityConfigError(
                f'"sasl.mechanism" "{conf["sasl.mechanism"]}" is not supported: use one of '
                f"{', '.join(SUPPORTED_MECHANISMS)}")
        if mechanism == "GSSAPI":
            return cls(protocol, ctx, mechanism, kerberos=_kerberos_login(conf),
                       service_name=conf["sasl.kerberos.service.name"])
        username, password = conf["sasl.username"], conf["sasl.password"]
        tokens = None
        if mechanism == "OAUTHBEARER":
            tokens = _token_source(conf)
        elif username is None or password is None:
            raise SecurityConfigError(
                f'"sasl.mechanism" {mechanism} needs "sasl.username" and "sasl.password"')
        return cls(protocol, ctx, mechanism, username, password, tokens)

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    def set_credentials(self, username: str, password: str) -> None:
        """New PLAIN/SCRAM credentials for the next authentications (librdkafka's
        ``set_sasl_credentials``; connections already up keep theirs)."""
        if not isinstance(username, str) or not isinstance(password, str):
            raise TypeError("username and password must be strings")
        with self._lock:
            self._username, self._password = username, password

    def new_mechanism(self, host: str = "") -> SaslMechanism:
        """A mechanism object for one authentication (to the broker at ``host``)."""
        mech = self.mechanism
        if mech is None:
            raise SaslError("no SASL mechanism configured")
        if mech == "GSSAPI":
            return gssapi.GssapiMechanism(self.service_name, host)
        if mech == "OAUTHBEARER":
            tokens = self.tokens
            assert tokens is not None
            return OAuthBearerMechanism(tokens.current)
        with self._lock:
            username, password = self._username or "", self._password or ""
        if mech == "PLAIN":
            return PlainMechanism(username, password)
        if mech in SCRAM_HASHES:
            return ScramMechanism(mech, username, password)
        raise SaslError(f"unsupported SASL mechanism {mech}")  # pragma: no cover

    def close(self) -> None:
        if self.tokens is not None:
            self.tokens.close()
        if self.kerberos is not None:
            self.kerberos.close()


def _kerberos_login(conf: Mapping[str, Any]) -> Optional[gssapi.KinitRefresher]:
    """GSSAPI's checks, then the first ticket: sasl.kerberos.kinit.cmd run now and every
    sasl.kerberos.min.time.before.relogin ms (never when 0: the ticket is the
    application's to renew), as librdkafka runs it."""
    why = gssapi.available()
    if why:
        raise SecurityConfigError(why)
    interval_ms = conf["sasl.kerberos.min.time.before.relogin"]
    if not interval_ms or not conf["sasl.kerberos.kinit.cmd"]:
        return None
    try:
        command = gssapi.render_kinit_cmd(conf)
    except ValueError as exc:
        raise SecurityConfigError(str(exc)) from None
    refresher = gssapi.KinitRefresher(command, interval_ms / 1000.0,
                                      conf.get("logger") or logging.getLogger(
                                          "kafka_client.security"))
    refresher.start()
    return refresher


def _token_source(conf: Mapping[str, Any]) -> TokenSource:
    oauth_cb: Optional[Callable[[Any], Any]] = conf["oauth_cb"]
    settings = conf["sasl.oauthbearer.config"]
    if oauth_cb is not None:
        def fetch() -> OAuthToken:
            return token_from_callback(oauth_cb(settings))
    elif conf["sasl.oauthbearer.method"] == "oidc":
        try:
            fetch = OidcTokenEndpoint.from_config(conf).fetch
        except ValueError as exc:
            raise SecurityConfigError(str(exc)) from None
    elif conf["enable.sasl.oauthbearer.unsecure.jwt"]:
        def fetch() -> OAuthToken:
            return unsecured_jwt(settings)
    else:
        raise SecurityConfigError(
            '"sasl.mechanism" OAUTHBEARER needs "oauth_cb" (a function returning a token '
            'and its expiry) or "enable.sasl.oauthbearer.unsecure.jwt": true (for tests)')
    source = TokenSource(fetch, log=conf.get("logger"))
    try:
        source.start()
    except OidcError as exc:
        if not exc.transient:   # asking again cannot help: the configuration is wrong
            raise SecurityConfigError(f"cannot get the first OAUTHBEARER token: {exc}") \
                from None
        # The endpoint is down or busy: the client starts, as librdkafka's, and asks
        # again; connections fail their authentication with this reason until then.
        source.failed(exc)
    except Exception as exc:
        raise SecurityConfigError(f"cannot get the first OAUTHBEARER token: {exc}") from None
    return source
