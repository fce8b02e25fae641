"""kafka_client.config: the property table, parsing, validation, derived defaults, docs."""
from __future__ import annotations

import logging
import re
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_client import KafkaError, KafkaException
from kafka_client.config import (
    IGNORED,
    PROPERTIES,
    ClientConfig,
    describe,
    parse_bootstrap_servers,
    to_markdown,
)

ROOT = Path(__file__).resolve().parents[2]


def parse(conf, role="producer"):
    return ClientConfig.from_dict(conf, role)


def invalid(conf, role="producer") -> str:
    """Parse *conf*, expect an _INVALID_ARG KafkaException, return its message."""
    with pytest.raises(KafkaException) as info:
        ClientConfig.from_dict(conf, role)
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    assert err.code() == KafkaError._INVALID_ARG == -186
    return err.str()


# --- the table ---

REQUIRED = """
bootstrap.servers client.id socket.timeout.ms socket.connection.setup.timeout.ms
metadata.max.age.ms topic.metadata.refresh.interval.ms topic.metadata.refresh.fast.interval.ms
reconnect.backoff.ms reconnect.backoff.max.ms retry.backoff.ms retry.backoff.max.ms
request.timeout.ms message.max.bytes receive.message.max.bytes
max.in.flight.requests.per.connection statistics.interval.ms debug linger.ms
batch.num.messages batch.size queue.buffering.max.messages queue.buffering.max.kbytes acks
compression.type compression.level retries message.timeout.ms partitioner
sticky.partitioning.linger.ms enable.idempotence enable.gapless.guarantee transactional.id
transaction.timeout.ms group.id group.instance.id session.timeout.ms heartbeat.interval.ms
max.poll.interval.ms partition.assignment.strategy enable.auto.commit auto.commit.interval.ms
enable.auto.offset.store auto.offset.reset enable.partition.eof isolation.level
fetch.min.bytes fetch.wait.max.ms fetch.max.bytes max.partition.fetch.bytes
queued.min.messages queued.max.messages.kbytes fetch.queue.backoff.ms check.crcs
allow.auto.create.topics api.version.request security.protocol error_cb stats_cb on_delivery
logger throttle_cb
""".split()

ALIASES = {
    "metadata.broker.list": "bootstrap.servers",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "queue.buffering.max.ms": "linger.ms",
    "request.required.acks": "acks",
    "compression.codec": "compression.type",
    "message.send.max.retries": "retries",
    "delivery.timeout.ms": "message.timeout.ms",
    "fetch.message.max.bytes": "max.partition.fetch.bytes",
    "dr_cb": "on_delivery",
}


def test_table_covers_required_properties():
    missing = [n for n in REQUIRED if n not in PROPERTIES]
    assert missing == []


@pytest.mark.parametrize("alias,canonical", sorted(ALIASES.items()))
def test_aliases_resolve(alias, canonical):
    assert describe(alias).name == canonical
    assert alias in describe(canonical).aliases


def test_table_entries_are_consistent():
    for p in PROPERTIES.values():
        assert p.scope in ("*", "P", "C"), p.name
        assert p.description and p.description[-1] in ".)", p.name
        if p.type in ("int", "float"):
            assert p.min is not None and p.max is not None, p.name
            assert p.min <= p.default <= p.max, p.name
        if p.type == "enum":
            assert p.default in p.values, p.name
        if p.type == "csv" and p.values:
            assert all(v in p.values for v in p.default), p.name


# Defaults and ranges as librdkafka 2.x documents them.
LIBRDKAFKA_FACTS = {
    # name: (default, min, max)
    "linger.ms": (5, 0, 900000),
    "batch.num.messages": (10000, 1, 1000000),
    "batch.size": (1000000, 1, 2147483647),
    "message.max.bytes": (1000000, 1000, 1000000000),
    "receive.message.max.bytes": (100000000, 1000, 2147483647),
    "max.in.flight.requests.per.connection": (1000000, 1, 1000000),
    "socket.timeout.ms": (60000, 10, 300000),
    "socket.connection.setup.timeout.ms": (30000, 1000, 2147483647),
    "metadata.max.age.ms": (900000, 1, 86400000),
    "topic.metadata.refresh.interval.ms": (300000, -1, 3600000),
    "topic.metadata.refresh.fast.interval.ms": (100, 1, 60000),
    "reconnect.backoff.ms": (100, 0, 3600000),
    "reconnect.backoff.max.ms": (10000, 0, 3600000),
    "retry.backoff.ms": (100, 1, 300000),
    "retry.backoff.max.ms": (1000, 1, 300000),
    "request.timeout.ms": (30000, 1, 900000),
    "statistics.interval.ms": (0, 0, 86400000),
    "queue.buffering.max.messages": (100000, 0, 2147483647),
    "queue.buffering.max.kbytes": (1048576, 1, 2147483647),
    "acks": (-1, -1, 1000),
    "compression.level": (-1, -1, 12),
    "retries": (2147483647, 0, 2147483647),
    "message.timeout.ms": (300000, 0, 2147483647),
    "sticky.partitioning.linger.ms": (10, 0, 900000),
    "transaction.timeout.ms": (60000, 1000, 2147483647),
    "session.timeout.ms": (45000, 1, 3600000),
    "heartbeat.interval.ms": (3000, 1, 3600000),
    "max.poll.interval.ms": (300000, 1, 86400000),
    "auto.commit.interval.ms": (5000, 0, 86400000),
    "fetch.min.bytes": (1, 1, 100000000),
    "fetch.wait.max.ms": (500, 0, 300000),
    "fetch.max.bytes": (52428800, 0, 2147483135),
    "max.partition.fetch.bytes": (1048576, 1, 1000000000),
    "queued.min.messages": (100000, 1, 10000000),
    "queued.max.messages.kbytes": (65536, 1, 2097151),
    "fetch.queue.backoff.ms": (1000, 0, 300000),
}


@pytest.mark.parametrize("name", sorted(LIBRDKAFKA_FACTS))
def test_defaults_and_ranges_match_librdkafka(name):
    default, lo, hi = LIBRDKAFKA_FACTS[name]
    p = describe(name)
    assert (p.default, p.min, p.max) == (default, lo, hi)


def test_enum_and_bool_defaults():
    c = parse({}, "consumer")
    assert c["auto.offset.reset"] == "latest"
    assert c["isolation.level"] == "read_committed"
    assert c["partition.assignment.strategy"] == ("range", "roundrobin")
    assert c["enable.auto.commit"] is True
    assert c["enable.auto.offset.store"] is True
    assert c["enable.partition.eof"] is False
    assert c["check.crcs"] is False
    assert c["api.version.request"] is True
    assert c["security.protocol"] == "plaintext"
    p = parse({})
    assert p["compression.type"] == "none"
    assert p["partitioner"] == "consistent_random"
    assert p["enable.idempotence"] is False
    assert p["enable.gapless.guarantee"] is False
    assert p["transactional.id"] is None
    assert p["debug"] == ()
    assert p["on_delivery"] is None


def test_describe_unknown_raises_invalid_arg():
    with pytest.raises(KafkaException) as info:
        describe("no.such.thing")
    assert info.value.args[0] == KafkaError._INVALID_ARG


# --- parsing and conversion ---

def test_access_styles_and_mapping():
    c = parse({"bootstrap.servers": "h:1", "linger.ms": 7})
    assert c["linger.ms"] == c.linger_ms == c["queue.buffering.max.ms"] == 7.0
    assert isinstance(c.linger_ms, float)
    assert c.max_in_flight_requests_per_connection == 1000000
    assert c.error_cb is None
    assert c.role == "producer"
    assert set(c) == set(PROPERTIES)
    assert len(c) == len(PROPERTIES)
    assert "max.in.flight" in c and "nope" not in c
    with pytest.raises(KeyError):
        c["nope"]
    with pytest.raises(AttributeError):
        c.nope
    with pytest.raises(AttributeError):
        c.linger_ms = 3
    assert c.is_explicit("queue.buffering.max.ms") and not c.is_explicit("batch.size")
    assert c.explicit() == {"bootstrap.servers": "h:1", "linger.ms": 7.0}
    assert c.as_dict()["batch.size"] == 1000000


@pytest.mark.parametrize("raw,expected", [
    ("5", 5), (" 5 ", 5), (5, 5), (5.0, 5), ("-1", -1), ("all", -1), ("ALL", -1), (-1, -1),
    (0, 0), ("1", 1), (1000, 1000),
])
def test_int_conversion_acks(raw, expected):
    c = parse({"acks": raw})
    assert c["acks"] == expected and type(c["acks"]) is int


@pytest.mark.parametrize("raw,expected", [
    (1500.7, 1500), ("1500.7", 1500), ("1500.", 1500), (1500.9, 1500), ("0x5dc", 1500),
    ("0X5DC", 1500), ("02734", 1500), (" +1500 ", 1500),
])
def test_int_reads_numbers_as_librdkafka(raw, expected):
    """librdkafka (strtol, base 0) drops a fraction and reads 0x hex and 0 octal;
    confluent-kafka passes a float as its text: socket.timeout.ms=1500.7 is 1500 there.
    These were refused ("expected an integer")."""
    c = parse({"socket.timeout.ms": raw})
    assert c["socket.timeout.ms"] == expected and type(c["socket.timeout.ms"]) is int


@pytest.mark.parametrize("raw", ["1e3", "1500abc", "5ms", "08", "0x", "1_000", "1,000",
                                 "\u0661\u0662", ".5", "12.5.3"])
def test_int_refuses_what_librdkafka_would_misread(raw):
    """strtol stops at the first character it cannot take and librdkafka keeps what it
    read ("1e3" is 1, "5ms" is 5, "08" is 0): refused here, naming the value."""
    msg = invalid({"socket.timeout.ms": raw})
    assert msg == (f"Invalid value {raw!r} for configuration property \"socket.timeout.ms\": "
                   "expected an integer in range 10 .. 300000")


def test_float_for_an_int_is_range_checked_after_dropping_the_fraction():
    assert invalid({"log_level": "010"}) == (  # octal 8, as librdkafka reads it
        'Configuration property "log_level" value 8 is outside allowed range 0..7')
    assert parse({"log_level": 7.9})["log_level"] == 7
    assert parse({"log_level": -0.5})["log_level"] == 0  # toward zero, as C's conversion
    assert "value -1 is outside" in invalid({"message.timeout.ms": -1.5})


@pytest.mark.parametrize("raw", [0.7, "0.5", -0.5, "1.5", 1.25, Decimal("0.9")])
def test_acks_with_a_fraction_is_refused(raw):
    """librdkafka drops the fraction (acks=0.7 is 0: no acknowledgement at all); a typo
    that turns off acknowledgements is refused here, naming the value and what librdkafka
    would have made of it. Whole values written as floats stay accepted."""
    msg = invalid({"acks": raw})
    assert msg.startswith(f"Invalid value {raw!r} for configuration property \"acks\": "
                          "expected a whole number (librdkafka would read ")
    assert parse({"acks": 1.0})["acks"] == 1 and parse({"acks": "-1.0"})["acks"] == -1


def test_other_number_types_are_read_from_their_text_as_confluent_kafka_passes_them():
    """Decimal, Fraction (and numpy's scalars): confluent-kafka passes str(value) to
    librdkafka, which takes it; they were refused here ("expected an integer")."""
    assert parse({"socket.timeout.ms": Decimal("1500.7")})["socket.timeout.ms"] == 1500
    assert parse({"acks": Fraction(1, 1)})["acks"] == 1
    assert parse({"linger.ms": Decimal("5.5")})["linger.ms"] == 5.5
    assert "Fraction(3, 2)" in invalid({"acks": Fraction(3, 2)})  # "3/2": not a number
    assert "(1+0j)" in invalid({"acks": 1 + 0j})


def test_float_reads_hex_and_refuses_what_strtod_would_cut():
    assert parse({"linger.ms": "0x10"})["linger.ms"] == 16.0
    for raw in ("1_0", "nan", "5abc", "\u0661"):
        assert repr(raw) in invalid({"linger.ms": raw})


def test_empty_string_for_a_typed_property_is_no_value_as_in_librdkafka():
    """librdkafka refuses "" as it refuses None, in the same words (these said "Invalid
    value ''" here, and "" was taken for sasl.mechanism, debug, builtin.features and
    broker.version.fallback)."""
    assert invalid({"acks": ""}) == (
        'Integer configuration property "acks" cannot be set to empty value')
    assert invalid({"check.crcs": ""}, "consumer") == (
        'Bool configuration property "check.crcs" cannot be set to empty value')
    assert invalid({"debug": ""}) == 'Configuration property "debug" cannot be set to empty value'
    assert invalid({"sasl.mechanisms": ""}) == (
        'Invalid value for configuration property "sasl.mechanisms" (alias of '
        '"sasl.mechanism"): (null)')
    assert invalid({"partitioner": ""}) == 'Invalid value for configuration property ' \
        '"partitioner": (null)'
    assert parse({"client.id": ""})["client.id"] == ""  # a plain string stays as given


@pytest.mark.parametrize("raw", ["x", True, [1], float("nan"), -2, 1001])
def test_int_rejects(raw):
    msg = invalid({"acks": raw})
    assert '"acks"' in msg
    assert repr(raw) in msg or str(raw) in msg
    assert "-1" in msg and "1000" in msg  # the allowed range is named


@pytest.mark.parametrize("raw,expected", [
    ("true", True), ("TRUE", True), ("t", True), ("1", True), (1, True), (True, True),
    ("false", False), ("False", False), ("f", False), ("0", False), (0, False), (False, False),
])
def test_bool_conversion(raw, expected):
    assert parse({"enable.partition.eof": raw}, "consumer")["enable.partition.eof"] is expected


@pytest.mark.parametrize("raw", ["yes", "on", " true", 2, 1.0, [True]])
def test_bool_rejects(raw):
    msg = invalid({"check.crcs": raw}, "consumer")
    assert '"check.crcs"' in msg and "true or false" in msg


def test_float_linger():
    assert parse({"linger.ms": "0.5"})["linger.ms"] == 0.5
    assert parse({"linger.ms": 0})["linger.ms"] == 0.0
    msg = invalid({"linger.ms": 900001})
    assert msg == ('Configuration property "linger.ms" value 900001 is outside allowed range '
                   "0..900000")
    msg = invalid({"queue.buffering.max.ms": "1e9"})
    assert '"queue.buffering.max.ms" (alias of "linger.ms")' in msg and "0..900000" in msg
    assert "900000" in invalid({"linger.ms": "inf"})


@pytest.mark.parametrize("name,bad,lo,hi", [
    ("batch.num.messages", 0, 1, 1000000),
    ("batch.num.messages", 1000001, 1, 1000000),
    ("batch.size", 0, 1, 2147483647),
    ("message.max.bytes", 999, 1000, 1000000000),
    ("compression.level", 13, -1, 12),
    ("socket.timeout.ms", 9, 10, 300000),
])
def test_out_of_range_names_property_value_and_range(name, bad, lo, hi):
    msg = invalid({name: bad})
    assert msg == (f'Configuration property "{name}" value {bad} is outside allowed range '
                   f"{lo}..{hi}")


def test_enums_are_case_insensitive_and_synonyms_map():
    assert parse({"compression.codec": "LZ4"})["compression.type"] == "lz4"
    assert parse({"partitioner": "murmur2_random"})["partitioner"] == "murmur2_random"
    for raw, want in [("smallest", "earliest"), ("earliest", "earliest"),
                      ("beginning", "earliest"), ("largest", "latest"), ("latest", "latest"),
                      ("end", "latest"), ("error", "error"), ("Earliest", "earliest")]:
        assert parse({"auto.offset.reset": raw}, "consumer")["auto.offset.reset"] == want
    assert parse({"isolation.level": "READ_UNCOMMITTED"}, "consumer")[
        "isolation.level"] == "read_uncommitted"


def test_enum_rejects_name_allowed_values():
    msg = invalid({"compression.type": "brotli"})
    assert "'brotli'" in msg and '"compression.type"' in msg
    assert "none, gzip, snappy, lz4, zstd" in msg
    # librdkafka checks "partitioner" apart, in its own words (applications match on them)
    msg = invalid({"partitioner": "bogus"})
    assert msg == 'Invalid value for configuration property "partitioner": bogus'
    msg = invalid({"auto.offset.reset": "middle"}, "consumer")
    assert "earliest" in msg and "smallest" in msg


def test_csv_properties():
    c = parse({"debug": "broker, topic,MSG"})
    assert c.debug == ("broker", "topic", "msg")
    assert parse({"debug": ["all"]}).debug == ("all",)
    assert "'bogus'" in invalid({"debug": "broker,bogus"})
    c = parse({"partition.assignment.strategy": "cooperative-sticky"}, "consumer")
    assert c.partition_assignment_strategy == ("cooperative-sticky",)


def test_librdkafkas_mock_cluster_properties_point_to_the_test_cluster():
    # confluent-kafka's own tests create clients with test.mock.num.brokers; here the
    # refusal says what to use instead, not only "no such property"
    for name in ("test.mock.num.brokers", "test.mock.broker.rtt"):
        text = invalid({name: 1})
        assert "not supported by this client" in text and "kafka_client.testing.Cluster" \
            in text, text


def test_strings_and_none():
    c = parse({"client.id": 5, "bootstrap.servers": None, "transactional.id": None})
    assert c.client_id == "5"
    assert c.bootstrap_servers is None and not c.is_explicit("bootstrap.servers")
    assert "expected a string" in invalid({"client.id": b"x"})
    # str() of a container is text nobody means ("['h1:9092', 'h2:9092']" as host names)
    for several in (["h1:9092", "h2:9092"], ("h1:9092",), {"h1:9092"}):
        assert "several values: one comma-separated string" in invalid(
            {"bootstrap.servers": several})
    assert "expected a string" in invalid({"group.id": {"name": "g"}})


def test_callbacks_and_logger():
    def cb(*a):
        return None

    c = parse({"error_cb": cb, "on_delivery": cb, "stats_cb": cb, "throttle_cb": cb,
               "logger": logging.getLogger("x")})
    assert c.error_cb is cb and c.on_delivery is cb and c["dr_cb"] is cb
    assert "expected a callable" in invalid({"error_cb": "not callable"})
    assert "logging.Logger" in invalid({"logger": 5})


def test_unknown_property_names_it_and_suggests():
    msg = invalid({"lingr.ms": 1})
    assert msg == 'No such configuration property: "lingr.ms" (did you mean "linger.ms"?)'
    msg = invalid({"bootstrap.server": "x"})
    assert 'did you mean "bootstrap.servers"' in msg
    assert invalid({"zzzzzz": 1}) == 'No such configuration property: "zzzzzz"'
    assert "must be strings" in invalid({5: 1})


def test_bad_role_and_bad_mapping():
    with pytest.raises(ValueError):
        ClientConfig.from_dict({}, "broker")
    with pytest.raises(TypeError):
        ClientConfig.from_dict([("linger.ms", 1)], "producer")


def test_security_protocols_and_their_checks():
    assert parse({"security.protocol": "PLAINTEXT"}).security_protocol == "plaintext"
    assert parse({"security.protocol": "SSL"}).security.ssl_context is not None
    assert parse({"security.protocol": "plaintext"}).security.ssl_context is None
    sasl = parse({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": "u", "sasl.password": "p"}).security
    assert sasl.ssl_context is not None and sasl.mechanism == "SCRAM-SHA-512"
    assert "allowed values" in invalid({"security.protocol": "tls"})
    # SASL without credentials, an unknown mechanism, GSSAPI (the default): clear errors
    msg = invalid({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN"})
    assert '"sasl.username"' in msg and '"sasl.password"' in msg
    msg = invalid({"security.protocol": "sasl_plaintext", "sasl.mechanism": "DIGEST-MD5"})
    assert "DIGEST-MD5" in msg and "not supported" in msg and "SCRAM-SHA-256" in msg
    msg = invalid({"security.protocol": "sasl_plaintext"})
    # GSSAPI's default kinit command needs the keytab, as librdkafka says
    assert '"sasl.kerberos.keytab"' in msg and "sasl.kerberos.min.time.before.relogin" in msg
    msg = invalid({"security.protocol": "ssl", "ssl.ca.location": "/nonexistent/ca.pem"})
    assert '"ssl.ca.location"' in msg and "/nonexistent/ca.pem" in msg
    msg = invalid({"security.protocol": "ssl", "ssl.certificate.location": "/x.pem"})
    assert "ssl.key.location" in msg
    msg = invalid({"security.protocol": "sasl_ssl", "sasl.mechanism": "OAUTHBEARER"})
    assert "oauth_cb" in msg and "enable.sasl.oauthbearer.unsecure.jwt" in msg


def test_later_alias_wins_like_librdkafka():
    c = parse({"linger.ms": 1, "queue.buffering.max.ms": 2})
    assert c.linger_ms == 2.0


# --- role scope warnings ---

def test_consumer_property_on_producer_warns_not_fails(caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        c = parse({"group.id": "g", "enable.auto.commit": "false"}, "producer")
    assert c.group_id == "g"
    msgs = [r.getMessage() for r in caplog.records]
    assert any("group.id is a consumer property" in m and "producer" in m for m in msgs)
    assert any("enable.auto.commit" in m for m in msgs)


def test_producer_property_on_consumer_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        parse({"linger.ms": 5, "client.id": "c"}, "consumer")
    msgs = [r.getMessage() for r in caplog.records]
    assert len([m for m in msgs if "producer property" in m]) == 1
    assert "linger.ms" in msgs[0]


def test_admin_client_takes_producer_properties_silently_and_warns_for_consumer_ones(caplog):
    """librdkafka's admin client is a producer handle: one config dict shared with the
    Producer (acks, linger.ms, ...) gives no warning; consumer properties do."""
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        parse({"acks": "all", "linger.ms": 20, "enable.idempotence": True}, "admin")
        assert caplog.records == []
        parse({"group.id": "g"}, "admin")
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "group.id is a consumer property" in msgs[0]


def test_no_warning_for_common_properties(caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        parse({"client.id": "c", "linger.ms": 1}, "producer")
    assert caplog.records == []


def test_warnings_go_to_configured_logger():
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    lg = logging.getLogger("test_config.custom")
    lg.addHandler(Collect())
    lg.propagate = False
    parse({"group.id": "g", "logger": lg}, "producer")
    assert any("group.id" in m for m in records)


# --- idempotence and other cross-property rules ---

def test_idempotence_adjusts_defaults():
    c = parse({"enable.idempotence": True})
    assert c.acks == -1
    assert c.max_in_flight_requests_per_connection == 5
    assert c.retries == 2147483647
    assert c.queue_buffering_backpressure_threshold == 1


def test_idempotence_accepts_compatible_explicit_values():
    c = parse({"enable.idempotence": "true", "acks": "all", "max.in.flight": 3, "retries": 2})
    assert (c.acks, c.max_in_flight_requests_per_connection, c.retries) == (-1, 3, 2)


@pytest.mark.parametrize("conf,needle", [
    ({"acks": 1}, '"acks" must be all (-1)'),
    ({"request.required.acks": 0}, '"request.required.acks" (alias of "acks") must be all'),
    ({"max.in.flight": 6}, '"max.in.flight" (alias of "max.in.flight.requests.per.connection")'
                           " must be at most 5"),
    ({"max.in.flight.requests.per.connection": 100}, "must be at most 5"),
    ({"retries": 0}, '"retries" must be at least 1'),
    ({"message.send.max.retries": "0"}, "must be at least 1"),
    ({"queue.buffering.backpressure.threshold": 2}, "must be 1"),
])
def test_idempotence_rejects_explicit_conflicts(conf, needle):
    msg = invalid(dict(conf, **{"enable.idempotence": True}))
    assert needle in msg and "enable.idempotence" in msg


def test_without_idempotence_same_values_are_fine():
    c = parse({"acks": 1, "max.in.flight": 100, "retries": 0})
    assert (c.acks, c.max_in_flight_requests_per_connection, c.retries) == (1, 100, 0)


def test_idempotence_ignored_for_consumer():
    c = parse({"enable.idempotence": True, "acks": 0}, "consumer")
    assert c.enable_idempotence is False and c.acks == 0


def test_gapless_requires_idempotence():
    assert "requires" in invalid({"enable.gapless.guarantee": True})
    assert parse({"enable.gapless.guarantee": True, "enable.idempotence": True})[
        "enable.gapless.guarantee"] is True


def test_transactional_id_rules():
    c = parse({"transactional.id": "tx"})
    assert c.enable_idempotence is True
    assert c.message_timeout_ms == 60000  # follows transaction.timeout.ms
    assert c.socket_timeout_ms == 59900
    c = parse({"transactional.id": "tx", "transaction.timeout.ms": 1000})
    assert (c.message_timeout_ms, c.socket_timeout_ms) == (1000, 900)
    assert "requires" in invalid({"transactional.id": "tx", "enable.idempotence": False})
    assert "at most" in invalid({"transactional.id": "tx", "message.timeout.ms": 70000})
    assert "socket.timeout.ms" in invalid({"transactional.id": "tx", "socket.timeout.ms": 70000})
    c = parse({"transactional.id": "tx", "socket.timeout.ms": 60100, "message.timeout.ms": 100})
    assert (c.socket_timeout_ms, c.message_timeout_ms) == (60100, 100)


def test_message_timeout_vs_linger():
    assert "greater than" in invalid({"linger.ms": 1000, "message.timeout.ms": 1000})
    c = parse({"message.timeout.ms": 3})  # default linger 5 is lowered below the timeout
    assert c.linger_ms == pytest.approx(2.9)
    assert parse({"message.timeout.ms": 0, "linger.ms": 100}).linger_ms == 100.0


def test_sticky_linger_derived_from_linger():
    assert parse({}).sticky_partitioning_linger_ms == 10
    assert parse({"linger.ms": 100}).sticky_partitioning_linger_ms == 200
    c = parse({"linger.ms": 800000, "message.timeout.ms": 0})
    assert c.sticky_partitioning_linger_ms == 900000
    assert parse({"linger.ms": 100, "sticky.partitioning.linger.ms": 3})[
        "sticky.partitioning.linger.ms"] == 3


def test_metadata_and_backoff_derived_defaults():
    c = parse({"topic.metadata.refresh.interval.ms": 1000, "retry.backoff.ms": 250})
    assert c.metadata_max_age_ms == 3000
    assert c.topic_metadata_refresh_fast_interval_ms == 250
    c = parse({"topic.metadata.refresh.interval.ms": -1})
    assert c.metadata_max_age_ms == 900000
    c = parse({"topic.metadata.refresh.interval.ms": 1000, "metadata.max.age.ms": 5})
    assert c.metadata_max_age_ms == 5
    assert "reconnect.backoff.max.ms" in invalid(
        {"reconnect.backoff.ms": 2000, "reconnect.backoff.max.ms": 1000})
    # librdkafka takes a retry.backoff.ms above retry.backoff.max.ms (then constant).
    c = parse({"retry.backoff.ms": 2000}, "producer")
    assert c["retry.backoff.max.ms"] == 2000


def test_allow_auto_create_topics_depends_on_role():
    assert parse({}, "producer").allow_auto_create_topics is True
    assert parse({}, "consumer").allow_auto_create_topics is False
    assert parse({}, "admin").allow_auto_create_topics is True  # a producer in librdkafka
    assert parse({"allow.auto.create.topics": True}, "consumer").allow_auto_create_topics


def test_consumer_fetch_size_rules():
    c = parse({}, "consumer")
    assert c.fetch_max_bytes == 52428800
    assert c.receive_message_max_bytes == 100000000
    c = parse({"queued.max.messages.kbytes": 1024}, "consumer")
    assert c.fetch_max_bytes == 1024 * 1024  # capped by the local queue size
    c = parse({"fetch.max.bytes": 200000000}, "consumer")
    assert c.receive_message_max_bytes == 200000512
    assert "message.max.bytes" in invalid({"fetch.max.bytes": 1000, "message.max.bytes": 2000},
                                          "consumer")
    assert "+ 512" in invalid({"fetch.max.bytes": 2000000, "receive.message.max.bytes": 2000000},
                              "consumer")
    assert "session.timeout.ms" in invalid(
        {"max.poll.interval.ms": 1000, "session.timeout.ms": 2000}, "consumer")


def test_assignor_rules():
    assert "mixes cooperative and eager" in invalid(
        {"partition.assignment.strategy": "range,cooperative-sticky"}, "consumer")
    assert "at least one" in invalid({"partition.assignment.strategy": ""}, "consumer")
    assert "'sticky'" in invalid({"partition.assignment.strategy": "sticky"}, "consumer")


# --- bootstrap parsing ---

def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, b ,[::1]:9093,PLAINTEXT://c:9094,[fe80::1],") == [
        ("a", 1), ("b", 9092), ("::1", 9093), ("c", 9094), ("fe80::1", 9092)]
    assert parse_bootstrap_servers("") == []
    for bad in ("a:x", "a:0", "a:70000", ":9092", "[::1", "[::1]x"):
        with pytest.raises(KafkaException):
            parse_bootstrap_servers(bad)
    assert parse({"metadata.broker.list": "h:5"}).broker_addresses() == [("h", 5)]


# --- property tests ---

_NUMERIC = [p for p in PROPERTIES.values() if p.type in ("int", "float")]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_NUMERIC), st.integers(min_value=-(2**33), max_value=2**33),
       st.booleans())
def test_numeric_in_range_accepted_out_of_range_rejected(prop, value, as_string):
    raw = str(value) if as_string else value
    in_range = prop.min <= value <= prop.max
    role = "consumer" if prop.scope == "C" else "producer"
    conf = {prop.name: raw}
    try:
        c = ClientConfig.from_dict(conf, role)
    except KafkaException as exc:
        msg = exc.args[0].str()
        if in_range:
            # Only a cross-property rule may reject an in-range value; it names the property.
            assert prop.name in msg
        else:
            lo_hi = prop.range_text().replace(" .. ", "..").split(" (")[0]
            assert msg == (f'Configuration property "{prop.name}" value {value} is outside '
                           f"allowed range {lo_hi}")
    else:
        assert in_range
        assert c.explicit()[prop.name] == value


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz._", min_size=1, max_size=30))
def test_random_names_are_known_or_rejected_by_name(name):
    if name in IGNORED:
        return
    try:
        c = ClientConfig.from_dict({name: "1"}, "producer")
    except KafkaException as exc:
        msg = exc.args[0].str()
        assert f'"{name}"' in msg
    except TypeError as exc:
        # A property whose value must be a dict (default.topic.config) refuses a string by type.
        assert str(exc).startswith(f"{name} must be a dict")
    else:
        assert c.is_explicit(name)


def test_topic_config_dict_given_a_string_is_refused_by_name():
    for name in ("default.topic.config", "default_topic_conf"):
        with pytest.raises(TypeError, match=f"^{re.escape(name)} must be a dict, not str$"):
            ClientConfig.from_dict({name: "1"}, "producer")


# --- generated docs ---

def test_markdown_lists_every_property():
    md = to_markdown()
    for p in PROPERTIES.values():
        assert f"| `{p.name}` |" in md
    assert "`queue.buffering.max.ms`" in md and "0 .. 900000" in md


def test_committed_docs_match_generated():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == to_markdown(), (
        "docs/configuration.md is stale: run "
        "`python -m kafka_client.config --markdown > docs/configuration.md`")


def test_markdown_command_line():
    out = subprocess.run(
        [sys.executable, "-m", "kafka_client.config", "--markdown"], cwd=ROOT,
        capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == to_markdown()
    assert out.stderr == ""


def test_attribute_names_do_not_shadow_methods():
    methods = {n for n in dir(ClientConfig) if not n.startswith("_")}
    assert methods.isdisjoint(p.attr for p in PROPERTIES.values())


# --- agreement with librdkafka (through confluent-kafka) on accept / reject ---

AGREEMENT_CASES = [
    # (conf, role)
    ({"linger.ms": "20"}, "producer"),
    ({"linger.ms": 900001}, "producer"),
    ({"queue.buffering.max.ms": "0.5"}, "producer"),
    ({"batch.num.messages": 0}, "producer"),
    ({"message.max.bytes": 999}, "producer"),
    ({"acks": "all"}, "producer"),
    ({"acks": "-2"}, "producer"),
    ({"acks": "x"}, "producer"),
    ({"compression.type": "LZ4"}, "producer"),
    ({"compression.type": "brotli"}, "producer"),
    ({"compression.level": 13}, "producer"),
    ({"partitioner": "bogus"}, "producer"),
    ({"enable.idempotence": "t"}, "producer"),
    ({"enable.idempotence": "yes"}, "producer"),
    ({"enable.idempotence": True, "acks": 1}, "producer"),
    ({"enable.idempotence": True, "max.in.flight": 6}, "producer"),
    ({"enable.idempotence": True, "retries": 0}, "producer"),
    ({"enable.idempotence": True, "acks": "all", "max.in.flight": 5, "retries": 3}, "producer"),
    ({"enable.gapless.guarantee": True}, "producer"),
    ({"transactional.id": "x", "enable.idempotence": False}, "producer"),
    ({"transactional.id": "x", "message.timeout.ms": 70000}, "producer"),
    ({"transactional.id": "x", "socket.timeout.ms": 70000}, "producer"),
    ({"linger.ms": 1000, "message.timeout.ms": 1000}, "producer"),
    ({"reconnect.backoff.ms": 2000, "reconnect.backoff.max.ms": 1000}, "producer"),
    ({"lingr.ms": 1}, "producer"),
    ({"debug": "broker,topic"}, "producer"),
    ({"debug": "bogus"}, "producer"),
    ({"group.id": "g", "auto.offset.reset": "smallest"}, "consumer"),
    ({"group.id": "g", "auto.offset.reset": "bogus"}, "consumer"),
    ({"group.id": "g", "isolation.level": "READ_COMMITTED"}, "consumer"),
    ({"group.id": "g", "linger.ms": 5}, "consumer"),
    ({"group.id": "g", "max.poll.interval.ms": 1000, "session.timeout.ms": 2000}, "consumer"),
    ({"group.id": "g", "fetch.max.bytes": 1000, "message.max.bytes": 2000}, "consumer"),
    ({"group.id": "g", "partition.assignment.strategy": "range,cooperative-sticky"},
     "consumer"),
    ({"group.id": "g", "session.timeout.ms": "abc"}, "consumer"),
]


@pytest.mark.parametrize("conf,role", AGREEMENT_CASES)
def test_accepts_and_rejects_like_librdkafka(conf, role):
    ck = pytest.importorskip("confluent_kafka")
    cls = ck.Producer if role == "producer" else ck.Consumer
    full = dict(conf, **{"log_level": 0})  # keep librdkafka's warnings off the test output
    try:
        client = cls(full)
        theirs = True
    except ck.KafkaException:
        theirs = False
    else:
        if role == "consumer":
            client.close()
    try:
        ClientConfig.from_dict(conf, role)
        ours = True
    except KafkaException:
        ours = False
    assert ours == theirs


def test_librdkafka_internal_knobs_are_ignored_with_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        c = parse({"socket.max.fails": 3, "log.thread.name": "false", "linger.ms": 1})
    assert c["socket.max.fails"] == 3 and c.linger_ms == 1.0
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("socket.max.fails" in m and "ignored" in m for m in msgs) == 1
    assert sum("log.thread.name" in m for m in msgs) == 1
    assert "`socket.max.fails`" in to_markdown()
    # values that would change semantics are refused, naming the property and the reason
    msg = invalid({"queuing.strategy": "lifo"})
    assert '"queuing.strategy"' in msg and "lifo" in msg and "produce order" in msg


# --- every librdkafka property name (CONFIGURATION.md of librdkafka 2.x) ---

LIBRDKAFKA_NAMES = (
    "builtin.features", "client.id", "metadata.broker.list", "bootstrap.servers",
    "message.max.bytes", "message.copy.max.bytes", "receive.message.max.bytes",
    "max.in.flight.requests.per.connection", "max.in.flight", "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms", "topic.metadata.refresh.interval.ms",
    "metadata.max.age.ms", "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.fast.cnt", "topic.metadata.refresh.sparse",
    "topic.metadata.propagation.max.ms", "topic.blacklist", "debug", "socket.timeout.ms",
    "socket.blocking.max.ms", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "socket.keepalive.enable", "socket.nagle.disable", "socket.max.fails",
    "broker.address.ttl", "broker.address.family", "socket.connection.setup.timeout.ms",
    "connections.max.idle.ms", "reconnect.backoff.jitter.ms", "reconnect.backoff.ms",
    "reconnect.backoff.max.ms", "statistics.interval.ms", "enabled_events", "error_cb",
    "throttle_cb", "stats_cb", "log_cb", "log_level", "log.queue", "log.thread.name",
    "enable.random.seed", "log.connection.close", "background_event_cb", "socket_cb",
    "connect_cb", "closesocket_cb", "open_cb", "resolve_cb", "opaque",
    "default_topic_conf", "internal.termination.signal", "api.version.request",
    "api.version.request.timeout.ms", "api.version.fallback.ms", "broker.version.fallback",
    "allow.auto.create.topics", "security.protocol", "ssl.cipher.suites",
    "ssl.curves.list", "ssl.sigalgs.list", "ssl.key.location", "ssl.key.password",
    "ssl.key.pem", "ssl_key", "ssl.certificate.location", "ssl.certificate.pem",
    "ssl_certificate", "ssl.ca.location", "https.ca.location", "https.ca.pem",
    "ssl.ca.pem", "ssl_ca", "ssl.ca.certificate.stores", "ssl.crl.location",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.providers",
    "ssl.engine.location", "ssl.engine.id", "ssl_engine_callback_data",
    "enable.ssl.certificate.verification", "ssl.endpoint.identification.algorithm",
    "ssl.certificate.verify_cb", "sasl.mechanisms", "sasl.mechanism",
    "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.keytab", "sasl.kerberos.min.time.before.relogin", "sasl.username",
    "sasl.password", "sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt",
    "oauthbearer_token_refresh_cb", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.grant.type",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.assertion.algorithm", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem", "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss", "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.metadata.authentication.type", "plugin.library.paths",
    "interceptors", "group.id", "group.instance.id", "partition.assignment.strategy",
    "session.timeout.ms", "heartbeat.interval.ms", "group.protocol.type", "group.protocol",
    "group.remote.assignor", "coordinator.query.interval.ms", "max.poll.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store",
    "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms",
    "fetch.queue.backoff.ms", "fetch.message.max.bytes", "max.partition.fetch.bytes",
    "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms", "offset.store.method",
    "isolation.level", "consume_cb", "rebalance_cb", "offset_commit_cb",
    "enable.partition.eof", "check.crcs", "client.rack", "transactional.id",
    "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "queue.buffering.max.ms",
    "linger.ms", "message.send.max.retries", "retries", "retry.backoff.ms",
    "retry.backoff.max.ms", "queue.buffering.backpressure.threshold", "compression.codec",
    "compression.type", "batch.num.messages", "batch.size", "delivery.report.only.error",
    "dr_cb", "dr_msg_cb", "sticky.partitioning.linger.ms", "client.dns.lookup",
    "enable.metrics.push", "request.required.acks", "acks", "request.timeout.ms",
    "message.timeout.ms", "delivery.timeout.ms", "queuing.strategy",
    "produce.offset.report", "partitioner", "partitioner_cb", "msg_order_cmp",
    "compression.level", "auto.commit.enable", "auto.offset.reset", "offset.store.path",
    "offset.store.sync.interval.ms", "consume.callback.max.messages",
)


def _valid_value(prop):
    """A value librdkafka would accept for the property."""
    if prop.type == "callable":
        return lambda *args: None
    if prop.type == "logger":
        return logging.getLogger("test")
    if prop.type == "mapping":
        return {"acks": "all"}
    if prop.type == "any":
        return object()
    if prop.type == "bool":
        return "true" if prop.default else "false"
    if prop.type in ("int", "float"):
        return str(prop.default)
    if prop.type == "enum":
        return next(v for v in prop.values if v not in prop.refuse_values)
    if prop.type == "csv":
        return prop.values[0] if prop.values else "range"
    return {"sasl.mechanism": "PLAIN", "security.protocol": "plaintext",
            "https.ca.location": "probe"}.get(
        prop.name, prop.default if isinstance(prop.default, str) else "x")


#: what a property needs beside it to be valid, as in librdkafka
_NEEDS = {"ssl.keystore.location": {"ssl.keystore.password": "p"}}


def _valid_conf(name, prop):
    return {name: _valid_value(prop), **_NEEDS.get(prop.name, {})}


@pytest.mark.parametrize("name", LIBRDKAFKA_NAMES)
def test_every_librdkafka_name_has_its_documented_status(name, caplog):
    prop = describe(name)  # known: no "No such configuration property"
    role = "consumer" if prop.scope == "C" else "producer"
    row = next(line for line in to_markdown().splitlines()
               if line.startswith(f"| `{prop.name}` |"))
    assert f"| {prop.status} |" in row  # the documented status is this one
    assert prop.status in ("effect", "warning")  # no name is refused whatever its value
    with caplog.at_level(logging.WARNING):
        c = ClientConfig.from_dict(_valid_conf(name, prop), role)
    assert c.is_explicit(name)
    naming = [r for r in caplog.records if name in r.getMessage()]
    if prop.status == "warning":
        assert len(naming) == 1 and "not supported" in naming[0].getMessage(), naming
    else:
        assert not naming, naming


def test_share_consumer_properties_are_read_and_checked():
    """KIP-932's properties (librdkafka 2.16's ShareConsumer): defaults, values taken
    without regard to case, what is out of range refused."""
    c = ClientConfig.from_dict({}, role="consumer")
    assert (c["share.acknowledgement.mode"], c["max.poll.records"]) == ("implicit", 500)
    c = ClientConfig.from_dict({"share.acknowledgement.mode": "EXPLICIT",
                                "max.poll.records": 7}, role="consumer")
    assert (c["share.acknowledgement.mode"], c["max.poll.records"]) == ("explicit", 7)
    assert "share.acknowledgement.mode" in invalid({"share.acknowledgement.mode": "x"},
                                                   "consumer")
    assert "max.poll.records" in invalid({"max.poll.records": 0}, "consumer")


def test_construction_checks_librdkafka_makes_whatever_the_security_protocol(tmp_path):
    """librdkafka refuses these at construction, TLS or not; they were taken here (a
    mistyped https.ca.location only failed at the first OIDC token request)."""
    missing = str(tmp_path / "nope.pem")
    assert invalid({"https.ca.location": missing}) == (
        f'"https.ca.location" must be an existing file or directory ({missing})')
    for name in ("probe", str(tmp_path)):
        assert parse({"https.ca.location": name})["https.ca.location"] == name
    for conf in ({"ssl.keystore.location": "client.p12"},
                 {"ssl.keystore.location": "client.p12", "ssl.keystore.password": ""}):
        assert invalid(conf, "consumer") == (
            '"ssl.keystore.password" is mandatory when "ssl.keystore.location" is set')


def test_oidc_settings_are_checked_only_where_oauthbearer_is_used():
    """As librdkafka: sasl.oauthbearer.method=oidc with another mechanism (a shared
    configuration, say) is not checked; it was refused for lacking a token endpoint."""
    assert parse({"sasl.oauthbearer.method": "oidc"}).sasl_oauthbearer_method == "oidc"
    assert parse({"sasl.oauthbearer.method": "oidc", "sasl.mechanism": "PLAIN",
                  "enable.sasl.oauthbearer.unsecure.jwt": True})
    msg = invalid({"sasl.oauthbearer.method": "oidc", "sasl.mechanism": "oauthbearer"})
    assert msg == ('"sasl.oauthbearer.token.endpoint.url" is mandatory when '
                   '"sasl.oauthbearer.method=oidc" is set')


@pytest.mark.parametrize("conf,expected", [
    ({"enable.idempotence": True, "acks": 1}, '"acks" must be all (-1)'),
    ({"enable.idempotence": True, "max.in.flight": 6}, "must be at most 5"),
    ({"enable.gapless.guarantee": True}, '"enable.gapless.guarantee" requires'),
    ({"linger.ms": 1000, "message.timeout.ms": 1000}, "must be greater than"),
    ({"transactional.id": "t", "socket.timeout.ms": 70000}, '"transaction.timeout.ms" + 100'),
    ({"partition.assignment.strategy": "range,cooperative-sticky"}, "mixes cooperative"),
])
def test_admin_client_refuses_what_a_producer_refuses(conf, expected):
    """librdkafka's admin client is a producer handle: a configuration shared by a
    producer and an admin client fails both there; the admin client took it here. The
    producer's derived values are not kept for the admin client."""
    assert expected in invalid(conf, "admin")
    assert expected in invalid(conf, "producer")


def test_admin_client_keeps_its_own_values_under_producer_rules():
    c = parse({"transactional.id": "t", "linger.ms": 1000}, "admin")
    assert c.enable_idempotence is False and c.socket_timeout_ms == 60000
    assert c.acks == -1 and c.max_in_flight_requests_per_connection == 1000000


def test_debug_raises_log_level_to_debug_as_librdkafka():
    """confluent-kafka with log_level=0 and debug=broker hands its BROKER debug lines
    (and errors) to the logger; here log_level dropped them."""
    lines = []
    c = parse({"log_level": 0, "debug": "broker",
               "log_cb": lambda level, facility, text: lines.append((level, text))})
    assert c.log_level == 7
    c.logger.debug("connecting")
    assert lines == [(7, "connecting")]
    quiet = parse({"log_level": 0, "log_cb": lambda *args: lines.append(args)})
    quiet.logger.error("dropped")
    assert quiet.log_level == 0 and len(lines) == 1


def test_aws_iam_is_refused_as_not_implemented():
    msg = invalid({"sasl.oauthbearer.metadata.authentication.type": "AWS_IAM"})
    assert msg.startswith('Configuration property "sasl.oauthbearer.metadata.authentication'
                          '.type" value "aws_iam" is not supported by this client: AWS IAM')


def test_every_librdkafka_name_loads():
    """Before this table covered librdkafka's whole list, 79 of these names failed with
    "No such configuration property", and later 24 were still refused by name (the
    ones librdkafka sets through C functions, and four OpenSSL and plugin settings).
    Now every one loads with a valid value: it has its effect or one warning names it."""
    for name in LIBRDKAFKA_NAMES:
        prop = describe(name)
        ClientConfig.from_dict(_valid_conf(name, prop),
                               "consumer" if prop.scope == "C" else "producer")
    assert not [p.name for p in PROPERTIES.values() if p.status == "refused"]


def test_a_callback_under_both_its_names_is_an_error():
    cb = lambda *args: None  # noqa: E731
    for conf, role in (({"oauth_cb": cb, "oauthbearer_token_refresh_cb": cb}, "producer"),
                       ({"on_commit": cb, "offset_commit_cb": cb}, "consumer"),
                       ({"ssl.key.pem": "k", "ssl_key": "k"}, "producer"),
                       ({"default_topic_conf": {}, "default.topic.config": {}}, "producer")):
        msg = invalid(conf, role)
        first, second = conf
        assert f'"{first}"' in msg and f'"{second}"' in msg and "only one" in msg
    c = parse({"offset_commit_cb": cb}, "consumer")
    assert c.on_commit is cb and c["offset_commit_cb"] is cb


def test_default_topic_conf_is_merged_and_wins():
    c = parse({"message.timeout.ms": 1000, "linger.ms": 2,
               "default_topic_conf": {"message.timeout.ms": 4000}})
    assert c.message_timeout_ms == 4000 and c.linger_ms == 2
    assert c.default_topic_conf == {"message.timeout.ms": 4000}
    assert c.is_explicit("default.topic.config")
    assert "bogus" in invalid({"default_topic_conf": {"bogus": 1}})


def test_plugin_library_paths_warning_names_the_paths(caplog):
    with caplog.at_level(logging.WARNING, logger="kafka_client.config"):
        parse({"plugin.library.paths": "monitoring-interceptor,/opt/x.so"})
    (line,) = [r.getMessage() for r in caplog.records]
    assert "plugin.library.paths" in line and "monitoring-interceptor,/opt/x.so" in line


@pytest.mark.parametrize("name, value", [
    ("acks", None), ("linger.ms", None), ("enable.idempotence", None),
    ("compression.type", None), ("security.protocol", None), ("debug", None),
    ("enable.ssl.certificate.verification", None)])
def test_none_for_a_typed_property_is_refused_like_librdkafka(name, value):
    msg = invalid({name: value})
    assert "cannot be set to empty value" in msg and name in msg
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with pytest.raises(confluent_kafka.KafkaException):
        confluent_kafka.Producer({name: value})


def test_none_for_strings_callables_and_logger_means_default():
    c = parse({"client.id": None, "error_cb": None, "logger": None,
               "partition.assignment.strategy": None}, "consumer")
    assert c.client_id == "kafka-native" and c.error_cb is None


def test_refused_values_name_the_reason():
    assert "file offset store" in invalid({"offset.store.method": "file"}, "consumer")
    msg = invalid({"builtin.features": "gzip,plugins"})
    assert "plugins" in msg and "cannot be loaded" in msg
    assert parse({"builtin.features": "gzip,ssl,sasl_scram"}).builtin_features == (
        "gzip", "ssl", "sasl_scram")


@pytest.mark.parametrize("name,value", [("session.timeout.ms", 10000),
                                        ("heartbeat.interval.ms", 1000),
                                        ("partition.assignment.strategy", "range"),
                                        ("group.protocol.type", "consumer")])
def test_the_consumer_group_protocol_refuses_what_the_broker_decides(name, value):
    # As librdkafka: with KIP-848 these are broker settings, and setting them is an error
    msg = invalid({"group.protocol": "consumer", name: value}, "consumer")
    assert f'"{name}"' in msg and "group.protocol=consumer" in msg
    cfg = ClientConfig.from_dict({"group.protocol": "consumer", "group.remote.assignor": "range",
                                  "max.poll.interval.ms": 1000}, "consumer")
    # ... and max.poll.interval.ms is not held against the classic session.timeout.ms
    assert cfg["group.remote.assignor"] == "range" and cfg["max.poll.interval.ms"] == 1000
    ClientConfig.from_dict({"group.protocol": "classic", name: value}, "consumer")


def test_log_cb_receives_the_clients_log_lines_filtered_by_log_level():
    lines = []
    c = parse({"log_cb": lambda *a: lines.append(a), "log_level": 4,
               "socket.max.fails": 2})
    # the config's own warning went to log_cb, as syslog level 4
    assert lines and lines[0][0] == 4 and "socket.max.fails" in lines[0][2]
    log = c["logger"]
    log.info("not shown at log_level 4")
    log.error("shown %d", 3)
    assert lines[-1] == (3, "kafka_client", "shown 3") and len(lines) == 2


def test_topic_blacklist_compiles_once_and_matches_anywhere_in_the_name():
    cfg = ClientConfig.from_dict({"topic.blacklist": "^__.*,secret"}, "consumer")
    assert cfg.topic_hidden("__consumer_offsets")
    assert cfg.topic_hidden("my-secret-topic")      # unanchored, as librdkafka's regexec
    assert not cfg.topic_hidden("orders")
    assert not ClientConfig.from_dict({}, "consumer").topic_hidden("__consumer_offsets")
    with pytest.raises(KafkaException) as info:
        ClientConfig.from_dict({"topic.blacklist": "ok,(unclosed"}, "producer")
    assert '"topic.blacklist"' in str(info.value)


def test_an_empty_transactional_id_is_no_transactional_id():
    """As librdkafka: "" is not set (the producer is not transactional; its calls say
    _NOT_CONFIGURED). It made a transactional producer whose init_transactions() the
    broker refused, retriably, for ever."""
    c = parse({"transactional.id": ""}, "producer")
    assert c["transactional.id"] is None
