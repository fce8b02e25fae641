"""SASL end to end: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER against a server that
checks credentials (the test cluster's SASL, kafka_client.testing; validated here with
confluent-kafka as the client), SASL_SSL through stunnel, KIP-368 re-authentication, and
the failures: wrong password, unknown user on Tansu --authentication (a real broker's
SCRAM check), mechanism not enabled, invalid and expired tokens: each a clear
_AUTHENTICATION error through error_cb within seconds, never a hang."""
from __future__ import annotations

import base64
import time
from contextlib import contextmanager

import pytest

from kafka_client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_client._testing.brokers import LOOPBACK, free_port
from kafka_client.admin import AdminClient
from kafka_client._testing.oidc import TokenEndpoint
from kafka_client._testing.tls import Stunnel, TlsTansu, make_certificates, stunnel_binary
from kafka_client.testing import Cluster

pytestmark = pytest.mark.integration

confluent_kafka = pytest.importorskip("confluent_kafka")

USER, PASSWORD = "alice", "alice-secret"
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@contextmanager
def sasl_cluster_of_its_own(broker_config=None, certs=None):
    """A one-broker cluster requiring SASL for one test (``broker_config`` added to the
    mechanisms), behind stunnel (SASL_SSL) when ``certs`` are given; yields the cluster
    and the bootstrap address clients use."""
    config = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"}
    config.update(broker_config or {})
    listener = free_port()
    front = free_port() if certs is not None else listener
    with Cluster(brokers=1, broker_config=config, users={USER: PASSWORD}, ports=[listener],
                 advertised_ports=[front]) as cluster:
        if certs is None:
            yield cluster, cluster.bootstrap_servers
            return
        stunnel = Stunnel(LOOPBACK, listener, certs.server_cert, certs.server_key,
                          port=front).start()
        try:
            yield cluster, f"{LOOPBACK}:{front}"
        finally:
            stunnel.stop()
            stunnel.cleanup()


def authentications(cluster):
    """The mechanism of every successful authentication so far, re-authentications too."""
    return [e.details["mechanism"] for e in cluster.sasl_authentications()]


def closed_expired(cluster):
    """How many connections the broker closed because their SASL session had expired."""
    return sum("session expired" in e.details.get("detail", "")
               for e in cluster.request_log(kind="closed"))


def sasl_conf(bootstrap, mechanism, password=PASSWORD, protocol="sasl_plaintext", **extra):
    conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol,
            "sasl.mechanism": mechanism}
    if mechanism != "OAUTHBEARER":
        conf.update({"sasl.username": USER, "sasl.password": password})
    conf.update(extra)
    return conf


def round_trip(conf, topic, n):
    p = Producer(conf)
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"m%d" % i)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(30) == 0
    c = Consumer(dict(conf, **{"group.id": f"g-{topic}"}))
    got = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(5000, 0.5) if m.error() is None]
    finally:
        c.close()
    assert got == [b"m%d" % i for i in range(n)]


def auth_errors(conf, wait=5.0, client=Producer):
    """error_cb errors of a client that cannot authenticate. list_topics() fails with the
    refusal itself (_AUTHENTICATION) as soon as its connection is refused, not at its
    timeout (10 s here)."""
    errors = []
    p = client(dict(conf, error_cb=errors.append))
    started = time.monotonic()
    try:
        with pytest.raises(KafkaException) as refused:
            p.list_topics(timeout=10)
        assert refused.value.args[0].code() == KafkaError._AUTHENTICATION, refused.value
        assert time.monotonic() - started < 5, "list_topics() waited for its timeout"
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) \
                and time.monotonic() - started < wait:
            p.poll(0.1)
    finally:
        p.close()
    return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


# --- the server side, checked with librdkafka as the client ---

@pytest.mark.parametrize("mechanism", ("PLAIN",) + SCRAM)
def test_server_accepts_confluent_kafka(sasl_cluster, topic_name, mechanism):
    sasl_cluster.create_topic(topic_name)
    before = len(authentications(sasl_cluster))
    p = confluent_kafka.Producer(sasl_conf(sasl_cluster.bootstrap_servers, mechanism))
    for i in range(500):
        p.produce(topic_name, b"c%d" % i)
    assert p.flush(20) == 0
    assert mechanism in authentications(sasl_cluster)[before:]
    # and our consumer reads what librdkafka wrote
    c = Consumer(sasl_conf(sasl_cluster.bootstrap_servers, mechanism, **{"group.id": "x"}))
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 500 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(1000, 0.5) if m.error() is None]
    finally:
        c.close()
    assert got == [b"c%d" % i for i in range(500)]


@pytest.mark.parametrize("mechanism", ("PLAIN",) + SCRAM)
def test_server_refuses_confluent_kafka_with_wrong_password(sasl_cluster, mechanism):
    errors = []
    p = confluent_kafka.Producer(dict(sasl_conf(sasl_cluster.bootstrap_servers, mechanism, "wrong"),
                                      error_cb=errors.append))
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.1)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


# --- our client ---

@pytest.mark.parametrize("mechanism", ("PLAIN",) + SCRAM)
def test_round_trip(sasl_cluster, topic_name, mechanism):
    sasl_cluster.create_topic(topic_name)
    before = len(authentications(sasl_cluster))
    round_trip(sasl_conf(sasl_cluster.bootstrap_servers, mechanism), topic_name, 5000)
    assert authentications(sasl_cluster)[before:].count(mechanism) >= 2


@pytest.mark.parametrize("mechanism", ("PLAIN",) + SCRAM)
def test_wrong_password_is_a_clear_error(sasl_cluster, mechanism):
    started = time.monotonic()
    errors = auth_errors(sasl_conf(sasl_cluster.bootstrap_servers, mechanism, "wrong"))
    assert errors, "no _AUTHENTICATION error reported"
    assert mechanism in errors[0].str() and "authentication failed" in errors[0].str()
    assert not errors[0].fatal()  # librdkafka retries with backoff; not fatal
    assert time.monotonic() - started < 8


def test_an_admin_call_with_a_wrong_password_fails_naming_it(sasl_cluster):
    """No connection can be made (the broker refuses the password): the admin call's
    error at its request timeout is that refusal (_AUTHENTICATION, the mechanism's
    words), not a bare "timed out"."""
    admin = AdminClient(sasl_conf(sasl_cluster.bootstrap_servers, "SCRAM-SHA-256", "wrong"))
    try:
        with pytest.raises(KafkaException) as got:
            admin.describe_cluster(request_timeout=3).result(10)
        err = got.value.args[0]
        assert err.code() == KafkaError._AUTHENTICATION, err
        assert "SCRAM-SHA-256" in err.str() and "DescribeCluster" in err.str()
    finally:
        admin.close()


def test_unknown_user_on_tansu_with_authentication(topic_name):
    """Tansu 0.6 --authentication checks SCRAM itself (and has no users to give)."""
    broker = TlsTansu(authentication=True)
    broker.start()
    try:
        for mechanism in SCRAM:
            errors = auth_errors(sasl_conf(broker.bootstrap, mechanism))
            assert errors and mechanism in errors[0].str(), errors
    finally:
        broker.stop()
        broker.cleanup()


def test_mechanism_not_enabled_names_what_the_broker_offers():
    with sasl_cluster_of_its_own({"sasl.enabled.mechanisms": "PLAIN"}) as (_cluster, bootstrap):
        errors = auth_errors(sasl_conf(bootstrap, "SCRAM-SHA-512"))
    assert errors
    text = errors[0].str()
    assert "SCRAM-SHA-512 is not enabled" in text and "PLAIN" in text


def test_oauthbearer_unsecured_jwt_round_trip(sasl_cluster, topic_name):
    sasl_cluster.create_topic(topic_name)
    conf = sasl_conf(sasl_cluster.bootstrap_servers, "OAUTHBEARER", **{
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice lifeSeconds=600"})
    round_trip(conf, topic_name, 2000)
    assert "OAUTHBEARER" in authentications(sasl_cluster)


def test_oauth_cb_called_like_confluent_kafka(sasl_cluster, topic_name):
    from kafka_client._net.security.oauth import unsecured_jwt

    sasl_cluster.create_topic(topic_name)
    calls = []

    def oauth_cb(config):
        calls.append(config)
        token = unsecured_jwt("principal=alice lifeSeconds=600")
        return token.value, token.expires_at

    conf = sasl_conf(sasl_cluster.bootstrap_servers, "OAUTHBEARER", oauth_cb=oauth_cb,
                     **{"sasl.oauthbearer.config": "my settings"})
    round_trip(conf, topic_name, 500)
    assert calls and calls[0] == "my settings"


def test_invalid_token_refused_by_the_server(sasl_cluster):
    conf = sasl_conf(sasl_cluster.bootstrap_servers, "OAUTHBEARER",
                     oauth_cb=lambda _: ("not-a-jwt", time.time() + 600))
    errors = auth_errors(conf)
    assert errors and "OAUTHBEARER" in errors[0].str() and "invalid_token" in errors[0].str()


def test_expired_token_is_a_clear_error(sasl_cluster):
    """The first token lives 1 s and every refresh fails: the failed refresh and then
    the expired token are reported through error_cb, what oauth_cb raised reaches the
    caller of poll() (the one callback policy), and requests fail instead of
    hanging."""
    from kafka_client._net.security.oauth import unsecured_jwt

    calls = []

    def oauth_cb(_config):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("identity provider unreachable")
        token = unsecured_jwt("principal=alice lifeSeconds=1")
        return token.value, token.expires_at

    errors, raised = [], []
    p = Producer(sasl_conf(sasl_cluster.bootstrap_servers, "OAUTHBEARER", oauth_cb=oauth_cb),
                 error_cb=errors.append)  # the first token is fetched here
    try:
        time.sleep(1.3)
        with pytest.raises(KafkaException):
            p.list_topics(timeout=3)
        # Until both are in: the expired token (reported on use) may come first when the
        # refresh timer fires late on a loaded machine.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (raised and any(
                "expired" in e.str() for e in errors)):
            try:
                p.poll(0.1)
            except RuntimeError as exc:
                raised.append(str(exc))
    finally:
        p.close()
    assert raised and set(raised) == {"identity provider unreachable"}
    texts = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert any("refresh failed: identity provider unreachable" in t for t in texts), texts
    assert any("token expired" in t for t in texts), texts
    assert len(calls) >= 2


def oidc_conf(bootstrap, endpoint, **extra):
    """sasl.oauthbearer.method=oidc against ``endpoint`` (the same names for
    confluent-kafka)."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": endpoint.url,
            "sasl.oauthbearer.client.id": endpoint.client_id,
            "sasl.oauthbearer.client.secret": endpoint.client_secret}
    conf.update(extra)
    return conf


def requests_of_both(conf, endpoint, topic, n):
    """Our client carries ``n`` messages with ``conf`` (the round trip), then
    confluent-kafka, configured alike, produces to ``topic``; returns the requests the
    token endpoint got from ours and from confluent-kafka's."""
    round_trip(conf, topic, n)
    ours = endpoint.taken()
    peer = confluent_kafka.Producer(dict(conf))
    for i in range(10):
        peer.produce(topic, b"peer%d" % i)
    assert peer.flush(30) == 0
    theirs = endpoint.taken()[len(ours):]
    assert ours and theirs
    return ours, theirs


def test_oidc_round_trip_asking_what_librdkafka_asks(sasl_cluster, topic_name):
    """Our client and confluent-kafka, configured alike, both get their token from the
    endpoint and authenticate with it; the endpoint sees the same request from both, and
    the broker the same principal and SASL extensions."""
    sasl_cluster.create_topic(topic_name)
    before = len(sasl_cluster.sasl_authentications())
    extra = {"sasl.oauthbearer.scope": "kafka write",
             "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"}
    with TokenEndpoint() as endpoint:
        conf = oidc_conf(sasl_cluster.bootstrap_servers, endpoint, **extra)
        ours, theirs = requests_of_both(conf, endpoint, topic_name, 1000)
    for request in (ours[0], theirs[0]):
        assert request.method == "POST"
        assert request.basic_credentials() == f"{endpoint.client_id}:{endpoint.client_secret}"
        assert request.form == {"grant_type": ["client_credentials"], "scope": ["kafka write"]}
        assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    done = [e.details for e in sasl_cluster.sasl_authentications()[before:]]
    assert done and all(d["mechanism"] == "OAUTHBEARER" and d["principal"] == "User:alice"
                        and d["extensions"] == {"logicalCluster": "lkc-1",
                                                "identityPoolId": "pool-2"} for d in done)


def test_oidc_jwt_bearer_grant_like_librdkafka(sasl_cluster, topic_name, tmp_path):
    """The JWT bearer grant with an RSA key: the endpoint checks each assertion's RS256
    signature; our client and confluent-kafka send assertions with the same header and
    claims and both reach the broker."""
    pytest.importorskip("cryptography")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "assertion-key.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))

    def signed_by_key(assertion):
        signing_input, _, signature = assertion.rpartition(".")
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        try:
            key.public_key().verify(raw, signing_input.encode(), padding.PKCS1v15(),
                                    hashes.SHA256())
        except InvalidSignature:
            return False
        return True

    sasl_cluster.create_topic(topic_name)
    with TokenEndpoint() as endpoint:
        endpoint.verify_assertion = signed_by_key
        conf = {"bootstrap.servers": sasl_cluster.bootstrap_servers,
                "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": endpoint.url,
                "sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "sasl.oauthbearer.assertion.private.key.file": str(key_file),
                "sasl.oauthbearer.assertion.claim.sub": "svc",
                "sasl.oauthbearer.assertion.claim.aud": endpoint.url}
        ours, theirs = requests_of_both(conf, endpoint, topic_name, 500)
    (our_header, our_claims, _), (their_header, their_claims, _) = (
        ours[0].assertion_parts(), theirs[0].assertion_parts())
    assert our_header == their_header == {"alg": "RS256", "typ": "JWT"}
    assert set(our_claims) == set(their_claims) == {"iat", "exp", "nbf", "sub", "aud"}
    assert ours[0].form.keys() == theirs[0].form.keys() == {"grant_type", "assertion"}


def test_oidc_azure_imds_like_librdkafka(sasl_cluster, topic_name):
    """azure_imds against a local stand-in for Azure's metadata service: our client and
    confluent-kafka ask the same GET (the query from sasl.oauthbearer.config) and both
    reach the broker."""
    sasl_cluster.create_topic(topic_name)
    with TokenEndpoint() as endpoint:
        conf = {"bootstrap.servers": sasl_cluster.bootstrap_servers,
                "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.metadata.authentication.type": "azure_imds",
                "sasl.oauthbearer.token.endpoint.url": endpoint.url,
                "sasl.oauthbearer.config": "query=api-version=2018-02-01&resource=api://k"}
        ours, theirs = requests_of_both(conf, endpoint, topic_name, 200)
    for request in (ours[0], theirs[0]):
        assert request.method == "GET" and request.headers["Metadata"] == "true"
        assert request.path == "/oauth2/token?api-version=2018-02-01&resource=api://k"


def test_oidc_tokens_are_refreshed_before_they_expire(sasl_cluster, topic_name, produce_for):
    """Tokens of 2 s: the client asks the endpoint again at 80% of each lifetime and
    re-authenticates its connections (KIP-368) with the new token; every message sent
    over 4 s is delivered."""
    sasl_cluster.create_topic(topic_name)
    with TokenEndpoint() as endpoint:
        endpoint.lifetime = 2.0
        before = len(sasl_cluster.sasl_authentications())
        p = Producer(oidc_conf(sasl_cluster.bootstrap_servers, endpoint))
        try:
            sent = produce_for(p, topic_name, 4)
        finally:
            p.close()
        asked = len(endpoint.taken())
    assert asked >= 3, asked
    again = [e for e in sasl_cluster.sasl_authentications()[before:]
             if e.details["reauthentication"]]
    assert again, "no connection re-authenticated with a refreshed token"
    c = Consumer({"bootstrap.servers": sasl_cluster.bootstrap_servers,
                  "security.protocol": "sasl_plaintext", "sasl.mechanism": "OAUTHBEARER",
                  "enable.sasl.oauthbearer.unsecure.jwt": True,
                  "sasl.oauthbearer.config": "principal=alice"})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < sent and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(1000, 0.5) if m.error() is None]
    finally:
        c.close()
    assert got == [b"%d" % i for i in range(sent)]


def test_oidc_endpoint_down_at_start(sasl_cluster, topic_name, monkeypatch):
    """As librdkafka: the client starts without a token when the endpoint cannot be
    reached, reports why through error_cb, asks again, and delivers once it answers."""
    from kafka_client._net.security import oauth

    monkeypatch.setattr(oauth, "RETRY_AFTER", 0.5)
    sasl_cluster.create_topic(topic_name)
    port = free_port()
    down = TokenEndpoint(port=port)
    down.stop()  # its URL, with nothing listening
    errors = []
    p = Producer(oidc_conf(sasl_cluster.bootstrap_servers, down, error_cb=errors.append,
                           **{"reconnect.backoff.max.ms": 500}))
    try:
        for i in range(10):
            p.produce(topic_name, b"%d" % i)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not errors:
            p.poll(0.1)
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION
        assert "cannot be reached" in errors[0].str() and down.url in errors[0].str()
        assert len(p) == 10
        with TokenEndpoint(port=port) as endpoint:
            assert p.flush(15) == 0
            assert endpoint.taken()
    finally:
        p.close()


def test_reauthentication_before_the_session_expires(topic_name, produce_for):
    """KIP-368: the broker gives 1.5 s sessions (connections.max.reauth.ms) and closes a
    connection that sends a request after its session expired; a producer sending for
    5 s re-authenticates on each connection and never gets closed."""
    with sasl_cluster_of_its_own({"connections.max.reauth.ms": 1500}) as (cluster, bootstrap):
        cluster.create_topic(topic_name)
        errors = []
        delivered = []
        p = Producer(sasl_conf(bootstrap, "SCRAM-SHA-256"), error_cb=errors.append,
                     on_delivery=lambda err, msg: delivered.append(err))
        sent = produce_for(p, topic_name, 5, pause=0.02, prefix=b"r")
        p.close()
        assert len(delivered) == sent and not any(delivered)
        assert closed_expired(cluster) == 0
        # at least one re-authentication per 1.5 s on the producing connection
        assert len(authentications(cluster)) >= 4, authentications(cluster)
        assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


def test_a_request_sent_once_the_session_is_due_waits_for_the_reauthentication(topic_name):
    """KIP-368: the I/O thread is busy past the moment its connection should have
    re-authenticated (600 ms of other work, 500 ms sessions); the request the application
    queued meanwhile goes out after a re-authentication, not on the expired session
    (which the broker closes, failing what was in flight)."""
    with sasl_cluster_of_its_own({"connections.max.reauth.ms": 500}) as (cluster, bootstrap):
        cluster.create_topic(topic_name)
        delivered = []
        p = Producer(sasl_conf(bootstrap, "PLAIN", **{"linger.ms": 0}),
                     on_delivery=lambda err, msg: delivered.append(err))
        try:
            for round_ in range(3):
                p.produce(topic_name, b"first")
                assert p.flush(10) == 0
                p._io.call_soon(time.sleep, 0.6)   # busy: no tick until after the expiry
                time.sleep(0.05)
                p.produce(topic_name, b"second")
                assert p.flush(10) == 0
        finally:
            p.close()
        assert delivered == [None] * 6
        assert closed_expired(cluster) == 0


@pytest.mark.skipif(stunnel_binary() is None, reason="stunnel (Debian stunnel4) not installed")
@pytest.mark.parametrize("mechanism", ("PLAIN", "SCRAM-SHA-512"))
def test_sasl_ssl_round_trip(topic_name, mechanism):
    certs = make_certificates()
    with sasl_cluster_of_its_own(certs=certs) as (cluster, bootstrap):
        cluster.create_topic(topic_name)
        conf = sasl_conf(bootstrap, mechanism, protocol="sasl_ssl",
                         **{"ssl.ca.location": str(certs.ca)})
        round_trip(conf, topic_name, 5000)
        assert authentications(cluster).count(mechanism) >= 2


def test_a_sasl_listener_without_sasl_configured_is_named_as_the_likely_cause(
        sasl_cluster, metadata_failure):
    """The broker closes the connection at the first request after ApiVersions; the
    error says what that most often means, as librdkafka hints it."""
    hint = "does it require SASL authentication? check security.protocol and sasl.mechanism"
    text, errors = metadata_failure({"bootstrap.servers": sasl_cluster.bootstrap_servers})
    assert hint in text, text
    assert errors and hint in errors[0], errors


@pytest.mark.parametrize("version", [0, 1, 2])
def test_reauthentication_follows_the_sasl_authenticate_version(topic_name, produce_for,
                                                                version):
    """KIP-368 sessions come with SaslAuthenticate v1: a broker whose SaslAuthenticate
    tops out at v0 (Kafka 1.x-2.1) gives no session lifetime and keeps the connection,
    so the client never re-authenticates; from v1 it re-authenticates before each 3 s
    session ends. Either way every message is delivered and no connection is closed
    for an expired session. SaslHandshake v0 (Kafka 0.10, no SaslAuthenticate) is
    refused: _UNSUPPORTED_FEATURE, and list_topics() fails with it at once, not at its
    timeout."""
    from kafka_client._testing.proxy import FaultProxy
    from kafka_proto.messages import ApiKey

    listener, front = free_port(), free_port()
    # 3 s sessions: the client re-authenticates at 85-95% of one (as the Java client;
    # librdkafka at 90%), so a request sent just before has 5-15% of it to reach the broker
    # through the proxy, which shares this process's GIL with the producer: 47 ms were
    # left at worst with 1 s sessions on a loaded 2-core machine, and one request of a
    # full suite run came late (the broker closed the connection).
    config = {"sasl.enabled.mechanisms": "SCRAM-SHA-256", "connections.max.reauth.ms": 3000}

    def cap(response, _version):
        for entry in response.api_keys:
            if entry.api_key == ApiKey.SASL_AUTHENTICATE:
                entry.max_version = min(entry.max_version, version)

    with FaultProxy(LOOPBACK, listener, port=front, follow_frames=True) as proxy, \
            Cluster(brokers=1, broker_config=config, users={USER: PASSWORD},
                    ports=[listener], advertised_ports=[front]) as cluster:
        proxy.rewrite_responses(ApiKey.API_VERSIONS, cap, count=None)
        cluster.create_topic(topic_name)
        errors, delivered = [], []
        p = Producer(sasl_conf(proxy.bootstrap, "SCRAM-SHA-256"), error_cb=errors.append,
                     on_delivery=lambda err, msg: delivered.append(err))
        sent = produce_for(p, topic_name, 7.2, pause=0.02)   # two sessions and more
        p.close()
        assert len(delivered) == sent and not any(delivered)
        assert closed_expired(cluster) == 0
        logins = cluster.sasl_authentications()
        assert {e.version for e in cluster.request_log(api=ApiKey.SASL_AUTHENTICATE)} == \
            {version}
        again = [e for e in logins if e.details["reauthentication"]]
        assert (len(again) >= 2) if version >= 1 else not again, [e.details for e in logins]
        assert not errors
        if version:
            return

        def no_v1(response, _version):
            for entry in response.api_keys:
                if entry.api_key == ApiKey.SASL_HANDSHAKE:
                    entry.max_version = 0

        proxy.clear_faults()
        proxy.rewrite_responses(ApiKey.API_VERSIONS, no_v1, count=None)
        refused = []
        p = Producer(sasl_conf(proxy.bootstrap, "SCRAM-SHA-256"), error_cb=refused.append)
        try:
            started = time.monotonic()
            with pytest.raises(KafkaException) as failed:
                p.list_topics(timeout=5)
            # the refusal itself, at once (it waited for its timeout, then "timed out")
            assert failed.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
            assert time.monotonic() - started < 2
        finally:
            p.close()
        assert refused and refused[0].code() == KafkaError._UNSUPPORTED_FEATURE, refused
