"""SASL GSSAPI against a real KDC (MIT krb5kdc on a loopback port, kafka_client._testing
.kerberos): the client's mechanism and the test cluster's acceptor run the whole RFC 4752
exchange in-process (Kerberos mutual authentication, the security layer offer and
choice); Kerberos failures are SaslErrors with the library's words; the kinit command
is rendered and run as librdkafka does."""
from __future__ import annotations

import logging
import subprocess
import time

import pytest

from kafka_client._net.security import SecurityConfigError, SecuritySettings, gssapi
from kafka_client._net.security.gssapi import (
    GssapiMechanism,
    GssError,
    KinitRefresher,
    render_kinit_cmd,
)
from kafka_client._testing.kerberos import REALM, Kdc, kdc_unavailable
from kafka_client.config import PROPERTIES, ClientConfig
from kafka_client.testing._sasl import AuthenticationFailed, Credentials, SaslExchange

pytestmark = pytest.mark.skipif(kdc_unavailable() is not None or gssapi.available(),
                                reason=kdc_unavailable() or gssapi.available() or "")


@pytest.fixture(scope="module")
def realm():
    """A KDC with the broker's service principal and the client alice, and this
    process's Kerberos environment pointed at it (the acceptor's keytab, alice's
    credential cache, filled by kinit)."""
    with Kdc() as kdc:
        service = kdc.add_principal("kafka/127.0.0.1")
        alice = kdc.add_principal("alice")
        with kdc.activated(keytab=service, ccache="alice-ccache"):
            subprocess.run(["kinit", "-k", "-t", str(alice), "alice"], check=True,
                           capture_output=True)
            yield kdc, alice


def run_exchange(client, server):
    """Drive a client mechanism and a server exchange to the end as a connection does
    (SaslAuthenticate rounds); returns the number of client messages."""
    message = client.initial()
    rounds = 1
    while True:
        challenge = server.step(message)
        message = client.respond(challenge)
        if message is None:
            return rounds
        rounds += 1


def test_the_whole_rfc4752_exchange(realm):
    server = SaslExchange("GSSAPI", Credentials({}, ["GSSAPI"]), raw_tokens=False)
    client = GssapiMechanism("kafka", "127.0.0.1")
    rounds = run_exchange(client, server)
    # AP-REQ, the empty answer to the broker's AP-REP, the wrapped layer choice
    assert rounds == 3
    assert client.complete and server.done and server.user == "alice"


def test_an_unknown_service_is_a_sasl_error_with_kerberos_words(realm):
    with pytest.raises(GssError) as failed:
        GssapiMechanism("kafka", "otherhost").initial()
    text = str(failed.value)
    assert "kafka@otherhost" in text
    assert f"kafka/otherhost@{REALM} not found in Kerberos database" in text


def test_without_a_ticket_the_error_says_so(realm, monkeypatch, tmp_path):
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/empty-ccache")
    with pytest.raises(GssError, match="No Kerberos credentials available|not found"):
        GssapiMechanism("kafka", "127.0.0.1").initial()


def test_the_server_refuses_a_client_that_asks_for_a_layer(realm):
    server = SaslExchange("GSSAPI", Credentials({}, ["GSSAPI"]), raw_tokens=False)
    client = GssapiMechanism("kafka", "127.0.0.1")
    challenge = server.step(client.initial())
    challenge = server.step(client.respond(challenge))        # the layer offer
    client.respond(challenge)
    # a client choosing integrity protection (2) instead of none
    with pytest.raises(AuthenticationFailed, match="security layer"):
        server.step(client._context.wrap(bytes([2, 0, 0, 0])))


def conf_of(**values):
    conf = {name: prop.default for name, prop in PROPERTIES.items()}
    conf.update(values)
    return conf


def test_kinit_cmd_is_rendered_like_librdkafka():
    conf = conf_of(**{"sasl.kerberos.keytab": "/etc/k.keytab",
                      "sasl.kerberos.principal": "alice"})
    assert render_kinit_cmd(conf) == (
        'kinit -R -t "/etc/k.keytab" -k alice || kinit -t "/etc/k.keytab" -k alice')
    conf["sasl.kerberos.kinit.cmd"] = "x %{sasl.kerberos.service.name} " \
                                      "%{sasl.kerberos.min.time.before.relogin}"
    assert render_kinit_cmd(conf) == "x kafka 60000"
    with pytest.raises(ValueError, match=r"uses %\{sasl.kerberos.keytab\}, which is not set"):
        render_kinit_cmd(conf_of())
    conf["sasl.kerberos.kinit.cmd"] = "x %{no.such.property}"
    with pytest.raises(ValueError, match="names no configuration property"):
        render_kinit_cmd(conf)


def test_the_kinit_command_runs_at_start_and_on_its_interval(tmp_path):
    marker = tmp_path / "runs"
    refresher = KinitRefresher(f"echo run >> {marker}", 0.2, logging.getLogger("t"))
    refresher.start()
    try:
        assert marker.read_text() == "run\n"     # before start() returned
        deadline = time.monotonic() + 5
        while marker.read_text().count("run") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text().count("run") >= 3
    finally:
        refresher.close()


def test_a_failing_kinit_is_logged_with_its_output(caplog):
    refresher = KinitRefresher("echo no keytab here >&2; exit 3", 0,
                               logging.getLogger("kafka_client.security"))
    with caplog.at_level(logging.ERROR, logger="kafka_client.security"):
        refresher.start()
    assert refresher.last_error == "exited with code 3: no keytab here"
    assert any("Kerberos ticket refresh failed" in r.getMessage() and "exit 3" in
               r.getMessage() for r in caplog.records)


def test_the_client_runs_kinit_and_authenticates(realm, tmp_path, monkeypatch):
    kdc, alice_keytab = realm
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/fresh-ccache")
    conf = ClientConfig.from_dict({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.keytab": str(alice_keytab), "sasl.kerberos.principal": "alice"},
        "producer")
    settings = conf.security
    try:
        assert settings.kerberos is not None and settings.kerberos.runs == 1
        assert settings.kerberos.last_error == ""
        server = SaslExchange("GSSAPI", Credentials({}, ["GSSAPI"]), raw_tokens=False)
        run_exchange(settings.new_mechanism("127.0.0.1"), server)
        assert server.user == "alice"
    finally:
        settings.close()


def test_relogin_zero_runs_no_kinit_and_needs_no_keytab(realm):
    conf = ClientConfig.from_dict({"security.protocol": "sasl_plaintext",
                                   "sasl.kerberos.min.time.before.relogin": 0}, "producer")
    try:
        assert conf.security.mechanism == "GSSAPI" and conf.security.kerberos is None
    finally:
        conf.security.close()


def test_a_missing_library_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(gssapi, "_lib", None)
    monkeypatch.setattr(gssapi.ctypes.util, "find_library", lambda _name: None)
    monkeypatch.setattr(gssapi.ctypes, "CDLL", _no_library)
    with pytest.raises(SecurityConfigError, match="libgssapi-krb5-2"):
        SecuritySettings.from_config(conf_of(**{
            "security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI"}))


def test_builtin_features_says_whether_gssapi_is_there(monkeypatch):
    assert ClientConfig.from_dict({"builtin.features": "sasl_gssapi"}, "producer")
    monkeypatch.setattr(gssapi, "_lib", None)
    monkeypatch.setattr(gssapi.ctypes.util, "find_library", lambda _name: None)
    monkeypatch.setattr(gssapi.ctypes, "CDLL", _no_library)
    from kafka_client import KafkaException
    with pytest.raises(KafkaException, match="sasl_gssapi: SASL GSSAPI needs the MIT"):
        ClientConfig.from_dict({"builtin.features": "gzip,sasl_gssapi"}, "producer")


def _no_library(name):
    raise OSError(f"{name}: cannot open shared object file")
