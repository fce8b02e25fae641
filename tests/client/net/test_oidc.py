"""sasl.oauthbearer.method=oidc: the token requests of both grants as librdkafka makes
them (checked on the wire of a local token endpoint; the JWT bearer grant's assertion
verified with the public key), the token read from the answer's JWT, every way the
endpoint can fail (each a clear error, transient or not), HTTPS verification with
https.ca.location / https.ca.pem, and the configuration rules."""
from __future__ import annotations

import base64
import logging
import sys
import time

import pytest

from kafka_client import KafkaError, KafkaException, Producer
from kafka_client._net.security import SaslError
from kafka_client._net.security.oidc import (
    JWT_BEARER_GRANT,
    ClientCredentials,
    OidcError,
    OidcTokenEndpoint,
    parse_extensions,
    token_from_jwt,
)
from kafka_client._testing.brokers import free_port
from kafka_client._testing.oidc import TokenEndpoint, unsecured_token
from kafka_client._testing.tls import make_certificates
from kafka_client.config import PROPERTIES, ClientConfig


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
    props = {name: prop.default for name, prop in PROPERTIES.items()}
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


def test_the_principal_claim_is_sasl_oauthbearer_sub_claim_name(endpoint):
    """librdkafka 2.16's sasl.oauthbearer.sub.claim.name: the token's principal is read
    from that claim (it was "No such configuration property", always "sub")."""
    endpoint.claims = {"sub": None, "upn": "alice@example"}
    token = fetch(oidc_conf(endpoint, **{"sasl.oauthbearer.sub.claim.name": "upn"}))
    assert token.principal == "alice@example"
    with pytest.raises(OidcError, match='no "sub" claim'):
        fetch(oidc_conf(endpoint))
    endpoint.claims = {"sub": "bob"}
    with pytest.raises(OidcError, match='no "upn" claim'):
        fetch(oidc_conf(endpoint, **{"sasl.oauthbearer.sub.claim.name": "upn"}))
    conf = ClientConfig.from_dict(oidc_conf(endpoint), "producer")
    assert conf["sasl.oauthbearer.sub.claim.name"] == "sub"


def test_token_from_jwt_reads_exp_and_sub():
    token = token_from_jwt(unsecured_token({"sub": "bob", "exp": 2000.5}), {"a": "b"},
                           now=1000)
    assert (token.principal, token.expires_at, token.extensions) == ("bob", 2000.5,
                                                                      {"a": "b"})


def test_an_unreachable_endpoint_is_transient():
    url = f"http://127.0.0.1:{free_port()}/token"
    with pytest.raises(OidcError, match="cannot be reached") as failed:
        OidcTokenEndpoint(url, ClientCredentials("id", "secret")).fetch()
    assert failed.value.transient and url in str(failed.value)


def test_a_silent_endpoint_times_out(endpoint):
    endpoint.delay = 2.0
    started = time.monotonic()
    with pytest.raises(OidcError) as failed:
        OidcTokenEndpoint(endpoint.url,
                          ClientCredentials(endpoint.client_id, endpoint.client_secret),
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


def test_a_first_token_that_failed_before_the_client_was_wired_reaches_error_cb():
    """The first token fails (the endpoint is down) while the configuration is read,
    before the client has its error_cb wired: the failure still reaches error_cb at the
    first poll(), as _AUTHENTICATION naming the endpoint (it was only logged). The same
    window lost a short-lived token's failed refresh on a loaded machine."""
    url = f"http://127.0.0.1:{free_port()}/token"
    errors = []
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "sasl_plaintext",
                  "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                  "sasl.oauthbearer.token.endpoint.url": url,
                  "sasl.oauthbearer.client.id": "id", "sasl.oauthbearer.client.secret": "s",
                  "error_cb": errors.append, "log_level": 0})
    try:
        p.poll(0)
        refused = [e for e in errors if "token refresh failed" in e.str()]
        assert [e.code() for e in refused] == [KafkaError._AUTHENTICATION], errors
        assert url in refused[0].str()
    finally:
        p.close()


# -- the JWT bearer grant (RFC 7523) -----------------------------------------------------

@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """An RSA key, an EC P-256 key, an encrypted copy of the RSA key (PEM files) and the
    public keys that check their signatures."""
    crypto = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    folder = tmp_path_factory.mktemp("oidc-keys")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())

    def write(name, key, encryption=crypto.NoEncryption()):
        path = folder / name
        path.write_bytes(key.private_bytes(crypto.Encoding.PEM, crypto.PrivateFormat.PKCS8,
                                           encryption))
        return str(path)

    return {"rsa": write("rsa.pem", rsa_key), "ec": write("ec.pem", ec_key),
            "rsa_encrypted": write("rsa-enc.pem", rsa_key,
                                   crypto.BestAvailableEncryption(b"key-pass")),
            "rsa_public": rsa_key.public_key(), "ec_public": ec_key.public_key(),
            "folder": folder}


def verifies(assertion, public_key):
    """Whether ``assertion``'s JWS signature (RS256 or ES256) checks with the key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    signing_input, _, signature = assertion.rpartition(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            if len(raw) != 64:        # r and s, 32 bytes each (RFC 7518 section 3.4)
                return False
            der = encode_dss_signature(int.from_bytes(raw[:32], "big"),
                                       int.from_bytes(raw[32:], "big"))
            public_key.verify(der, signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        else:
            public_key.verify(raw, signing_input.encode(), padding.PKCS1v15(),
                              hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def bearer_conf(ep, **extra):
    conf = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": ep.url,
            "sasl.oauthbearer.grant.type": JWT_BEARER_GRANT}
    conf.update(extra)
    return conf


def test_jwt_bearer_request_and_rs256_assertion(endpoint, keys):
    endpoint.verify_assertion = lambda a: verifies(a, keys["rsa_public"])
    before = time.time()
    token = fetch(bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.private.key.file": keys["rsa"],
        "sasl.oauthbearer.scope": "kafka"}))
    assert token.principal == "alice"
    (request,) = endpoint.taken()
    assert "Authorization" not in request.headers
    assert set(request.form) == {"grant_type", "assertion", "scope"}
    assert request.form["grant_type"] == [JWT_BEARER_GRANT]
    header, claims, _signature = request.assertion_parts()
    assert header == {"alg": "RS256", "typ": "JWT"}
    assert set(claims) == {"iat", "exp", "nbf"}
    assert before - 1 <= claims["iat"] <= time.time()
    assert claims["exp"] == claims["iat"] + 300 and claims["nbf"] == claims["iat"] - 60


def test_jwt_bearer_es256_signature_is_jws_r_and_s(endpoint, keys):
    endpoint.verify_assertion = lambda a: verifies(a, keys["ec_public"])
    fetch(bearer_conf(endpoint, **{"sasl.oauthbearer.assertion.private.key.file": keys["ec"],
                                   "sasl.oauthbearer.assertion.algorithm": "es256"}))
    header, _claims, signature = endpoint.taken()[0].assertion_parts()
    assert header["alg"] == "ES256" and len(signature) == 64


def test_jwt_bearer_claims_template_and_a_fresh_assertion_each_time(endpoint, keys):
    template = keys["folder"] / "template.json"
    template.write_text('{"header": {"kid": "key-1"}, '
                        '"payload": {"iss": "from-template", "tenant": 42}}')
    endpoint.verify_assertion = lambda a: verifies(a, keys["rsa_public"])
    conf = bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.private.key.pem": open(keys["rsa"]).read(),
        "sasl.oauthbearer.assertion.claim.sub": "svc", "sasl.oauthbearer.assertion.claim.iss":
        "issuer", "sasl.oauthbearer.assertion.claim.aud": "https://idp.example/token",
        "sasl.oauthbearer.assertion.claim.jti.include": True,
        "sasl.oauthbearer.assertion.claim.exp.seconds": 30,
        "sasl.oauthbearer.assertion.claim.nbf.seconds": 0,
        "sasl.oauthbearer.assertion.jwt.template.file": str(template)})
    endpoint_client = OidcTokenEndpoint.from_config(
        dict({n: p.default for n, p in PROPERTIES.items()}, **conf))
    endpoint_client.fetch()
    endpoint_client.fetch()
    (h1, c1, _), (_h2, c2, _) = [r.assertion_parts() for r in endpoint.taken()]
    assert h1 == {"kid": "key-1", "alg": "RS256", "typ": "JWT"}
    assert c1["tenant"] == 42 and c1["iss"] == "issuer"     # the setting wins
    assert (c1["sub"], c1["aud"]) == ("svc", "https://idp.example/token")
    assert c1["exp"] == c1["iat"] + 30 and c1["nbf"] == c1["iat"]
    assert c1["jti"] != c2["jti"]


def test_jwt_bearer_encrypted_key(endpoint, keys):
    endpoint.verify_assertion = lambda a: verifies(a, keys["rsa_public"])
    conf = bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.private.key.file": keys["rsa_encrypted"],
        "sasl.oauthbearer.assertion.private.key.passphrase": "key-pass"})
    assert fetch(conf).principal == "alice"
    conf["sasl.oauthbearer.assertion.private.key.passphrase"] = "wrong"
    with pytest.raises(ValueError, match='"sasl.oauthbearer.assertion.private.key.file": '
                                         "the private key cannot be loaded"):
        fetch(conf)


def test_jwt_bearer_key_must_suit_the_algorithm(endpoint, keys):
    conf = bearer_conf(endpoint, **{"sasl.oauthbearer.assertion.private.key.file": keys["ec"]})
    with pytest.raises(ValueError, match="rs256 needs an RSA key"):
        fetch(conf)
    conf = bearer_conf(endpoint, **{"sasl.oauthbearer.assertion.private.key.file": keys["rsa"],
                                    "sasl.oauthbearer.assertion.algorithm": "es256"})
    with pytest.raises(ValueError, match="es256 needs an EC key on P-256"):
        fetch(conf)


def test_jwt_bearer_assertion_file_is_read_for_each_request(endpoint, tmp_path):
    path = tmp_path / "assertion.jwt"
    path.write_text("first.assertion.value\n")
    endpoint.verify_assertion = lambda a: a.endswith(".value")
    client = OidcTokenEndpoint.from_config(dict(
        {n: p.default for n, p in PROPERTIES.items()},
        **bearer_conf(endpoint, **{"sasl.oauthbearer.assertion.file": str(path)})))
    client.fetch()
    path.write_text("second.assertion.value")
    client.fetch()
    assert [r.form["assertion"] for r in endpoint.taken()] == [
        ["first.assertion.value"], ["second.assertion.value"]]
    path.unlink()
    with pytest.raises(OidcError, match='"sasl.oauthbearer.assertion.file": cannot be read'):
        client.fetch()


def test_a_refused_assertion_fails_the_constructor(endpoint, keys):
    # the endpoint checks with the EC key: the RSA signature is refused
    endpoint.verify_assertion = lambda a: verifies(a, keys["ec_public"])
    with pytest.raises(KafkaException, match="HTTP 400 .*invalid_grant"):
        Producer(bearer_conf(endpoint, **{
            "bootstrap.servers": "127.0.0.1:1",
            "sasl.oauthbearer.assertion.private.key.file": keys["rsa"]}))


def test_jwt_bearer_configuration_rules(endpoint, keys, tmp_path):
    msg = invalid(bearer_conf(endpoint))
    assert '"sasl.oauthbearer.assertion.private.key.file" or' in msg and "mandatory" in msg
    pem = open(keys["rsa"]).read()
    for a, b in (("sasl.oauthbearer.assertion.private.key.file",
                  "sasl.oauthbearer.assertion.private.key.pem"),
                 ("sasl.oauthbearer.assertion.file",
                  "sasl.oauthbearer.assertion.private.key.file"),
                 ("sasl.oauthbearer.assertion.file",
                  "sasl.oauthbearer.assertion.private.key.pem")):
        values = {"sasl.oauthbearer.assertion.private.key.file": keys["rsa"],
                  "sasl.oauthbearer.assertion.private.key.pem": pem,
                  "sasl.oauthbearer.assertion.file": str(tmp_path / "a.jwt")}
        msg = invalid(bearer_conf(endpoint, **{a: values[a], b: values[b]}))
        assert f'"{a}" and "{b}" are mutually exclusive' in msg
    msg = invalid(bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.file": str(tmp_path / "missing.jwt")}))
    assert "missing.jwt: no such file" in msg
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    msg = invalid(bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.private.key.file": keys["rsa"],
        "sasl.oauthbearer.assertion.jwt.template.file": str(bad)}))
    assert '"sasl.oauthbearer.assertion.jwt.template.file"' in msg and "JSON object" in msg


def test_jwt_bearer_without_cryptography_says_what_to_install(endpoint, keys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives", None)
    msg = invalid(bearer_conf(endpoint, **{
        "sasl.oauthbearer.assertion.private.key.file": keys["rsa"]}))
    assert "cryptography package, which is not installed" in msg and "[oidc]" in msg


# -- Azure's instance metadata service ----------------------------------------------------

def imds_conf(url, config=None):
    conf = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.metadata.authentication.type": "azure_imds"}
    if url is not None:
        conf["sasl.oauthbearer.token.endpoint.url"] = url
    if config is not None:
        conf["sasl.oauthbearer.config"] = config
    return conf


def test_azure_imds_is_a_get_with_the_metadata_header(endpoint):
    token = fetch(imds_conf(endpoint.url,
                            "query=api-version=2018-02-01&resource=api://kafka,other=x"))
    assert token.principal == "alice"
    (request,) = endpoint.taken()
    assert request.method == "GET" and request.body == b""
    assert request.path == "/oauth2/token?api-version=2018-02-01&resource=api://kafka"
    assert request.headers["Metadata"] == "true"
    assert request.headers["Accept"] == "application/json"
    assert "Authorization" not in request.headers and "Content-Type" not in request.headers


def test_azure_imds_url():
    from kafka_client._net.security.oidc import AZURE_IMDS_URL, AzureImds

    assert AzureImds.url(None, "query=a=1") == AZURE_IMDS_URL + "?a=1"
    assert AzureImds.url("http://h/t?x=2", "query=a=1") == "http://h/t?x=2&a=1"
    assert AzureImds.url("http://h/t", "foo=bar") == "http://h/t"
    with pytest.raises(ValueError, match='needs "sasl.oauthbearer.token.endpoint.url" or '
                                         "a query="):
        AzureImds.url(None, "foo=bar")


def test_azure_imds_without_an_endpoint_fails_the_constructor():
    msg = invalid(imds_conf(None))
    assert "azure_imds" in msg and "sasl.oauthbearer.token.endpoint.url" in msg
