"""TLS for broker connections: an :class:`ssl.SSLContext` built from librdkafka's ``ssl.*``
properties.

What each property does here:

* ``ssl.ca.location`` (a PEM file or a directory of hashed certificates; ``probe``: the
  system store), ``ssl.ca.pem``; neither: the system's CA store;
* ``ssl.certificate.location`` / ``ssl.certificate.pem`` with ``ssl.key.location`` /
  ``ssl.key.pem`` and ``ssl.key.password``: the client certificate (mutual TLS);
* ``ssl.keystore.location`` / ``ssl.keystore.password``: the client certificate and key
  from a PKCS#12 file (read with the ``cryptography`` package when it is installed, else
  with the ``openssl`` command);
* ``ssl.crl.location``: a CRL file, checked for the broker's certificate;
* ``ssl.cipher.suites``: OpenSSL cipher list for TLS 1.2 and older;
* ``ssl.curves.list``: one curve name (Python's ``ssl`` can set only one);
* ``ssl.endpoint.identification.algorithm``: ``https`` (default) checks the broker's host
  name against its certificate, ``none`` does not;
* ``enable.ssl.certificate.verification``: false accepts any certificate;
* ``ssl.providers``, ``ssl.sigalgs.list``, ``ssl.engine.location`` / ``ssl.engine.id``:
  made through OpenSSL directly (:mod:`._openssl`), refused where that cannot be done.

Contexts are built once per client, on the application thread, so a bad file fails the
constructor with a message naming the property.
"""
from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import tempfile
from typing import Any, Callable, Mapping, Optional, Union

from kafka_client._net.security import _openssl

__all__ = ["TlsConfigError", "build_ssl_context"]


class TlsConfigError(ValueError):
    """A TLS property names something that cannot be loaded; the message names it."""


def build_ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    """An SSLContext for connecting to brokers, from a configuration mapping that has
    every ``ssl.*`` property (a :class:`~kafka_client.config.ClientConfig`)."""
    providers = conf["ssl.providers"]
    if providers:  # before the context is made, as librdkafka loads them
        _through_openssl("ssl.providers", _openssl.load_providers, providers)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    verify = conf["enable.ssl.certificate.verification"]
    ctx.check_hostname = verify and conf["ssl.endpoint.identification.algorithm"] == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE

    _load_cas(ctx, "ssl.ca", conf["ssl.ca.location"], conf["ssl.ca.pem"])

    crl = conf["ssl.crl.location"]
    if crl:
        _load(ctx.load_verify_locations, "ssl.crl.location", crl, cafile=crl)
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF

    _load_client_certificate(ctx, conf)

    ciphers = conf["ssl.cipher.suites"]
    if ciphers:
        try:
            ctx.set_ciphers(ciphers)
        except ssl.SSLError as exc:
            raise TlsConfigError(
                f'"ssl.cipher.suites": no usable cipher in "{ciphers}": {exc}') from None
    curves = conf["ssl.curves.list"]
    if curves:
        try:
            ctx.set_ecdh_curve(curves.strip())
        except (ValueError, ssl.SSLError) as exc:
            raise TlsConfigError(f'"ssl.curves.list": unknown curve "{curves}": {exc}') from None
    sigalgs = conf["ssl.sigalgs.list"]
    if sigalgs:
        _through_openssl("ssl.sigalgs.list", _openssl.set_sigalgs, ctx, sigalgs.strip())
    engine = conf["ssl.engine.location"]
    if engine:
        own_certificate = not (conf["ssl.certificate.location"] or conf["ssl.certificate.pem"]
                               or conf["ssl.keystore.location"])
        _through_openssl("ssl.engine.location", _openssl.load_engine, ctx, engine,
                         conf["ssl.engine.id"], own_certificate)
    return ctx


def build_https_context(ca_location: Optional[str],
                        ca_pem: Union[str, bytes, None]) -> ssl.SSLContext:
    """An SSLContext for HTTPS requests of the client (the OIDC token endpoint), verified
    against ``https.ca.location`` / ``https.ca.pem`` or the system's CAs."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)   # verifies the host name and chain
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_cas(ctx, "https.ca", ca_location, ca_pem)
    return ctx


def _load_cas(ctx: ssl.SSLContext, prefix: str, location: Optional[str],
              pem: Union[str, bytes, None]) -> None:
    """The CAs of ``<prefix>.location`` (a PEM file or a directory of hashed
    certificates; ``probe``: the system's) and ``<prefix>.pem``; the system's when
    neither is given."""
    pem_text = _as_pem(pem, "CERTIFICATE")
    if location and location != "probe":
        _load(ctx.load_verify_locations, f"{prefix}.location", location,
              **({"capath": location} if os.path.isdir(location) else {"cafile": location}))
    if pem_text:
        _load(ctx.load_verify_locations, f"{prefix}.pem", None, cadata=pem_text)
    if not pem_text and (not location or location == "probe"):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)


def _through_openssl(prop: str, fn: Callable[..., None], *args: Any) -> None:
    """A setting made through OpenSSL directly (see _openssl); refused, naming the
    property and why, where that cannot be done."""
    try:
        fn(*args)
    except _openssl.OpenSSLError as exc:
        raise TlsConfigError(f'"{prop}": {exc}') from None


def _as_pem(value: Union[str, bytes, None], label: str) -> Optional[str]:
    """PEM text from a PEM string, PEM bytes or DER bytes (wrapped as ``label``: a
    CERTIFICATE, or a PKCS#8 PRIVATE KEY), as librdkafka's set_ssl_cert() takes either."""
    if value is None or isinstance(value, str):
        return value
    if value.lstrip().startswith(b"-----BEGIN"):
        return value.decode("ascii")
    text = base64.b64encode(value).decode("ascii")
    lines = "\n".join(text[i:i + 64] for i in range(0, len(text), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"


def _load(fn: Callable[..., Any], prop: str, path: Optional[str], **kwargs: Any) -> None:
    try:
        fn(**kwargs)
    except FileNotFoundError:
        raise TlsConfigError(f'"{prop}": {path}: no such file or directory') from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        where = f"{path}: " if path else ""
        raise TlsConfigError(f'"{prop}": {where}cannot be loaded: {exc}') from None


def _load_client_certificate(ctx: ssl.SSLContext, conf: Mapping[str, Any]) -> None:
    cert_file = conf["ssl.certificate.location"]
    cert_pem = _as_pem(conf["ssl.certificate.pem"], "CERTIFICATE")
    key_file, key_pem = conf["ssl.key.location"], _as_pem(conf["ssl.key.pem"], "PRIVATE KEY")
    password = conf["ssl.key.password"]
    keystore = conf["ssl.keystore.location"]
    if keystore:
        if cert_file or cert_pem or key_file or key_pem:
            raise TlsConfigError(
                '"ssl.keystore.location" cannot be combined with "ssl.certificate.*" or '
                '"ssl.key.*"')
        cert_pem, key_pem = _read_pkcs12(keystore, conf["ssl.keystore.password"])
        password = None
    has_cert, has_key = bool(cert_file or cert_pem), bool(key_file or key_pem)
    if not has_cert and not has_key:
        return
    if has_cert != has_key:
        missing = "ssl.key.location or ssl.key.pem" if has_cert else \
            "ssl.certificate.location or ssl.certificate.pem"
        raise TlsConfigError(f"a client certificate needs both a certificate and a key: "
                             f"set {missing}")
    # load_cert_chain reads files only: PEM strings go through a private temporary folder
    # that is removed as soon as they are loaded.
    tmp: Optional[str] = None
    try:
        if cert_pem or key_pem:
            tmp = tempfile.mkdtemp(prefix="kafka-native-tls-")
            if cert_pem:
                cert_file = _write_private(tmp, "cert.pem", cert_pem)
            if key_pem:
                key_file = _write_private(tmp, "key.pem", key_pem)
        prop = "ssl.keystore.location" if keystore else (
            "ssl.certificate.location" if conf["ssl.certificate.location"]
            else "ssl.certificate.pem")
        try:
            ctx.load_cert_chain(cert_file, key_file, password=password)
        except FileNotFoundError as exc:
            raise TlsConfigError(f'"{prop}": {exc.filename}: no such file') from None
        except ssl.SSLError as exc:
            hint = " (wrong ssl.key.password?)" if password or "password" in str(exc) else ""
            raise TlsConfigError(
                f'"{prop}": the client certificate and key cannot be loaded: '
                f"{exc}{hint}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _write_private(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def _read_pkcs12(path: str, password: Optional[str]) -> "tuple[str, str]":
    """(certificate chain PEM, unencrypted key PEM) from a PKCS#12 keystore."""
    if not os.path.isfile(path):
        raise TlsConfigError(f'"ssl.keystore.location": {path}: no such file')
    with open(path, "rb") as f:
        data = f.read()
    secret = (password or "").encode()
    try:
        from cryptography.hazmat.primitives.serialization import (  # type: ignore
            Encoding, NoEncryption, PrivateFormat, pkcs12)
    except ImportError:
        return _read_pkcs12_with_openssl(path, secret)
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, secret)
    except ValueError as exc:
        raise TlsConfigError(f'"ssl.keystore.location": {path}: cannot be read (wrong '
                             f'"ssl.keystore.password"?): {exc}') from None
    if key is None or cert is None:
        raise TlsConfigError(f'"ssl.keystore.location": {path}: holds no key and certificate')
    chain = cert.public_bytes(Encoding.PEM) + b"".join(
        c.public_bytes(Encoding.PEM) for c in (extra or ()))
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    return chain.decode(), key_pem.decode()


def _read_pkcs12_with_openssl(path: str, secret: bytes) -> "tuple[str, str]":
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsConfigError(
            '"ssl.keystore.location": reading PKCS#12 needs the "cryptography" package '
            '(pip install cryptography) or the "openssl" command; neither is installed')

    def run(*args: str) -> str:
        # The password goes through a pipe, never the command line.
        proc = subprocess.run([openssl, "pkcs12", "-in", path, "-passin", "stdin",
                               "-nodes", *args], input=secret + b"\n",
                              capture_output=True, timeout=30)
        if proc.returncode != 0:
            raise TlsConfigError(
                f'"ssl.keystore.location": {path}: cannot be read (wrong '
                f'"ssl.keystore.password"?): {proc.stderr.decode(errors="replace").strip()}')
        return proc.stdout.decode()

    # The client's own certificate first (load_cert_chain wants it before the CA chain).
    certs = run("-nokeys", "-clcerts") + run("-nokeys", "-cacerts")
    key = run("-nocerts")
    if "PRIVATE KEY" not in key or "CERTIFICATE" not in certs:
        raise TlsConfigError(f'"ssl.keystore.location": {path}: holds no key and certificate')
    return certs, key
