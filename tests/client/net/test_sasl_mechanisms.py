"""SASL mechanisms without a network: SCRAM against RFC 7677's test vector (both the
client and the tests' server side), tampered server messages refused, PLAIN's and
OAUTHBEARER's bytes, librdkafka's unsecured JWT, oauth_cb results, token refresh."""
from __future__ import annotations

import base64
import json
import threading
import time

import pytest

from kafka_client._net.security.oauth import TokenSource, token_from_callback, unsecured_jwt
from kafka_client._net.security.sasl import (
    OAuthBearerMechanism,
    OAuthToken,
    PlainMechanism,
    SaslError,
    ScramMechanism,
)
from kafka_client.testing._sasl import ScramCredential, ScramServer, check_unsecured_jwt

# RFC 7677 section 3 (SCRAM-SHA-256, user "user", password "pencil").
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_client_matches_rfc7677():
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert m.initial() == CLIENT_FIRST
    assert m.respond(SERVER_FIRST) == CLIENT_FINAL
    assert not m.complete
    assert m.respond(SERVER_FINAL) is None
    assert m.complete


def test_scram_server_matches_rfc7677():
    cred = ScramCredential.make("SCRAM-SHA-256", "pencil", salt=SALT, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}, nonce=SERVER_NONCE)
    assert server.first(CLIENT_FIRST) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    wrong = ScramServer("SCRAM-SHA-256", {"user": cred}, nonce=SERVER_NONCE)
    wrong.first(CLIENT_FIRST)
    with pytest.raises(ValueError):
        wrong.final(CLIENT_FINAL.replace(b"p=dHz", b"p=dHy"))


def test_scram_client_refuses_a_server_that_does_not_know_the_password():
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    m.initial()
    m.respond(SERVER_FIRST)
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    with pytest.raises(SaslError, match="signature does not match"):
        m.respond(forged)
    assert not m.complete


@pytest.mark.parametrize("server_first, reason", [
    (SERVER_FIRST.replace(b"r=rOprNGfwEbeRWgbNEkqO", b"r=XXXX"), "nonce"),
    (b"r=rOprNGfwEbeRWgbNEkqO", "lacks"),
    (SERVER_FIRST.replace(b"i=4096", b"i=100"), "iteration"),
    (SERVER_FIRST.replace(b"i=4096", b"i=x"), "iteration count"),
    (b"m=ext," + SERVER_FIRST, "extension"),
    (b"garbage", "malformed"),
])
def test_scram_client_refuses_bad_server_first(server_first, reason):
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    m.initial()
    with pytest.raises(SaslError, match=reason):
        m.respond(server_first)


def test_scram_server_error_is_reported():
    m = ScramMechanism("SCRAM-SHA-512", "u", "p")
    m.initial()
    cred = ScramCredential.make("SCRAM-SHA-512", "p")
    server = ScramServer("SCRAM-SHA-512", {"u": cred})
    final = m.respond(server.first(("n,," + m._client_first_bare).encode()))
    assert m.respond(server.final(final)) is None and m.complete
    m2 = ScramMechanism("SCRAM-SHA-512", "u", "p")
    m2.initial()
    m2.respond(ScramServer("SCRAM-SHA-512", {"u": cred}).first(b"n,,n=u,r=" +
                                                                m2.nonce.encode()))
    with pytest.raises(SaslError, match="invalid-proof"):
        m2.respond(b"e=invalid-proof")


def test_scram_username_escaping():
    m = ScramMechanism("SCRAM-SHA-256", "a=b,c", "p", nonce="n")
    assert m.initial() == b"n,,n=a=3Db=2Cc,r=n"


def test_plain_message():
    m = PlainMechanism("alice", "s3cret")
    assert m.initial() == b"\0alice\0s3cret"
    assert m.respond(b"") is None and m.complete


def test_unsecured_jwt_like_librdkafka():
    token = unsecured_jwt("principal=admin scope=a,b lifeSeconds=600 extension_traceId=123 "
                          "principalClaimName=azp", now=1_000_000)
    header, payload, signature = token.value.split(".")
    assert signature == ""
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    assert json.loads(base64.urlsafe_b64decode(pad(header))) == {"alg": "none"}
    claims = json.loads(base64.urlsafe_b64decode(pad(payload)))
    assert claims == {"azp": "admin", "iat": 1_000_000, "exp": 1_000_600, "scope": ["a", "b"]}
    assert token.expires_at == 1_000_600 and token.principal == "admin"
    assert token.extensions == {"traceId": "123"}
    with pytest.raises(ValueError, match="principal"):
        unsecured_jwt("scope=a")
    with pytest.raises(ValueError, match="unknown name"):
        unsecured_jwt("principal=a bogus=1")
    with pytest.raises(ValueError, match="lifeSeconds"):
        unsecured_jwt("principal=a lifeSeconds=soon")


def test_oauthbearer_message_and_error_challenge():
    token = OAuthToken("tok.en.", time.time() + 60, "me", {"b": "2", "a": "1"})
    m = OAuthBearerMechanism(lambda: token)
    assert m.initial() == b"n,,\x01auth=Bearer tok.en.\x01a=1\x01b=2\x01\x01"
    # RFC 7628: an error challenge is answered with a single 0x01
    assert m.respond(b'{"status":"invalid_token"}') == b"\x01"
    assert "invalid_token" in m.server_error and not m.complete
    ok = OAuthBearerMechanism(lambda: token)
    ok.initial()
    assert ok.respond(b"") is None and ok.complete
    # what the tests' server reads back from a real unsecured JWT
    jwt = unsecured_jwt("principal=bob extension_x=y")
    principal, exp, ext = check_unsecured_jwt(OAuthBearerMechanism(lambda: jwt).initial())
    assert principal == "bob" and ext == {"x": "y"} and exp == jwt.expires_at


def test_token_from_callback_shapes():
    t = token_from_callback(("abc", time.time() + 10))
    assert t.value == "abc" and t.principal == "" and t.extensions == {}
    t = token_from_callback(("abc", time.time() + 10, "p", {"k": "v"}))
    assert t.principal == "p" and t.extensions == {"k": "v"}
    for bad, why in [(("abc",), "return"), (("", time.time() + 10), "empty"),
                     (("abc", "soon"), "expiry"), (("abc", time.time() - 1), "expired")]:
        with pytest.raises(ValueError, match=why):
            token_from_callback(bad)


def test_token_source_refreshes_at_80_percent_and_reports_failures():
    calls = []
    errors = []
    fail = threading.Event()

    def fetch():
        calls.append(time.monotonic())
        if fail.is_set():
            raise RuntimeError("idp down")
        return OAuthToken(f"t{len(calls)}", time.time() + 0.5)

    source = TokenSource(fetch, on_error=lambda message, exc: errors.append(message))
    try:
        source.start()
        assert source.current().value == "t1"
        deadline = time.monotonic() + 3
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 2
        assert 0.3 <= calls[1] - calls[0] <= 1.0  # 80% of the 0.5 s lifetime
        assert source.current().value.startswith("t")
        fail.set()
        deadline = time.monotonic() + 3
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert errors and "idp down" in errors[0]
        time.sleep(0.6)  # the last token has expired by now
        with pytest.raises(SaslError, match="expired.*idp down"):
            source.current()
    finally:
        source.close()
