"""sasl.oauthbearer.method=oidc: the token request as librdkafka makes it (checked on the
wire of a local token endpoint), the token read from the answer's JWT, every way the
endpoint can fail (each a clear error, transient or not), HTTPS verification with
https.ca.location / https.ca.pem, and the configuration rules."""
from __future__ import annotations

import base64
import logging
import time

import pytest

from kafka_client import KafkaError, KafkaException, Producer
from kafka_client._net.security import SaslError
from kafka_client._net.security.oidc import (
    OidcError,
    OidcTokenEndpoint,
    parse_extensions,
    token_from_jwt,
)
from kafka_client._testing.brokers import free_port
from kafka_client._testing.oidc import TokenEndpoint, unsecured_token
from kafka_client._testing.tls import make_certificates
from kafka_client.config import ClientConfig


@pytest.fixture
def endpoint():
    with TokenEndpoint() as ep:
        yield ep


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(str(tmp_path_factory.mktemp("oidc-certs")))


def oidc_conf(ep, **extra):
    conf = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": ep.url,
            "sasl.oauthbearer.client.id": ep.client_id,
            "sasl.oauthbearer.client.secret": ep.client_secret}
    conf.update(extra)
    return conf


def fetch(conf):
    """One token request made as the client makes it, from the OIDC properties of
    ``conf`` (a ClientConfig would fetch its own first token too)."""
    props = {name: None for name in (
        "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions", "https.ca.location",
        "https.ca.pem")}
    props.update(conf)
    return OidcTokenEndpoint.from_config(props).fetch()


def test_the_request_is_librdkafkas_client_credentials_grant(endpoint):
    token = fetch(oidc_conf(endpoint, **{
        "sasl.oauthbearer.scope": "kafka read",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1, identityPoolId=pool-2"}))
    (request,) = endpoint.taken()
    assert request.method == "POST" and request.path == "/oauth2/token"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert request.basic_credentials() == "kafka-client:s3cret"
    assert request.form == {"grant_type": ["client_credentials"], "scope": ["kafka read"]}
    assert request.body == b"grant_type=client_credentials&scope=kafka%20read"
    assert token.principal == "alice"
    assert abs(token.expires_at - (time.time() + 600)) < 5
    assert token.extensions == {"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}
    assert token.value.count(".") == 2


def test_no_scope_is_asked_for_unless_set(endpoint):
    fetch(oidc_conf(endpoint))
    assert endpoint.taken()[0].form == {"grant_type": ["client_credentials"]}


def test_credentials_are_sent_as_given(endpoint):
    endpoint.client_id, endpoint.client_secret = "id:with:colons", "sëcret"
    fetch(oidc_conf(endpoint))
    raw = endpoint.taken()[0].headers["Authorization"].split()[1]
    assert base64.b64decode(raw) == "id:with:colons:sëcret".encode()


@pytest.mark.parametrize("status,answer,transient,expected", [
    (401, b'{"error":"invalid_client"}', False,
     'HTTP 401 Unauthorized: {"error":"invalid_client"}'),
    (403, b"", False, "HTTP 403 Forbidden"),
    (503, b"down for maintenance", True, "HTTP 503 Service Unavailable: down for maintenance"),
    (429, b"", True, "HTTP 429"),
    (302, b"", False, "HTTP 302"),
    (200, b"<html>login</html>", False, "something other than JSON: <html>login</html>"),
    (200, b'{"token_type":"Bearer"}', False, 'without an "access_token"'),
    (200, b'{"access_token":"opaque"}', False, "not a JWT"),
    (200, b'{"access_token":"a.!!!.c"}', False, "not base64url-encoded JSON"),
    (200, b'["access_token"]', False, 'without an "access_token"'),
])
def test_a_bad_answer_is_a_clear_error(endpoint, status, answer, transient, expected):
    endpoint.status, endpoint.answer = status, answer
    with pytest.raises(OidcError) as failed:
        fetch(oidc_conf(endpoint))
    assert endpoint.url in str(failed.value) and expected in str(failed.value)
    assert failed.value.transient is transient


@pytest.mark.parametrize("claims,expected", [
    ({"exp": None}, 'no numeric "exp" claim'),
    ({"exp": "tomorrow"}, 'no numeric "exp" claim'),
    ({"sub": None}, 'no "sub" claim'),
    ({"sub": ""}, 'no "sub" claim'),
    ({"exp": 1000}, "expired already"),
])
def test_the_jwt_must_say_who_and_until_when(endpoint, claims, expected):
    endpoint.claims = claims
    with pytest.raises(OidcError, match=expected) as failed:
        fetch(oidc_conf(endpoint))
    assert not failed.value.transient


def test_token_from_jwt_reads_exp_and_sub():
    token = token_from_jwt(unsecured_token({"sub": "bob", "exp": 2000.5}), {"a": "b"},
                           now=1000)
    assert (token.principal, token.expires_at, token.extensions) == ("bob", 2000.5,
                                                                      {"a": "b"})


def test_an_unreachable_endpoint_is_transient():
    url = f"http://127.0.0.1:{free_port()}/token"
    with pytest.raises(OidcError, match="cannot be reached") as failed:
        OidcTokenEndpoint(url, "id", "secret").fetch()
    assert failed.value.transient and url in str(failed.value)


def test_a_silent_endpoint_times_out(endpoint):
    endpoint.delay = 2.0
    started = time.monotonic()
    with pytest.raises(OidcError) as failed:
        OidcTokenEndpoint(endpoint.url, endpoint.client_id, endpoint.client_secret,
                          timeout=0.3).fetch()
    assert time.monotonic() - started < 1.5
    assert failed.value.transient and "0.3" in str(failed.value)


def test_https_endpoint_verified_against_the_configured_ca(certs):
    with TokenEndpoint(certificate=str(certs.server_cert), key=str(certs.server_key)) as ep:
        assert ep.url.startswith("https://")
        assert fetch(oidc_conf(ep, **{"https.ca.location": str(certs.ca)})).principal == "alice"
        pem = certs.ca.read_text()
        assert fetch(oidc_conf(ep, **{"https.ca.pem": pem})).principal == "alice"
        with pytest.raises(OidcError, match="TLS failed") as failed:
            fetch(oidc_conf(ep, **{"https.ca.location": str(certs.other_ca)}))
        assert not failed.value.transient
        with pytest.raises(OidcError, match="TLS failed"):   # the system's CAs
            fetch(oidc_conf(ep))
        assert len(ep.taken()) == 2


def test_a_missing_ca_file_names_the_property(endpoint, tmp_path):
    conf = oidc_conf(endpoint, **{"https.ca.location": str(tmp_path / "nope.pem")})
    conf["sasl.oauthbearer.token.endpoint.url"] = "https://127.0.0.1:1/token"
    with pytest.raises(ValueError, match='"https.ca.location": .*nope.pem: no such file'):
        fetch(conf)


@pytest.mark.parametrize("text,expected", [
    ("", {}), (" a=1 , b=x y ", {"a": "1", "b": "x y"}), ("a=", None), ("noequals", None),
    ("auth=x", None), ("bad-name=1", None), ("a=\x00", None),
])
def test_extensions(text, expected):
    if expected is not None:
        assert parse_extensions(text) == expected
        return
    with pytest.raises(ValueError, match='"sasl.oauthbearer.extensions"'):
        parse_extensions(text)


def invalid(conf) -> str:
    with pytest.raises(KafkaException) as info:
        Producer(conf)
    assert info.value.args[0].code() == KafkaError._INVALID_ARG
    return info.value.args[0].str()


@pytest.mark.parametrize("missing", ["sasl.oauthbearer.token.endpoint.url",
                                     "sasl.oauthbearer.client.id",
                                     "sasl.oauthbearer.client.secret"])
def test_oidc_needs_an_endpoint_and_credentials(endpoint, missing):
    conf = oidc_conf(endpoint)
    del conf[missing]
    msg = invalid(conf)
    assert f'"{missing}" is mandatory' in msg and "sasl.oauthbearer.method=oidc" in msg


def test_oidc_configuration_conflicts(endpoint):
    msg = invalid(oidc_conf(endpoint, **{"enable.sasl.oauthbearer.unsecure.jwt": True}))
    assert "mutually exclusive" in msg
    msg = invalid(oidc_conf(endpoint, **{"https.ca.location": "/x", "https.ca.pem": "y"}))
    assert '"https.ca.location" and "https.ca.pem" are mutually exclusive' in msg
    msg = invalid(oidc_conf(endpoint, **{"sasl.oauthbearer.token.endpoint.url": "ftp://x/t"}))
    assert "ftp://x/t" in msg and "http:// or https://" in msg
    msg = invalid(oidc_conf(endpoint, **{"sasl.oauthbearer.extensions": "noequals"}))
    assert '"sasl.oauthbearer.extensions"' in msg


def test_oauth_cb_takes_precedence_as_in_confluent_kafka(endpoint, caplog):
    from kafka_client._net.security.oauth import unsecured_jwt

    def oauth_cb(_config):
        token = unsecured_jwt("principal=carol")
        return token.value, token.expires_at, "carol", {}

    with caplog.at_level(logging.WARNING, logger="kafka_client"):
        conf = ClientConfig.from_dict(oidc_conf(endpoint, oauth_cb=oauth_cb), "producer")
    try:
        assert conf.security.tokens.current().principal == "carol"
    finally:
        conf.security.close()
    assert not endpoint.taken()
    assert any("oauth_cb is set" in r.getMessage() for r in caplog.records)


def test_a_refused_first_token_fails_the_constructor(endpoint):
    with pytest.raises(KafkaException) as info:
        Producer(oidc_conf(endpoint, **{"bootstrap.servers": "127.0.0.1:1",
                                        "sasl.oauthbearer.client.secret": "wrong"}))
    text = info.value.args[0].str()
    assert "cannot get the first OAUTHBEARER token" in text and "HTTP 401" in text
    assert endpoint.url in text


def test_an_unreachable_endpoint_does_not_fail_the_constructor():
    """As librdkafka: the endpoint may be down for a while; the client starts and the
    reason reaches the connections' authentication errors."""
    url = f"http://127.0.0.1:{free_port()}/token"
    conf = ClientConfig.from_dict({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": url,
        "sasl.oauthbearer.client.id": "id", "sasl.oauthbearer.client.secret": "s"},
        "producer")
    try:
        with pytest.raises(SaslError, match="no OAUTHBEARER token: .*cannot be reached"):
            conf.security.tokens.current()
    finally:
        conf.security.close()
