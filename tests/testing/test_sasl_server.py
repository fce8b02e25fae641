"""The test cluster's SASL server: the mechanisms without a network (SCRAM's gs2 header,
channel binding and nonces, OAUTHBEARER's unsecured JWTs, users added and removed), then
on the wire with a bare client: SaslHandshake v0 tokens, users set while the cluster
runs, KIP-368 session lifetimes and re-authentication. (RFC 7677's SCRAM vector is in
tests/client/net/test_sasl_mechanisms.py; librdkafka and our client log in through
tests/integration/test_sasl.py and test_cluster_interop.py.)"""
from __future__ import annotations

import base64
import hmac
import json
import time

import pytest

from kafka_proto.errors import ErrorCode
from kafka_proto.framing import encode_frame
from kafka_proto.messages import (
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)

from kafka_client._net.security.oauth import unsecured_jwt
from kafka_client._net.security.sasl import (
    OAuthBearerMechanism,
    ScramMechanism,
    scram_keys,
    scram_salted_password,
)
from kafka_client.testing import Cluster
from kafka_client.testing._sasl import (
    INVALID_TOKEN_CHALLENGE,
    AuthenticationFailed,
    Credentials,
    SaslExchange,
    ScramServer,
    check_unsecured_jwt,
)

from rawclient import RawClient  # tests/testing/rawclient.py

MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"


def scram_login(server, client):
    return client.respond(server.final(client.respond(server.first(client.initial()))))


# --------------------------------------------------------------------------- mechanisms


def test_scram_accepts_our_client_and_an_authorization_id_equal_to_the_user():
    creds = Credentials({"al=ice,x": "pw"}, ["SCRAM-SHA-512"])
    client = ScramMechanism("SCRAM-SHA-512", "al=ice,x", "pw")
    server = ScramServer("SCRAM-SHA-512", creds.scram["SCRAM-SHA-512"])
    assert scram_login(server, client) is None and client.complete
    assert server.user == "al=ice,x"  # saslname escapes undone
    # gs2 header "n,a=user," (authzid): c= must carry that header back.
    s = ScramServer("SCRAM-SHA-512", creds.scram["SCRAM-SHA-512"], nonce="srv")
    first = s.first(b"n,a=al=3Dice=2Cx,n=al=3Dice=2Cx,r=cli").decode()
    assert first.startswith("r=clisrv,")
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        s.final(b"c=biws,r=clisrv,p=" + base64.b64encode(b"\0" * 64))


@pytest.mark.parametrize("client_first, why", [
    (b"p=tls-unique,,n=u,r=x", "channel binding"),
    (b"n,a=other,n=u,r=x", "authorization id"),
    (b"n,,n=u", "nonce"),
    (b"n,,n=u,r=x,m=ext", "extensions"),
    (b"garbage", "malformed"),
    (b"n,,n=nobody,r=x", "invalid credentials"),
    (b"\xff", "UTF-8"),
])
def test_scram_refuses_bad_client_first_messages(client_first, why):
    creds = Credentials({"u": "pw"}, ["SCRAM-SHA-256"])
    with pytest.raises(AuthenticationFailed, match=why):
        ScramServer("SCRAM-SHA-256", creds.scram["SCRAM-SHA-256"]).first(client_first)


def client_final(password, server_first, client_first_bare, nonce):
    """A SCRAM-SHA-256 client-final message carrying ``nonce``, its proof over it."""
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = scram_salted_password("sha256", password, base64.b64decode(attrs["s"]),
                                   int(attrs["i"]))
    client_key, stored_key, _server_key = scram_keys("sha256", salted)
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_scram_nonces_ours_and_librdkafka_before_2_6_1():
    creds = Credentials({"u": "pw"}, ["SCRAM-SHA-256"])
    for nonce, accepted in [("clisrv", True),          # RFC 5802
                            ("cliclisrv", True),       # librdkafka < 2.6.1 (kcat on Debian)
                            ("cli", False), ("clisrvx", False), ("xclisrv", False)]:
        server = ScramServer("SCRAM-SHA-256", creds.scram["SCRAM-SHA-256"], nonce="srv")
        server_first = server.first(b"n,,n=u,r=cli").decode()
        assert server_first.startswith("r=clisrv,")
        final = client_final("pw", server_first, "n=u,r=cli", nonce)
        if accepted:
            assert server.final(final).startswith(b"v=")
        else:
            with pytest.raises(AuthenticationFailed, match="nonce"):
                server.final(final)


def test_scram_refuses_a_wrong_password_and_a_malformed_proof():
    creds = Credentials({"u": "pw"}, ["SCRAM-SHA-256"])
    server = ScramServer("SCRAM-SHA-256", creds.scram["SCRAM-SHA-256"])
    client = ScramMechanism("SCRAM-SHA-256", "u", "wrong")
    final = client.respond(server.first(client.initial()))
    with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism "
                                                   "SCRAM-SHA-256"):
        server.final(final)
    server = ScramServer("SCRAM-SHA-256", creds.scram["SCRAM-SHA-256"])
    client = ScramMechanism("SCRAM-SHA-256", "u", "pw")
    final = client.respond(server.first(client.initial()))
    with pytest.raises(AuthenticationFailed, match="proof"):
        server.final(final[:final.rindex(b",p=")] + b",p=***")
    with pytest.raises(AuthenticationFailed, match="before client-first"):
        ScramServer("SCRAM-SHA-256", {}).final(final)


def test_credentials_follow_set_and_delete_for_the_enabled_scram_mechanisms():
    creds = Credentials({"a": "1"}, ["PLAIN", "SCRAM-SHA-256"])
    # A table per SCRAM mechanism (AlterUserScramCredentials may fill any); passwords
    # derive credentials for the enabled ones only.
    assert set(creds.scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "a" in creds.scram["SCRAM-SHA-256"] and creds.scram["SCRAM-SHA-512"] == {}
    assert creds.check_password("a", "1") and not creds.check_password("a", "2")
    creds.set("a", "2")
    assert creds.check_password("a", "2")
    client = ScramMechanism("SCRAM-SHA-256", "a", "2")
    assert scram_login(ScramServer("SCRAM-SHA-256", creds.scram["SCRAM-SHA-256"]),
                       client) is None
    assert creds.delete("a") and not creds.delete("a")
    assert not creds.check_password("a", "2") and "a" not in creds.scram["SCRAM-SHA-256"]
    with pytest.raises(ValueError):
        creds.set("", "x")


def _jwt(header, claims):
    enc = lambda obj: base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header)}.{enc(claims)}."


def _oauth_message(token, **extensions):
    ext = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()


def test_unsecured_jwts_accepted_as_kafkas_default_validator_accepts_them():
    token = unsecured_jwt("principal=bob lifeSeconds=60 extension_trace=7")
    message = OAuthBearerMechanism(lambda: token).initial()
    claims = check_unsecured_jwt(message)
    assert claims.principal == "bob" and claims.extensions == {"trace": "7"}
    assert claims.expires_at == token.expires_at
    now = time.time()
    for token, why in [
        (_jwt({"alg": "HS256"}, {"sub": "a", "exp": now + 60}), "alg none"),
        (_jwt({"alg": "none"}, {"exp": now + 60}), "subject"),
        (_jwt({"alg": "none"}, {"sub": "a"}), "expiry"),
        (_jwt({"alg": "none"}, {"sub": "a", "exp": now - 1}), "expired"),
        (_jwt({"alg": "none"}, {"sub": "a", "exp": now + 60})[:-1] + ".sig", "unsecured"),
        ("not-a-jwt", "unsecured JWT"),
        ("a.%%%.", "unsecured JWT"),
    ]:
        with pytest.raises(AuthenticationFailed, match=why):
            check_unsecured_jwt(_oauth_message(token))
    for message in (b"n,,\x01auth=Bearer x", b"x", b"n,,\x01nokey\x01\x01",
                    b"n,,\x01other=1\x01\x01"):
        with pytest.raises(AuthenticationFailed):
            check_unsecured_jwt(message)


def test_a_refused_token_gets_the_error_challenge_then_the_failure():
    exchange = SaslExchange("OAUTHBEARER", Credentials({}, []), raw_tokens=False)
    assert exchange.step(_oauth_message("not-a-jwt")) == INVALID_TOKEN_CHALLENGE
    assert not exchange.done
    with pytest.raises(AuthenticationFailed, match="token refused: the token is not"):
        exchange.step(b"\x01")
    good = SaslExchange("OAUTHBEARER", Credentials({}, []), raw_tokens=False)
    token = unsecured_jwt("principal=carol lifeSeconds=30")
    assert good.step(OAuthBearerMechanism(lambda: token).initial()) == b""
    assert good.done and good.user == "carol" and good.expires_at == token.expires_at


def test_plain_checks_the_password_and_the_authorization_id():
    creds = Credentials({"u": "pw"}, ["PLAIN"])
    ok = SaslExchange("PLAIN", creds, raw_tokens=False)
    assert ok.step(b"u\x00u\x00pw") == b"" and ok.done and ok.user == "u"
    for token, why in [(b"\x00u\x00bad", "Invalid username or password"),
                       (b"\x00x\x00pw", "Invalid username or password"),
                       (b"other\x00u\x00pw", "authorization id"),
                       (b"u-pw", "malformed")]:
        with pytest.raises(AuthenticationFailed, match=why):
            SaslExchange("PLAIN", creds, raw_tokens=False).step(token)


# --------------------------------------------------------------------------- on the wire


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("sasl")),
                 broker_config={"sasl.enabled.mechanisms": MECHANISMS},
                 users={"alice": "alice-pw"}) as c:
        yield c


def authenticate(client, mechanism, user, password, handshake_version=1):
    """SaslHandshake + SaslAuthenticate rounds; the last SaslAuthenticate answer."""
    assert client.request(SaslHandshakeRequest(mechanism=mechanism),
                          handshake_version).error_code == 0
    mech = ScramMechanism(mechanism, user, password)
    token = mech.initial()
    while True:
        resp = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        if resp.error_code:
            return resp
        token = mech.respond(bytes(resp.auth_bytes))
        if token is None:
            return resp


def test_users_set_and_deleted_while_the_cluster_runs(cluster):
    since = cluster.clear_request_log()
    with RawClient(cluster.address(1)) as c:
        assert authenticate(c, "SCRAM-SHA-512", "dave", "d1").error_code == \
            ErrorCode.SASL_AUTHENTICATION_FAILED
        assert c.closed_by_broker()
    cluster.set_sasl_credentials("dave", "d1")
    with RawClient(cluster.address(1)) as c:
        resp = authenticate(c, "SCRAM-SHA-512", "dave", "d1")
        assert resp.error_code == 0 and resp.session_lifetime_ms == 0
        assert c.request(MetadataRequest(topics=None), 12).brokers
    logins = cluster.sasl_authentications(since)
    assert [(e.details["mechanism"], e.details["principal"]) for e in logins] == \
        [("SCRAM-SHA-512", "User:dave")]
    assert cluster.delete_sasl_credentials("dave") and not cluster.delete_sasl_credentials("dave")
    with RawClient(cluster.address(1)) as c:
        assert authenticate(c, "SCRAM-SHA-512", "dave", "d1").error_code == \
            ErrorCode.SASL_AUTHENTICATION_FAILED


def test_requests_before_authentication_close_the_connection(cluster):
    with RawClient(cluster.address(1)) as c:
        c.send(MetadataRequest(topics=None), 12)
        assert c.closed_by_broker()


def test_handshake_v0_exchanges_bare_tokens(cluster):
    with RawClient(cluster.address(1)) as c:
        assert c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        c.send_bytes(encode_frame(b"\x00alice\x00alice-pw"))
        assert c.recv_frame() == b""   # the (empty) server token, size-prefixed
        assert c.request(MetadataRequest(topics=None), 12).brokers
    with RawClient(cluster.address(1)) as c:
        c.request(SaslHandshakeRequest(mechanism="PLAIN"), 0)
        c.send_bytes(encode_frame(b"\x00alice\x00wrong"))
        assert c.closed_by_broker()


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory):
    with Cluster(brokers=1, data_dir=str(tmp_path_factory.mktemp("reauth")),
                 broker_config={"sasl.enabled.mechanisms": MECHANISMS,
                                "connections.max.reauth.ms": 600},
                 users={"alice": "alice-pw", "bob": "bob-pw"}) as c:
        yield c


def test_a_request_after_the_session_expired_closes_the_connection(short_sessions):
    since = short_sessions.clear_request_log()
    with RawClient(short_sessions.address(1)) as c:
        resp = authenticate(c, "SCRAM-SHA-256", "alice", "alice-pw")
        assert resp.error_code == 0 and resp.session_lifetime_ms == 600
        assert c.request(MetadataRequest(topics=None), 12).brokers
        time.sleep(0.8)
        c.send(MetadataRequest(topics=None), 12)
        assert c.closed_by_broker()
    closed = [e for e in short_sessions.request_log(since, kind="closed")
              if "session expired" in e.details["detail"]]
    assert len(closed) == 1


def test_reauthentication_extends_the_session(short_sessions):
    since = short_sessions.clear_request_log()
    with RawClient(short_sessions.address(1)) as c:
        assert authenticate(c, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0
        for _ in range(3):
            time.sleep(0.4)
            assert authenticate(c, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0
            assert c.request(MetadataRequest(topics=None), 12).brokers
    events = short_sessions.sasl_authentications(since)
    assert [e.details["reauthentication"] for e in events] == [False, True, True, True]
    assert all(e.details["session_lifetime_ms"] == 600 for e in events)


def test_reauthentication_must_keep_the_mechanism_and_the_principal(short_sessions):
    with RawClient(short_sessions.address(1)) as c:
        assert authenticate(c, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0
        resp = c.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
        assert resp.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.closed_by_broker()
    with RawClient(short_sessions.address(1)) as c:
        assert authenticate(c, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0
        resp = authenticate(c, "SCRAM-SHA-256", "bob", "bob-pw")
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "re-authentication as User:bob" in resp.error_message
        assert c.closed_by_broker()


def test_an_oauthbearer_session_ends_with_its_token(cluster):
    token = unsecured_jwt("principal=erin lifeSeconds=30")
    with RawClient(cluster.address(1)) as c:
        assert c.request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1).error_code == 0
        message = OAuthBearerMechanism(lambda: token).initial()
        resp = c.request(SaslAuthenticateRequest(auth_bytes=message), 2)
        assert resp.error_code == 0
        # connections.max.reauth.ms is 0 here: the token's expiry alone sets the lifetime.
        assert 28_000 <= resp.session_lifetime_ms <= 30_000
