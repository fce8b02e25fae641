"""Client configuration: one table of properties, parsing, validation and derived defaults.

Property names, aliases, defaults and ranges follow librdkafka (so configuration dictionaries
written for confluent-kafka work unchanged), falling back to the Java client where librdkafka
has nothing to say. Build a configuration with::

    conf = ClientConfig.from_dict({"bootstrap.servers": "localhost:9092", "linger.ms": "20"},
                                  role="producer")
    conf["linger.ms"]      # 20.0
    conf.linger_ms         # the same, attribute style (dots become underscores)

Unknown properties and invalid values raise :class:`~kafka_client.errors.KafkaException`
carrying ``KafkaError._INVALID_ARG`` and a message naming the property. A property meant only
for the other kind of client is accepted with a logged warning, as librdkafka does.

Every name librdkafka knows is in the table with a status: *effect* or *warning* (accepted,
ignored, one warning naming it when set), but for the features this client does not have
(:data:`UNSUPPORTED`: refused by name, saying so). Values whose being ignored would weaken what was
asked for are refused with an error naming them (``refuse_values``). The TLS and
SASL settings are built at construction (:attr:`ClientConfig.security`).

``python -m kafka_client.config --markdown`` prints the table as Markdown
(docs/configuration.md is that output).
"""
from __future__ import annotations

import difflib
import logging
import math
import numbers
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Tuple, Union

from ._net.security import SecurityConfigError, SecuritySettings
from ._net.security.gssapi import available as gssapi_unavailable
from .errors import KafkaError, KafkaException

__all__ = [
    "IGNORED",
    "UNSUPPORTED",
    "Property",
    "PROPERTIES",
    "ClientConfig",
    "describe",
    "parse_bootstrap_servers",
    "to_markdown",
]

_log = logging.getLogger("kafka_client.config")

INT32_MAX = 2**31 - 1

# Value types a property can have.
STR = "str"
INT = "int"
FLOAT = "float"
BOOL = "bool"
ENUM = "enum"  # one of `values`, matched case-insensitively; `synonyms` map other spellings
CSV = "csv"  # comma-separated list (or a list/tuple); each item must be in `values` if given
CALLABLE = "callable"
LOGGER = "logger"  # a logging.Logger-like object (has .log())
PEM = "pem"  # a PEM str, or bytes (PEM, or DER: converted where it is loaded)
MAPPING = "mapping"  # a dict of further properties
ANY = "any"  # any value, kept as given (accepted only to be ignored)

ROLES = ("producer", "consumer", "admin")
Role = Literal["producer", "consumer", "admin"]

_SCOPE_NAMES = {"*": "both", "P": "producer", "C": "consumer"}


@dataclass(frozen=True, eq=False)
class Property:
    """One configuration property.

    ``scope`` is ``"P"`` (producer), ``"C"`` (consumer) or ``"*"`` (every client).
    ``min``/``max`` bound numeric values (inclusive). ``values`` lists what an enum or CSV
    property accepts (canonical spellings); ``synonyms`` maps further accepted spellings
    (lower-case) to a canonical value. ``derived`` says how the default changes with other
    properties when this one is not set explicitly.
    """

    name: str
    type: str
    default: Any
    scope: str
    description: str
    aliases: Tuple[str, ...] = ()
    min: Optional[float] = None
    max: Optional[float] = None
    values: Tuple[str, ...] = ()
    synonyms: Mapping[str, Any] = field(default_factory=dict)
    derived: str = ""
    #: EFFECT (it does what librdkafka documents) or WARNING (accepted, ignored, one
    #: warning names it)
    status: str = "effect"
    #: why it is ignored, or what differs from librdkafka
    note: str = ""
    #: values refused although the property has its effect otherwise: value -> reason
    refuse_values: Mapping[Any, str] = field(default_factory=dict)
    #: values accepted with a warning: value -> reason
    warn_values: Mapping[Any, str] = field(default_factory=dict)
    #: roles that accept the property but do not implement it yet (one warning there)
    pending_roles: Tuple[str, ...] = ()
    #: its names are different APIs rather than spellings (a callback and librdkafka's
    #: name for it): giving two of them is an error, not "the later one wins"
    distinct_names: bool = False
    #: the warning of a WARNING property names the value given (what is not loaded)
    warning_names_value: bool = False

    @property
    def attr(self) -> str:
        """Attribute-style name on :class:`ClientConfig` (dots become underscores)."""
        return self.name.replace(".", "_").replace("-", "_")

    def range_text(self) -> str:
        """Human-readable range or allowed values, '' when unconstrained."""
        if self.type in (ENUM, CSV) and self.values:
            extra = [s for s in self.synonyms if s not in self.values]
            return ", ".join(list(self.values) + extra)
        if self.min is not None or self.max is not None:
            lo = _fmt_num(self.min) if self.min is not None else ""
            hi = _fmt_num(self.max) if self.max is not None else ""
            text = f"{lo} .. {hi}"
            if self.synonyms:
                pairs = (f"{k}={_fmt_num(v)}" for k, v in self.synonyms.items())
                text += " (" + ", ".join(pairs) + ")"
            return text
        return ""


def _fmt_num(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


EFFECT, WARNING = "effect", "warning"


def _p(name: str, type_: str, default: Any, scope: str, description: str, **kw: Any) -> Property:
    return Property(name, type_, default, scope, description, **kw)


def _ignored(name: str, type_: str, default: Any, scope: str, description: str, note: str,
             **kw: Any) -> Property:
    """A librdkafka property this client accepts and ignores, with one warning."""
    return Property(name, type_, default, scope, description, status=WARNING, note=note, **kw)


#: librdkafka's builtin.features; those this client has (the rest are refused when asked).
_FEATURES = ("gzip", "snappy", "ssl", "sasl", "regex", "lz4", "sasl_gssapi", "sasl_plain",
             "sasl_scram", "plugins", "zstd", "sasl_oauthbearer", "http", "oidc")
_MISSING_FEATURES = {"plugins": "librdkafka plugins cannot be loaded"}
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_FILE_STORE = "file offset store (deprecated in librdkafka); offsets are always committed to " \
              "the broker"


_DEBUG_CONTEXTS = (
    "generic", "broker", "topic", "metadata", "feature", "queue", "msg", "protocol", "cgrp",
    "security", "fetch", "interceptor", "plugin", "consumer", "admin", "eos", "mock",
    "assignor", "conf", "telemetry", "all",
)
_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
_COOPERATIVE_ASSIGNORS = frozenset(("cooperative-sticky",))
_PARTITIONERS = (
    "consistent_random", "consistent", "random", "murmur2", "murmur2_random", "fnv1a",
    "fnv1a_random",
)

_TABLE: Tuple[Property, ...] = (
    # --- connection and metadata (every client) ---
    _p("bootstrap.servers", STR, None, "*",
       "Brokers to contact first, as a comma-separated list of host or host:port (port "
       "defaults to 9092). The rest of the cluster is learnt from their metadata.",
       aliases=("metadata.broker.list",)),
    _p("client.id", STR, "kafka-native", "*",
       "Name this client sends to brokers with every request (shows up in broker logs, "
       "quotas and metrics)."),
    _p("client.rack", STR, None, "*",
       "Rack (or availability zone) of this client. A consumer sends it with each Fetch: "
       "a leader with a rack-aware replica selector (KIP-392) then names a replica in "
       "that rack to fetch from. Also sent in the group subscription."),
    _p("security.protocol", ENUM, "plaintext", "*",
       "How to talk to brokers: plaintext, ssl (TLS), sasl_plaintext (SASL without TLS) or "
       "sasl_ssl (SASL over TLS). See docs/security.md.",
       values=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _p("socket.timeout.ms", INT, 60000, "*",
       "Default time limit for a network request to be answered. A producer uses the smaller "
       "of this and the time its oldest message has left; a fetch adds fetch.wait.max.ms.",
       min=10, max=300000,
       derived="transactional producer: transaction.timeout.ms - 100 (at least 900)"),
    _p("socket.connection.setup.timeout.ms", INT, 30000, "*",
       "Time allowed to open a broker connection and finish its handshake before giving up "
       "on that attempt.", min=1000, max=INT32_MAX),
    _p("socket.keepalive.enable", BOOL, False, "*",
       "Turn on TCP keep-alive probes (SO_KEEPALIVE) on broker sockets."),
    _p("socket.nagle.disable", BOOL, True, "*",
       "Send small writes at once (TCP_NODELAY) instead of letting the kernel coalesce them."),
    _p("socket.send.buffer.bytes", INT, 0, "*",
       "Kernel send buffer size for broker sockets; 0 keeps the system default.",
       min=0, max=100000000),
    _p("socket.receive.buffer.bytes", INT, 0, "*",
       "Kernel receive buffer size for broker sockets; 0 keeps the system default.",
       min=0, max=100000000),
    _p("connections.max.idle.ms", INT, 0, "*",
       "Close a broker connection after this long without traffic; 0 keeps connections open.",
       min=0, max=INT32_MAX),
    _p("broker.address.family", ENUM, "any", "*",
       "Which IP address families to use when resolving broker host names.",
       values=("any", "v4", "v6")),
    _p("metadata.max.age.ms", INT, 900000, "*",
       "Cached metadata older than this is refreshed before use.", min=1, max=86400000,
       derived="3 x topic.metadata.refresh.interval.ms when that is > 0"),
    _p("topic.metadata.refresh.interval.ms", INT, 300000, "*",
       "How often to refresh cluster and topic metadata in the background, to notice new "
       "brokers, partitions and leaders early; -1 turns the periodic refresh off.",
       min=-1, max=3600000),
    _p("topic.metadata.refresh.fast.interval.ms", INT, 100, "*",
       "First retry interval for metadata requests while a partition has no known leader; "
       "it doubles on each attempt up to retry.backoff.max.ms.", min=1, max=60000,
       derived="retry.backoff.ms (at most 60000)"),
    _p("metadata.max.idle.ms", INT, 300000, "P",
       "A topic not produced to for this long, with nothing of it queued or in flight, is "
       "forgotten: its metadata is no longer refreshed or kept, and the next message to it "
       "asks for it again. The Java producer's property (librdkafka keeps every topic it "
       "ever produced to, and asks for all of them at every refresh).",
       min=5000, max=86400000),
    _p("topic.metadata.propagation.max.ms", INT, 30000, "*",
       "How long a topic that brokers report as unknown is still waited for (new topics take "
       "time to appear on every broker) before messages for it fail.", min=0, max=3600000),
    _p("reconnect.backoff.ms", INT, 100, "*",
       "Wait before reconnecting to a broker after a connection closes; doubles after each "
       "failure up to reconnect.backoff.max.ms, with jitter. 0 reconnects at once.",
       min=0, max=3600000),
    _p("reconnect.backoff.max.ms", INT, 10000, "*",
       "Upper bound of the reconnect wait. Must be >= reconnect.backoff.ms.",
       min=0, max=3600000),
    _p("retry.backoff.ms", INT, 100, "*",
       "Wait before the first retry of a failed request; doubles per retry up to "
       "retry.backoff.max.ms.", min=1, max=300000),
    _p("retry.backoff.max.ms", INT, 1000, "*",
       "Upper bound of the wait between request retries.", min=1, max=300000),
    _p("message.max.bytes", INT, 1000000, "*",
       "Largest request this client sends (a produce request may exceed it by one message; "
       "the broker enforces the topic's own limit).", min=1000, max=1000000000),
    _p("receive.message.max.bytes", INT, 100000000, "*",
       "Largest response accepted from a broker, as a guard against memory exhaustion. Must "
       "leave room for fetch.max.bytes plus 512 bytes of framing.", min=1000, max=INT32_MAX,
       derived="consumer: raised to fetch.max.bytes + 512 if lower"),
    _p("max.in.flight.requests.per.connection", INT, 1000000, "*",
       "Most requests sent to one broker and not yet answered. Matters mostly for produce "
       "requests; the idempotent producer needs 5 or fewer.", min=1, max=1000000,
       aliases=("max.in.flight",), derived="idempotent producer: at most 5"),
    _p("api.version.request", BOOL, True, "*",
       "Ask each broker which protocol versions it supports and use the best common ones. "
       "Brokers older than 0.10 are not supported, so leave this on.",
       warn_values={False: "ApiVersions is always used (brokers older than 0.10 are not "
                           "supported)"}),
    _p("api.version.request.timeout.ms", INT, 10000, "*",
       "Time limit for the protocol-version query sent on each new connection.",
       min=1, max=300000),
    _p("allow.auto.create.topics", BOOL, False, "*",
       "Let the broker create a topic that this client asks metadata for and that does not "
       "exist (the broker must allow auto-creation too): a producer's messages, a "
       "producer's or AdminClient's list_topics(topic), a consumer's subscription.",
       derived="producer and AdminClient (a producer in librdkafka): true; consumer: false"),
    _p("statistics.interval.ms", INT, 0, "*",
       "How often to call stats_cb with a JSON statistics document; 0 turns statistics off.",
       min=0, max=86400000),
    _p("debug", CSV, (), "*",
       "Comma-separated debug contexts whose detailed logging is turned on.",
       values=_DEBUG_CONTEXTS),
    _p("log_level", INT, 6, "*",
       "Most verbose syslog level (0-7) passed to log_cb / logger (7 = debug, 6 = info, "
       "4 = warning, 3 = error).", min=0, max=7,
       derived="7 when debug is set, even over an explicit value (as librdkafka)"),
    _p("log.connection.close", BOOL, True, "*",
       "Log (at info level) when an established broker connection closes; false logs it at "
       "debug level."),
    _p("sasl.mechanism", STR, "GSSAPI", "*",
       "SASL mechanism for a sasl_* security.protocol: GSSAPI (Kerberos, through the "
       "system's libgssapi_krb5), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.",
       aliases=("sasl.mechanisms",)),
    _p("sasl.username", STR, None, "*", "SASL user name for PLAIN and SCRAM."),
    _p("sasl.password", STR, None, "*", "SASL password for PLAIN and SCRAM."),
    _p("sasl.oauthbearer.config", STR, None, "*",
       "Passed to oauth_cb; for the unsecured JWT: space-separated principal=..., "
       "principalClaimName=..., scope=a,b, scopeClaimName=..., lifeSeconds=..., "
       "extension_NAME=value."),
    _p("enable.sasl.oauthbearer.unsecure.jwt", BOOL, False, "*",
       "OAUTHBEARER without oauth_cb: make an unsigned JWT from sasl.oauthbearer.config "
       "(development and tests only)."),
    _p("oauth_cb", CALLABLE, None, "*",
       "OAUTHBEARER token source, called as oauth_cb(sasl.oauthbearer.config) and "
       "returning (token, expiry_seconds_since_epoch) or (token, expiry, principal, "
       "extensions); called at start and again at 80% of each token's lifetime. "
       "oauthbearer_token_refresh_cb is librdkafka's name for it (giving both is an "
       "error).", aliases=("oauthbearer_token_refresh_cb",), distinct_names=True),
    _p("ssl.ca.location", STR, None, "*",
       "CA certificate(s) to verify brokers with: a PEM file or a directory of hashed "
       "certificates; probe (or nothing, without ssl.ca.pem) uses the system's CA store."),
    _p("ssl.ca.pem", PEM, None, "*",
       "CA certificate(s) as a PEM string (or bytes: PEM, or one DER certificate). ssl_ca "
       "is what librdkafka's set_ssl_cert() sets (giving both is an error).",
       aliases=("ssl_ca",), distinct_names=True),
    _p("ssl.certificate.location", STR, None, "*",
       "Client certificate file (PEM) for mutual TLS."),
    _p("ssl.certificate.pem", PEM, None, "*",
       "Client certificate as a PEM string (or bytes: PEM, or DER). ssl_certificate is what "
       "librdkafka's set_ssl_cert() sets (giving both is an error).",
       aliases=("ssl_certificate",), distinct_names=True),
    _p("ssl.key.location", STR, None, "*", "Client private key file (PEM)."),
    _p("ssl.key.pem", PEM, None, "*",
       "Client private key as a PEM string (or bytes: PEM, or PKCS#8 DER). ssl_key is what "
       "librdkafka's set_ssl_cert() sets (giving both is an error).",
       aliases=("ssl_key",), distinct_names=True),
    _p("ssl.key.password", STR, None, "*", "Passphrase of the client private key."),
    _p("ssl.keystore.location", STR, None, "*",
       "Client certificate and key in a PKCS#12 file (read with the cryptography package "
       "or the openssl command)."),
    _p("ssl.keystore.password", STR, None, "*", "Password of the PKCS#12 keystore."),
    _p("ssl.crl.location", STR, None, "*",
       "Certificate revocation list (PEM) checked for the broker's certificate."),
    _p("ssl.cipher.suites", STR, None, "*",
       "OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's defaults)."),
    _p("ssl.curves.list", STR, None, "*",
       "The elliptic curve for key exchange (one name: Python's ssl module sets only one; "
       "a list is refused)."),
    _p("ssl.endpoint.identification.algorithm", ENUM, "https", "*",
       "https: the broker's host name must match its certificate; none: not checked.",
       values=("none", "https")),
    _p("enable.ssl.certificate.verification", BOOL, True, "*",
       "Verify the broker's certificate chain (false accepts any certificate: tests only)."),
    # --- callbacks (every client) ---
    _p("error_cb", CALLABLE, None, "*",
       "Called as error_cb(KafkaError) from poll()/flush() for errors that are not tied to "
       "one message (lost connections, fatal errors, ...)."),
    _p("stats_cb", CALLABLE, None, "*",
       "Called as stats_cb(json_str) from poll()/flush()/consume() every "
       "statistics.interval.ms with librdkafka's JSON document, every field of it (the "
       "AdminClient's from its poll())."),
    _p("throttle_cb", CALLABLE, None, "*",
       "Called as throttle_cb(ThrottleEvent) from poll()/flush()/consume() when a broker "
       "answers that it throttled this client (throttle_time_ms > 0), and once with 0 when "
       "the throttling has ended, as librdkafka does."),
    _p("logger", LOGGER, None, "*",
       "A logging.Logger to send this client's log lines to, instead of the "
       "'kafka_client' logger."),
    _p("log_cb", CALLABLE, None, "*",
       "Called as log_cb(level, facility, message) (syslog level, as librdkafka's) for the "
       "client's log lines, filtered by log_level; replaces logger. confluent-kafka refuses "
       "this name; here it is an addition."),
    # --- producer ---
    _p("linger.ms", FLOAT, 5.0, "P",
       "How long a partition's batch may wait for more messages before it is sent. Larger "
       "values give bigger, better-compressed batches at the cost of latency.",
       min=0, max=900000, aliases=("queue.buffering.max.ms",)),
    _p("batch.num.messages", INT, 10000, "P",
       "Most messages in one batch (a batch is also bounded by batch.size and "
       "message.max.bytes).", min=1, max=1000000),
    _p("batch.size", INT, 1000000, "P",
       "Most bytes in one batch, framing included. The first message always fits, so a "
       "message larger than this is still sent, alone.", min=1, max=INT32_MAX),
    _p("queue.buffering.max.messages", INT, 100000, "P",
       "Most messages waiting in the producer (all topics and partitions) before produce() "
       "raises _QUEUE_FULL; 0 means no limit.", min=0, max=INT32_MAX),
    _p("queue.buffering.max.kbytes", INT, 1048576, "P",
       "Most kilobytes queued in the producer before produce() raises BufferError "
       "(_QUEUE_FULL): counts the key and value bytes of every message from produce() "
       "until its delivery report is served (open batches included).",
       min=1, max=INT32_MAX),
    _ignored("queue.buffering.backpressure.threshold", INT, 1, "P",
       "Hold back new batches while this many produce requests to a broker are queued but "
       "not yet sent, so batches grow instead.",
       "a partition's last batch takes more records while it waits to be sent (at most "
       "max.in.flight requests per broker)",
       min=1, max=1000000, derived="idempotent producer: 1"),
    _p("acks", INT, -1, "P",
       "Acknowledgements the partition leader waits for before answering: 0 = no answer at "
       "all, 1 = leader only, -1 or all = every in-sync replica.",
       min=-1, max=1000, synonyms={"all": -1}, aliases=("request.required.acks",),
       derived="idempotent producer: all"),
    _p("request.timeout.ms", INT, 30000, "P",
       "Time the broker may take to gather acks before it answers a produce request "
       "(enforced by the broker; not used with acks=0).", min=1, max=900000),
    _p("message.timeout.ms", INT, 300000, "P",
       "Time limit for delivering a message, retries included, counted from produce(); 0 "
       "means no limit. Must be larger than linger.ms.", min=0, max=INT32_MAX,
       aliases=("delivery.timeout.ms",),
       derived="transactional producer: transaction.timeout.ms"),
    _p("retries", INT, INT32_MAX, "P",
       "How many times a failed produce request is retried. Retrying can reorder messages "
       "unless enable.idempotence is on.", min=0, max=INT32_MAX,
       aliases=("message.send.max.retries",)),
    _p("compression.type", ENUM, "none", "P",
       "Codec used to compress message batches.",
       values=("none", "gzip", "snappy", "lz4", "zstd"), aliases=("compression.codec",)),
    _p("compression.level", INT, -1, "P",
       "Codec-specific compression level (gzip 0-9, lz4 0-12, zstd 0-12, snappy only 0); "
       "-1 uses the codec's default; a level above the codec's highest is taken as its "
       "highest (gzip 10-12 as 9), as librdkafka does.", min=-1, max=12),
    _p("partitioner", ENUM, "consistent_random", "P",
       "How a message without an explicit partition gets one: consistent = CRC32 of the key "
       "(empty and null keys to one partition), consistent_random = the same but null and "
       "empty keys spread randomly, murmur2 / murmur2_random = the Java client's hash (null "
       "keys to one partition / spread), fnv1a / fnv1a_random = FNV-1a hash, random = "
       "ignore the key.", values=_PARTITIONERS),
    _p("sticky.partitioning.linger.ms", INT, 10, "P",
       "For messages without a key: how long to keep sending them to the same randomly chosen "
       "partition before picking another, so they fill batches; 0 picks a partition per "
       "message.", min=0, max=900000, derived="2 x linger.ms (at most 900000)"),
    _p("enable.idempotence", BOOL, False, "P",
       "Deliver each message exactly once and in order per partition, using producer ids and "
       "sequence numbers. Sets acks=all, retries to the maximum and at most 5 requests in "
       "flight when those are not set; fails if they are set to something incompatible.",
       derived="true when transactional.id is set"),
    _p("enable.gapless.guarantee", BOOL, False, "P",
       "Idempotent producer only: treat any failure that could leave a gap in a partition's "
       "message sequence as fatal. Requires enable.idempotence."),
    _p("transactional.id", STR, None, "P",
       "Identity of a transactional producer, stable across restarts; enables transactions "
       "(and idempotence)."),
    _p("transaction.timeout.ms", INT, 60000, "P",
       "Time the transaction coordinator allows a transaction to stay open before aborting "
       "it. Also caps message.timeout.ms and socket.timeout.ms.", min=1000, max=INT32_MAX),
    _p("delivery.report.only.error", BOOL, False, "P",
       "Call the delivery callback only for messages that failed."),
    _p("on_delivery", CALLABLE, None, "P",
       "Called as on_delivery(err, msg) from poll()/flush() once per produced message; err "
       "is None on success. produce(..., on_delivery=...) overrides it per message.",
       aliases=("dr_cb", "dr_msg_cb")),
    # --- consumer ---
    _p("group.id", STR, None, "C",
       "Consumer group name. Consumers with the same group.id share the partitions of "
       "their subscribed topics."),
    _p("group.instance.id", STR, None, "C",
       "Static membership id: a member that leaves and comes back with the same id within "
       "session.timeout.ms gets its partitions back without a rebalance."),
    _p("session.timeout.ms", INT, 45000, "C",
       "A member whose heartbeats stop for this long is removed from the group and its "
       "partitions are reassigned.", min=1, max=3600000),
    _p("heartbeat.interval.ms", INT, 3000, "C",
       "How often the member sends heartbeats to the group coordinator.",
       min=1, max=3600000),
    _p("max.poll.interval.ms", INT, 300000, "C",
       "Longest allowed gap between two poll()/consume() calls; a member that exceeds it "
       "leaves the group. Must be >= session.timeout.ms.", min=1, max=86400000),
    _p("partition.assignment.strategy", CSV, ("range", "roundrobin"), "C",
       "Assignors this member supports, most preferred first. Cooperative and eager "
       "assignors cannot be mixed.", values=_ASSIGNORS),
    _p("coordinator.query.interval.ms", INT, 600000, "C",
       "How often to ask again which broker coordinates the group, so that a coordinator "
       "that moved is followed before a request fails there (it is also looked up at once "
       "when its connection fails or it answers NOT_COORDINATOR).",
       min=1, max=3600000),
    _p("enable.auto.commit", BOOL, True, "C",
       "Commit stored offsets in the background every auto.commit.interval.ms."),
    _p("auto.commit.interval.ms", INT, 5000, "C",
       "Interval of the background offset commit; 0 turns it off.", min=0, max=86400000),
    _p("enable.auto.offset.store", BOOL, True, "C",
       "Store the offset of each message handed to the application as the next one to "
       "commit. Turn off to store offsets yourself (store_offsets()) after processing."),
    _p("auto.offset.reset", ENUM, "latest", "C",
       "Where to start when there is no committed offset or it is out of range: earliest "
       "(also smallest, beginning), latest (also largest, end), or error to report "
       "_AUTO_OFFSET_RESET.", values=("earliest", "latest", "error"),
       synonyms={"smallest": "earliest", "beginning": "earliest", "largest": "latest",
                 "end": "latest"}),
    _p("enable.partition.eof", BOOL, False, "C",
       "Report a _PARTITION_EOF event each time the consumer reaches the end of a partition."),
    _p("isolation.level", ENUM, "read_committed", "C",
       "read_committed hides messages of aborted and still-open transactions; "
       "read_uncommitted returns everything.", values=("read_uncommitted", "read_committed")),
    _p("fetch.min.bytes", INT, 1, "C",
       "Least data the broker should gather before answering a fetch (it answers anyway "
       "after fetch.wait.max.ms).", min=1, max=100000000),
    _p("fetch.wait.max.ms", INT, 500, "C",
       "Longest time the broker may hold a fetch waiting for fetch.min.bytes.",
       min=0, max=300000),
    _p("fetch.max.bytes", INT, 52428800, "C",
       "Most data a broker should return for one fetch request (a first batch larger than "
       "this is still returned so the consumer can progress).", min=0, max=2147483135,
       derived="between message.max.bytes and queued.max.messages.kbytes x 1024"),
    _p("max.partition.fetch.bytes", INT, 1048576, "C",
       "Initial most data to fetch per partition per request; grows when a single batch is "
       "larger.", min=1, max=1000000000, aliases=("fetch.message.max.bytes",)),
    _p("fetch.error.backoff.ms", INT, 500, "C",
       "Wait before fetching a partition again after a fetch error.", min=0, max=300000),
    _p("queued.min.messages", INT, 100000, "C",
       "Keep fetching while fewer than this many fetched messages (of all partitions) wait "
       "in the consumer's local queue.", min=1, max=10000000),
    _p("queued.max.messages.kbytes", INT, 65536, "C",
       "Most kilobytes of fetched messages (of all partitions) waiting in the consumer's "
       "local queue; takes precedence over queued.min.messages.", min=1, max=2097151),
    _ignored("fetch.queue.backoff.ms", INT, 1000, "C",
             "Wait before fetching a partition again when its local queue is over the "
             "thresholds.", "fetching resumes as soon as the queue drains below the "
             "thresholds", min=0, max=300000),
    _p("check.crcs", BOOL, False, "C",
       "Verify the CRC of every fetched batch (costs some CPU; catches corruption)."),
    _p("on_commit", CALLABLE, None, "C",
       "Called as on_commit(err, partitions) from poll() with the result of each offset "
       "commit. offset_commit_cb is librdkafka's name for it (giving both is an error).",
       aliases=("offset_commit_cb",), distinct_names=True),
    # --- librdkafka names handled here beyond the table above ---
    _p("builtin.features", CSV, tuple(f for f in _FEATURES if f not in _MISSING_FEATURES), "*",
       "Features this client has; setting it checks that the listed features are "
       "available (those it lacks fail the constructor, as in librdkafka).",
       values=_FEATURES),
    _p("group.protocol", ENUM, "classic", "C",
       "Group protocol: classic (JoinGroup/SyncGroup, the client assigns) or consumer "
       "(KIP-848: ConsumerGroupHeartbeat, the broker assigns; Apache Kafka 4.0 or later). "
       "With consumer, session.timeout.ms, heartbeat.interval.ms, "
       "partition.assignment.strategy and group.protocol.type are the broker's and "
       "setting them is an error.", values=("classic", "consumer")),
    _p("group.remote.assignor", STR, None, "C",
       "With group.protocol=consumer: the broker-side assignor to use (Kafka's are "
       "uniform and range); empty: the broker's default."),
    _p("share.acknowledgement.mode", ENUM, "implicit", "C",
       "ShareConsumer only (KIP-932 share groups): implicit accepts the records of a "
       "poll() at the next poll(), commit_sync(), commit_async() or close(); explicit "
       "takes each record's acknowledge() (ACCEPT, RELEASE or REJECT), and poll() "
       "refuses to go on while a record of the previous one has none.",
       values=("implicit", "explicit")),
    _p("max.poll.records", INT, 500, "C",
       "ShareConsumer only: the most messages one poll() returns (more fetched wait for "
       "the next poll(), acquired for this member meanwhile).", min=1, max=2147483647),
    _p("group.protocol.type", ENUM, "consumer", "C",
       "Protocol type of the classic group protocol; only consumer exists.",
       values=("consumer",)),
    _p("offset.store.method", ENUM, "broker", "C",
       "Where offsets are committed: broker. file (deprecated in librdkafka) is refused.",
       values=("none", "file", "broker"),
       refuse_values={"file": "the " + _FILE_STORE, "none": "offsets are always committed "
                      "to the broker (commit() / enable.auto.commit decide when)"}),
    _p("queuing.strategy", ENUM, "fifo", "P",
       "Producer queue order: fifo. lifo (deprecated in librdkafka) is refused.",
       values=("fifo", "lifo"),
       refuse_values={"lifo": "messages are always sent in produce order (fifo)"}),
    _p("sasl.oauthbearer.method", ENUM, "default", "*",
       "OAUTHBEARER token source: default (oauth_cb or the unsecured JWT) or oidc (a token "
       "endpoint: sasl.oauthbearer.grant.type at sasl.oauthbearer.token.endpoint.url, or "
       "Azure's instance metadata service; oauth_cb, when set, takes precedence).",
       values=("default", "oidc")),
    _ignored("api.version.fallback.ms", INT, 0, "*", "Deprecated in librdkafka.",
             "ApiVersions is always used", min=0, max=604800000),
    _ignored("broker.version.fallback", STR, "0.10.0", "*", "Deprecated in librdkafka.",
             "ApiVersions is always used"),
    _ignored("broker.address.ttl", INT, 1000, "*", "How long resolved addresses are cached.",
             "names are resolved when a connection starts", min=0, max=86400000),
    _p("client.dns.lookup", ENUM, "use_all_dns_ips", "*",
       "use_all_dns_ips: every address of a name is tried in turn. "
       "resolve_canonical_bootstrap_servers_only (KIP-235, for GSSAPI behind a DNS alias): "
       "each bootstrap server is replaced, when the client starts, by the names of its "
       "addresses (reverse lookup), so Kerberos asks for the brokers' own principals.",
       values=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
    _p("enable.metrics.push", BOOL, True, "*",
       "Push client metrics to the cluster when it subscribes to them (KIP-714): the "
       "producer's and consumer's metrics under librdkafka's names, every push interval "
       "the broker sets; a last push as the client closes. Nothing is sent to a broker "
       "that does not serve client telemetry or subscribes to no metric."),
    _ignored("enable.random.seed", BOOL, True, "*", "Seed librdkafka's C PRNG.",
             "Python seeds its own generators"),
    _ignored("enabled_events", INT, 0, "*", "librdkafka's C event API.",
             "callbacks run from poll() instead", min=0, max=INT32_MAX),
    _ignored("internal.termination.signal", INT, 0, "*", "Signal for librdkafka's threads.",
             "not needed: the I/O thread is woken directly", min=0, max=128),
    _ignored("log.queue", BOOL, False, "*", "Queue log lines for rd_kafka_set_log_queue().",
             "logs go to logger / log_cb directly"),
    _ignored("log.thread.name", BOOL, True, "*", "Thread name in librdkafka's log lines.",
             "use the logging module's %(threadName)s"),
    _ignored("message.copy.max.bytes", INT, 65535, "*",
             "Largest message librdkafka copies into its buffer.",
             "keys and values are always encoded into the batch", min=0, max=1000000000),
    _ignored("metadata.recovery.strategy", ENUM, "rebootstrap", "*",
             "What to do when no known broker is reachable.",
             "the bootstrap servers stay among the brokers tried",
             values=("none", "rebootstrap")),
    _ignored("metadata.recovery.rebootstrap.trigger.ms", INT, 300000, "*",
             "When to re-bootstrap without metadata.", "see metadata.recovery.strategy",
             min=0, max=INT32_MAX),
    _ignored("produce.offset.report", BOOL, False, "P", "Deprecated in librdkafka.",
             "offsets are always reported"),
    _ignored("reconnect.backoff.jitter.ms", INT, 0, "*", "Deprecated in librdkafka.",
             "see reconnect.backoff.ms", min=0, max=3600000),
    _ignored("socket.blocking.max.ms", INT, 1000, "*", "Deprecated in librdkafka.",
             "sockets never block", min=1, max=60000),
    _ignored("socket.max.fails", INT, 1, "*", "Send failures before disconnecting.",
             "a timed-out or failed request always closes the connection (librdkafka's "
             "default of 1)", min=0, max=1000000),
    _ignored("topic.metadata.refresh.fast.cnt", INT, 10, "*", "Deprecated in librdkafka.",
             "see topic.metadata.refresh.fast.interval.ms", min=0, max=1000),
    _ignored("topic.metadata.refresh.sparse", BOOL, True, "*",
             "Ask metadata for the topics in use only.",
             "metadata requests always name the topics in use"),
    _ignored("ssl.ca.certificate.stores", STR, "Root", "*", "Windows certificate stores.",
             "Windows only; ssl.ca.location or the system store is used"),
    _p("ssl.engine.id", STR, "dynamic", "*",
       "OpenSSL engine id of the engine ssl.engine.location loads."),
    _p("https.ca.location", STR, None, "*",
       "CA certificate(s) to verify HTTPS endpoints (the OIDC token endpoint) with: a PEM "
       "file or a directory of hashed certificates; probe or unset: the system's."),
    _p("https.ca.pem", STR, None, "*",
       "CA certificate(s) in PEM to verify HTTPS endpoints (the OIDC token endpoint) with."),
    _p("sasl.kerberos.service.name", STR, "kafka", "*",
       "GSSAPI: the brokers' Kerberos service; a broker at host H is <service>/H."),
    _p("sasl.kerberos.principal", STR, "kafkaclient", "*",
       "GSSAPI: the client's principal (used as %{sasl.kerberos.principal} in "
       "sasl.kerberos.kinit.cmd)."),
    _p("sasl.kerberos.kinit.cmd", STR,
       'kinit -R -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal} || '
       'kinit -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}', "*",
       "GSSAPI: shell command that gets or renews the client's ticket, run when the client "
       "starts and every sasl.kerberos.min.time.before.relogin ms; %{property} is replaced "
       "by that property's value."),
    _p("sasl.kerberos.keytab", STR, None, "*",
       "GSSAPI: the client's keytab (used as %{sasl.kerberos.keytab} in "
       "sasl.kerberos.kinit.cmd)."),
    _p("sasl.kerberos.min.time.before.relogin", INT, 60000, "*",
       "GSSAPI: ms between runs of sasl.kerberos.kinit.cmd; 0: never run it (the ticket "
       "is renewed outside the client).", min=0, max=86400000),
    _p("sasl.oauthbearer.client.id", STR, None, "*",
       "OIDC client id (HTTP Basic user of the token request).",
       aliases=("sasl.oauthbearer.client.credentials.client.id",)),
    _p("sasl.oauthbearer.client.secret", STR, None, "*",
       "OIDC client secret (HTTP Basic password of the token request).",
       aliases=("sasl.oauthbearer.client.credentials.client.secret",)),
    _p("sasl.oauthbearer.scope", STR, None, "*",
       "OIDC scope asked for in the token request (none when unset)."),
    _p("sasl.oauthbearer.extensions", STR, None, "*",
       "SASL extensions sent with OIDC tokens: name=value pairs separated by commas."),
    _p("sasl.oauthbearer.sub.claim.name", STR, "sub", "*",
       "OIDC: the claim of the access token that names its principal (it must be there, "
       "not empty); should match the brokers' sasl.oauthbearer.sub.claim.name."),
    _p("sasl.oauthbearer.token.endpoint.url", STR, None, "*",
       "OIDC token endpoint (http:// or https://) of sasl.oauthbearer.method=oidc."),
    _p("sasl.oauthbearer.grant.type", ENUM, "client_credentials", "*",
       "OIDC grant type: client_credentials, or the JWT bearer grant (a JWT assertion "
       "signed with sasl.oauthbearer.assertion.private.key.*, or read from "
       "sasl.oauthbearer.assertion.file; needs the cryptography package to sign).",
       values=("client_credentials", _JWT_BEARER)),
    _p("sasl.oauthbearer.assertion.algorithm", ENUM, "rs256", "*",
       "JWT bearer grant: the assertion's signature, RS256 (an RSA key) or ES256 (an EC "
       "key on P-256).", values=("rs256", "es256")),
    _p("sasl.oauthbearer.assertion.private.key.file", STR, None, "*",
       "JWT bearer grant: PEM file of the private key that signs the assertion."),
    _p("sasl.oauthbearer.assertion.private.key.passphrase", STR, None, "*",
       "JWT bearer grant: passphrase of an encrypted private key."),
    _p("sasl.oauthbearer.assertion.private.key.pem", STR, None, "*",
       "JWT bearer grant: the private key that signs the assertion, as PEM text."),
    _p("sasl.oauthbearer.assertion.file", STR, None, "*",
       "JWT bearer grant: a file holding a ready assertion (read again for each token "
       "request), instead of one signed by the client."),
    _p("sasl.oauthbearer.assertion.claim.aud", STR, None, "*",
       "JWT bearer grant: the assertion's aud claim."),
    _p("sasl.oauthbearer.assertion.claim.exp.seconds", INT, 300, "*",
       "JWT bearer grant: the assertion expires this many seconds after it is made.",
       min=1, max=INT32_MAX),
    _p("sasl.oauthbearer.assertion.claim.iss", STR, None, "*",
       "JWT bearer grant: the assertion's iss claim."),
    _p("sasl.oauthbearer.assertion.claim.jti.include", BOOL, False, "*",
       "JWT bearer grant: give each assertion a random jti claim."),
    _p("sasl.oauthbearer.assertion.claim.nbf.seconds", INT, 60, "*",
       "JWT bearer grant: the assertion is valid from this many seconds before it is made.",
       min=0, max=INT32_MAX),
    _p("sasl.oauthbearer.assertion.claim.sub", STR, None, "*",
       "JWT bearer grant: the assertion's sub claim."),
    _p("sasl.oauthbearer.assertion.jwt.template.file", STR, None, "*",
       "JWT bearer grant: a JSON file {\"header\": {...}, \"payload\": {...}} whose fields "
       "the assertion starts from (the claims above, when set, replace its own)."),
    _p("sasl.oauthbearer.metadata.authentication.type", ENUM, "none", "*",
       "Metadata-based OIDC authentication: none, or azure_imds (a GET with Metadata: true "
       "to sasl.oauthbearer.token.endpoint.url, Azure's instance metadata service address "
       "when unset, with the query=... entry of sasl.oauthbearer.config appended).",
       values=("none", "azure_imds", "aws_iam"),
       refuse_values={"aws_iam": "AWS IAM authentication (AWS's GetWebIdentityToken, which "
                                 "confluent-kafka gets through AWS's SDK) is not "
                                 "implemented"}),
    _ignored("auto.commit.enable", BOOL, True, "C",
             "Legacy simple-consumer auto commit (deprecated in librdkafka).",
             "use enable.auto.commit"),
    _ignored("offset.store.path", STR, ".", "C", "File offset store path (deprecated).",
             _FILE_STORE),
    _ignored("offset.store.sync.interval.ms", INT, -1, "C",
             "File offset store fsync interval (deprecated).", _FILE_STORE,
             min=-1, max=86400000),
    _ignored("consume.callback.max.messages", INT, 0, "C",
             "Messages per rd_kafka_consume_callback() call.",
             "librdkafka's legacy callback consumer API", min=0, max=1000000),
    _p("topic.blacklist", CSV, (), "*",
       "Regular expressions (comma-separated) of topic names to hide: a topic whose name "
       "one of them matches (anywhere in the name, as librdkafka's) is left out of the "
       "client's metadata cache, as if it did not exist: regex subscriptions do not match "
       "it and produce() waits for it as for an unknown topic. list_topics() still lists it, "
       "as librdkafka's does."),
    _ignored("plugin.library.paths", STR, None, "*", "librdkafka plugins to load.",
             "librdkafka plugins are C libraries for librdkafka and are not loaded (the "
             "warning names them); ignoring one loses its add-on, not data or security",
             warning_names_value=True),
    _ignored("interceptors", ANY, None, "*", "librdkafka interceptors.",
             "interceptors are librdkafka plugins' C hooks; none is installed"),
    _ignored("opaque", ANY, None, "*", "Application opaque passed to librdkafka's callbacks.",
             "no callback of this client takes an opaque"),
    _ignored("background_event_cb", CALLABLE, None, "*", "Background queue event callback.",
             "events are served by poll() (error_cb, stats_cb, ...) instead"),
    _ignored("open_cb", CALLABLE, None, "*", "File open callback.",
             "Python opens its files with O_CLOEXEC already, which is what librdkafka's "
             "default open_cb is for"),
    _ignored("ssl_engine_callback_data", ANY, None, "*", "OpenSSL engine callback data.",
             "only meaningful with an OpenSSL engine callback, which this client has not"),
    _ignored("msg_order_cmp", CALLABLE, None, "P", "Message queue ordering comparator.",
             "messages stay in produce (fifo) order"),
    _p("default_topic_conf", MAPPING, None, "*",
       "Topic-level properties (a dict) merged into this configuration, their values "
       "taking precedence over the same properties given at the top level, as librdkafka's "
       "default topic configuration.", aliases=("default.topic.config",)),
    _p("resolve_cb", CALLABLE, None, "*",
       "Called as resolve_cb(host, port) on the I/O thread instead of socket.getaddrinfo() "
       "when a broker connection starts; returns a list of getaddrinfo-shaped tuples "
       "(family, type, proto, canonname, sockaddr), tried in turn. An exception fails that "
       "attempt (_RESOLVE naming resolve_cb) and reaches the caller of poll()/flush()/"
       "consume()."),
    _p("socket_cb", CALLABLE, None, "*",
       "Called as socket_cb(family, type, proto) on the I/O thread instead of creating a "
       "broker socket; returns a socket.socket, which the client then makes non-blocking "
       "and sets its options on. An exception fails that attempt (_TRANSPORT naming "
       "socket_cb) and reaches the caller of poll()/flush()/consume()."),
    _p("connect_cb", CALLABLE, None, "*",
       "Called as connect_cb(sock, sockaddr, broker_name) on the I/O thread right before the "
       "client's own non-blocking connect; a non-zero return (an errno) fails that attempt "
       "(_TRANSPORT naming connect_cb), and so does an exception, which also reaches the "
       "caller of poll()/flush()/consume()."),
    _p("closesocket_cb", CALLABLE, None, "*",
       "Called as closesocket_cb(sock) on the I/O thread before the client closes a broker "
       "socket (the client still closes it); an exception reaches the caller of poll()/"
       "flush()/consume()."),
    _p("ssl.certificate.verify_cb", CALLABLE, None, "*",
       "Called as verify_cb(broker_name, broker_id, x509_error, depth, der_cert) on the I/O "
       "thread once a TLS handshake completed, with the broker's leaf certificate (depth 0, "
       "DER bytes) and x509_error 0; returning False, or raising, fails the connection "
       "(_SSL naming the callback; the exception also reaches the caller of poll()/flush()/"
       "consume()).",
       note="it can add checks (pinning) to OpenSSL's verification, never accept a "
            "certificate OpenSSL refused, and sees the leaf only (Python's ssl exposes no "
            "chain): librdkafka calls it per certificate of the chain and lets it override "
            "OpenSSL's verdict"),
    _p("consume_cb", CALLABLE, None, "C",
       "Called as consume_cb(msg) from poll()/consume() for each message (and event) they "
       "return, before they return it. If it raises, the messages in hand are returned and "
       "the exception is raised by the next call."),
    _p("rebalance_cb", CALLABLE, None, "C",
       "Called as rebalance_cb(consumer, err, partitions) from poll()/consume() for "
       "subscribe() calls that give no on_assign/on_revoke/on_lost: err is a KafkaError "
       "_ASSIGN_PARTITIONS or _REVOKE_PARTITIONS (also for a lost assignment, as "
       "librdkafka). If it does not call assign()/unassign()/incremental_assign()/"
       "incremental_unassign() itself, the client applies the change."),
    _p("partitioner_cb", CALLABLE, None, "P",
       "Called as partitioner_cb(key, partition_count) (key bytes or None) for each message "
       "produced without a partition, instead of the partitioner; returns the partition. A "
       "partition the topic does not have is _UNKNOWN_PARTITION, as in librdkafka: raised "
       "by produce(), or the message's delivery error when it waited for the topic's "
       "metadata."),
    _p("ssl.sigalgs.list", STR, None, "*",
       "TLS signature algorithms offered (OpenSSL's list syntax, e.g. "
       "RSA-PSS+SHA256:ECDSA+SHA256).",
       note="set through OpenSSL directly (see docs/security.md: refused with the reason "
            "where that cannot be done)"),
    _p("ssl.providers", STR, None, "*",
       "OpenSSL 3 providers to load (comma-separated names), before the TLS context is "
       "made.",
       note="loading a provider is process-wide (OpenSSL's default library context); set "
            "through OpenSSL directly (see docs/security.md)"),
    _p("ssl.engine.location", STR, None, "*",
       "OpenSSL engine library (deprecated in OpenSSL 3) to load and use for TLS: loaded "
       "through OpenSSL's dynamic engine with ssl.engine.id.",
       note="set through OpenSSL directly (see docs/security.md); the engine is loaded "
            "process-wide"),
)

#: librdkafka properties accepted and ignored with one logged warning naming them.
IGNORED: frozenset = frozenset(p.name for p in _TABLE if p.status == WARNING)

#: Every property by canonical name, in table order.
PROPERTIES: Mapping[str, Property] = {p.name: p for p in _TABLE}

_BY_ANY_NAME: Dict[str, Property] = {}
for _prop in _TABLE:
    for _n in (_prop.name,) + _prop.aliases:
        if _n in _BY_ANY_NAME:
            raise RuntimeError(f"duplicate configuration name {_n!r}")
        _BY_ANY_NAME[_n] = _prop
_BY_ATTR: Dict[str, Property] = {}
for _prop in _TABLE:
    if _prop.attr in _BY_ATTR:
        raise RuntimeError(f"duplicate configuration attribute {_prop.attr!r}")
    _BY_ATTR[_prop.attr] = _prop
del _prop, _n


def describe(name: str) -> Property:
    """Return the :class:`Property` for a canonical name or an alias.

    Raises :class:`KafkaException` (``_INVALID_ARG``) for an unknown name.
    """
    prop = _BY_ANY_NAME.get(name)
    if prop is None:
        raise _unknown(name)
    return prop


_NULLABLE = (STR, LOGGER, CALLABLE, PEM, MAPPING, ANY)
#: Consumer properties of the classic group protocol only (the broker's with KIP-848)
_CLASSIC_GROUP_ONLY = ("session.timeout.ms", "heartbeat.interval.ms",
                       "partition.assignment.strategy", "group.protocol.type")
#: Typed differently here than in librdkafka, where it is a string (None = default).
_NULLABLE_NAMES = frozenset(("partition.assignment.strategy", "group.protocol.type",
                             "topic.blacklist", "share.acknowledgement.mode"))
#: Of those, where "" leaves the default too (librdkafka 2.16 takes it so).
_EMPTY_LEAVES_DEFAULT = frozenset(("share.acknowledgement.mode",))
#: Strings librdkafka checks against a list of values: None is refused as an invalid
#: value ("(null)"), not taken as the default.
_CHECKED_STRINGS = frozenset(("sasl.mechanism", "broker.version.fallback"))
#: Where librdkafka takes "" as it takes None (no value) and refuses it: the typed
#: properties and the checked strings, refused below with librdkafka's words for None
_EMPTY_IS_UNSET = _CHECKED_STRINGS | frozenset(
    p.name for p in _TABLE if p.type not in _NULLABLE and p.name not in _NULLABLE_NAMES)
#: librdkafka's words for a typed property set to None: "Integer configuration property
#: ... cannot be set to empty value"; for enums and lists "Configuration property ..."
_EMPTY_VALUE_PREFIX = {INT: "Integer configuration", FLOAT: "Float configuration",
                       BOOL: "Bool configuration"}


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ClientLogger:
    """What a client logs through when log_cb or log_level is set: drops lines above
    ``log_level`` (syslog numbering) and hands the rest to ``log_cb(level, facility,
    message)`` or, without one, to ``target`` (a logging.Logger). Has the Logger methods
    the client uses."""

    _SYSLOG = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
               (logging.INFO, 6), (logging.DEBUG, 7))

    def __init__(self, target: Any, log_cb: Any, log_level: int) -> None:
        self.target = target
        self.log_cb = log_cb
        self.log_level = log_level
        self.name = getattr(target, "name", "kafka_client")

    @classmethod
    def syslog_level(cls, level: int) -> int:
        for threshold, syslog in cls._SYSLOG:
            if level >= threshold:
                return syslog
        return 7

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging.Logger's name
        return self.syslog_level(level) <= self.log_level and (
            self.log_cb is not None or self.target.isEnabledFor(level))

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if self.syslog_level(level) > self.log_level:
            return
        if self.log_cb is None:
            self.target.log(level, msg, *args, **kwargs)
            return
        text = msg % args if args else str(msg)
        if kwargs.get("exc_info"):
            text += "\n" + traceback.format_exc()
        try:
            self.log_cb(self.syslog_level(level), self.name, text)
        except Exception:
            _log.exception("log_cb failed")

    def debug(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.DEBUG, msg, *args, **kwargs)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.INFO, msg, *args, **kwargs)

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.WARNING, msg, *args, **kwargs)

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.ERROR, msg, *args, **kwargs)

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exc_info", True)
        self.log(logging.ERROR, msg, *args, **kwargs)

    def critical(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.log(logging.CRITICAL, msg, *args, **kwargs)


class NotCallableError(KafkaException, TypeError, ValueError):
    """A callback property (error_cb, on_delivery, ...) that is not callable: a
    KafkaException(_INVALID_ARG) that is also the TypeError confluent-kafka raises for
    error_cb/stats_cb/oauth_cb and the ValueError it raises for throttle_cb, so the
    except clause of code written for it catches it."""


def _invalid(message: str) -> KafkaException:
    code = KafkaError._INVALID_ARG  # type: ignore[attr-defined]
    return KafkaException(KafkaError(code, message))


#: librdkafka properties of features this client does not have: refused by name, saying
#: so, rather than as unknown (or accepted and ignored)
_MOCK_CLUSTER = ("librdkafka's in-process mock cluster: start a kafka_client.testing.Cluster "
                 "and give its bootstrap_servers instead (docs/testing.md)")
UNSUPPORTED: Mapping[str, str] = {
    "test.mock.num.brokers": _MOCK_CLUSTER,
    "test.mock.broker.rtt": _MOCK_CLUSTER,
}


def _unknown(name: str) -> KafkaException:
    if name in UNSUPPORTED:
        return _invalid(f'Configuration property "{name}" is not supported by this client: '
                        f"{UNSUPPORTED[name]}")
    msg = f'No such configuration property: "{name}"'
    if isinstance(name, str):
        close = difflib.get_close_matches(name, list(_BY_ANY_NAME), n=1, cutoff=0.6)
        if close:
            msg += f' (did you mean "{close[0]}"?)'
    return _invalid(msg)


def _label(given: str, prop: Property) -> str:
    """How error messages name a property: as the user wrote it, plus the canonical name."""
    if given == prop.name:
        return f'"{given}"'
    return f'"{given}" (alias of "{prop.name}")'


_TRUE = frozenset(("true", "t", "1"))
_FALSE = frozenset(("false", "f", "0"))


#: what a string property refuses, where str() would give text nobody means
_NOT_TEXT = (bytes, bytearray, memoryview, list, tuple, set, frozenset, dict)


def _convert(given: str, prop: Property, value: Any) -> Any:
    """Convert one user-supplied value to the property's canonical Python value."""
    t = prop.type
    if t == BOOL:
        return _to_bool(given, prop, value)
    if t in (INT, FLOAT):
        return _to_number(given, prop, value)
    if t == STR:
        # confluent-kafka takes str() of any object (a uuid.UUID group.id works there);
        # bytes would become "b'...'" and a container "['h1:9092', ...]", values nobody
        # means (librdkafka then fails later, on a host named "['h1"): refused
        if not isinstance(value, _NOT_TEXT):
            return str(value)
        several = isinstance(value, (list, tuple, set, frozenset))
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a string" + (" (several values: one comma-separated string)"
                                    if several else ""))
    if t == ENUM:
        return _to_enum(given, prop, value)
    if t == CSV:
        return _to_csv(given, prop, value)
    if t == CALLABLE:
        if callable(value):
            return value
        raise NotCallableError(KafkaError(
            KafkaError._INVALID_ARG,  # type: ignore[attr-defined]
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a callable"))
    if t == PEM:
        if isinstance(value, (str, bytes)):
            return value
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a PEM string or bytes")
    if t == ANY:
        return value
    if t == LOGGER:
        if callable(getattr(value, "log", None)):
            return value
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a logging.Logger (an object with a log() method)")
    raise AssertionError(f"unhandled property type {t}")  # pragma: no cover


def _to_bool(given: str, prop: Property, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise _invalid(
        f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
        f"expected a boolean (true or false)")


#: The integers librdkafka reads (C's strtol with base 0: decimal, 0x hex, 0 octal), with
#: the fraction it stops at ("1500.7" is 1500). Other trailing text, which strtol would
#: silently drop ("1e3" is 1 there, "5ms" is 5), is refused instead.
_C_INTEGER = re.compile(r"([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))(\.[0-9]*)?",
                        re.ASCII)


def _parse_c_integer(text: str) -> Optional[int]:
    """*text* as librdkafka reads an integer property, None if it is not a number."""
    match = _C_INTEGER.fullmatch(text.strip())
    if match is None:
        return None
    sign, hex_digits, octal, decimal, _fraction = match.groups()
    if hex_digits is not None:
        num = int(hex_digits, 16)
    elif octal is not None:
        num = int(octal, 8)
    else:
        num = int(decimal, 10)
    return -num if sign == "-" else num


def _parse_c_float(text: str) -> Optional[float]:
    """*text* as librdkafka reads a float property (strtod: hex too), None if it is not
    a finite number."""
    text = text.strip()
    if not text.isascii() or "_" in text:  # float() takes these; strtod does not
        return None
    try:
        num = float(text)
    except ValueError:
        try:
            num = float.fromhex(text) if text.lower().lstrip("+-").startswith("0x") else math.nan
        except ValueError:
            num = math.nan
    return num if math.isfinite(num) else None


#: Integer properties whose fraction is refused rather than dropped as librdkafka drops
#: it: the truncated value means something else than the one given (acks=0.7 would be 0,
#: no acknowledgement at all).
_WHOLE_ONLY = frozenset({"acks"})


def _has_fraction(value: Any) -> bool:
    """Whether *value* (a float, or a number's text) has a fraction other than zero."""
    if isinstance(value, float):
        return not value.is_integer()
    match = _C_INTEGER.fullmatch(str(value).strip())
    return match is not None and any(c not in "0." for c in match.group(5) or "")


def _to_number(given: str, prop: Property, value: Any) -> Union[int, float]:
    is_int = prop.type == INT
    num: Union[int, float, None] = None
    if isinstance(value, str) and value.strip().lower() in prop.synonyms:
        num = prop.synonyms[value.strip().lower()]
    elif isinstance(value, bool):
        num = None  # True/False is almost always a mistake for a number
    elif isinstance(value, int):
        num = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            num = None
        elif is_int:
            num = int(value)  # librdkafka's: the fraction is dropped (1500.7 is 1500)
        else:
            num = value
    elif isinstance(value, str):
        num = _parse_c_integer(value) if is_int else _parse_c_float(value)
    elif isinstance(value, numbers.Number):
        # Decimal, Fraction, numpy's scalars: confluent-kafka hands librdkafka their text
        text = str(value)
        num = _parse_c_integer(text) if is_int else _parse_c_float(text)
    if num is None:
        kind = "an integer" if is_int else "a number"
        extra = ""
        if prop.synonyms:
            extra = " or " + ", ".join(prop.synonyms)
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected {kind}{extra} in range {prop.range_text()}")
    if is_int and prop.name in _WHOLE_ONLY and _has_fraction(value):
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a whole number (librdkafka would read {int(num)})")
    num = int(num) if is_int else float(num)
    if (prop.min is not None and num < prop.min) or (prop.max is not None and num > prop.max):
        raise _invalid(
            f"Configuration property {_label(given, prop)} value {_fmt_num(num)} is outside "
            f"allowed range {_fmt_num(prop.min)}..{_fmt_num(prop.max)}")
    return num


def _to_enum(given: str, prop: Property, value: Any) -> str:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in prop.values:
            return low
        if low in prop.synonyms:
            return prop.synonyms[low]
    raise _invalid(
        f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
        f"allowed values are {prop.range_text()}")


def _to_csv(given: str, prop: Property, value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        items = [s.strip() for s in value]
    else:
        raise _invalid(
            f"Invalid value {value!r} for configuration property {_label(given, prop)}: "
            f"expected a comma-separated string or a list of strings")
    items = [s for s in items if s]
    if prop.values:
        items = [s.lower() for s in items]
        bad = [s for s in items if s not in prop.values]
        if bad:
            raise _invalid(
                f"Invalid value {bad[0]!r} in configuration property {_label(given, prop)}: "
                f"allowed values are {prop.range_text()}")
    return tuple(items)


def _check_partitioner(name: Any) -> None:
    """librdkafka's own words for a partitioner it does not know (it checks this one
    property apart from the others, before its value is converted, and applications may
    match on the text)."""
    known = PROPERTIES["partitioner"]
    if not isinstance(name, str) or (name.strip().lower() not in known.values
                                     and name.strip().lower() not in known.synonyms):
        raise _invalid('Invalid value for configuration property '
                       f'"partitioner": {"(null)" if name in (None, "") else name}')


def _with_topic_conf(conf: Mapping[str, Any], values: Dict[str, Any], explicit: Dict[str, Any],
                     given_as: Dict[str, str]) -> List[Tuple[Any, Any]]:
    """The configuration's (name, value) pairs with the dict of ``default_topic_conf``
    (or its alias ``default.topic.config``) replaced by its own pairs, put last so that
    they win over the same properties at the top level, as librdkafka's default topic
    configuration does; records the dict itself as the property's value."""
    prop = PROPERTIES["default_topic_conf"]
    names = [key for key in conf if _BY_ANY_NAME.get(key) is prop]
    if not names:
        return list(conf.items())
    if len(names) > 1:
        raise _same_thing(*names)
    key = names[0]
    topic_conf = conf[key]
    pairs = [(k, v) for k, v in conf.items() if k != key]
    if topic_conf is None:
        return pairs
    if not isinstance(topic_conf, Mapping):
        raise TypeError(f"{key} must be a dict, not {type(topic_conf).__name__}")
    values[prop.name] = explicit[prop.name] = dict(topic_conf)
    given_as[prop.name] = key
    return pairs + list(topic_conf.items())


def _same_thing(first: str, second: str) -> KafkaException:
    return _invalid(f'Configuration properties "{first}" and "{second}" set the same thing: '
                    f"give only one of them")


#: the scope each kind of client warns about: librdkafka's admin client is a producer
#: handle, so it takes producer properties silently and warns about consumer ones
_WARNED_SCOPE = {"producer": "C", "consumer": "P", "admin": "C"}


class ClientConfig(Mapping[str, Any]):
    """A validated configuration: every property of the table, with defaults applied.

    Read values with ``conf["linger.ms"]`` (canonical names or aliases) or
    ``conf.linger_ms`` (dots and dashes become underscores). Build one with
    :meth:`from_dict`. Instances are read-only.
    """

    __slots__ = ("_role", "_values", "_explicit", "_security", "_hidden_topics")

    def __init__(self, role: str, values: Dict[str, Any], explicit: Dict[str, Any]) -> None:
        object.__setattr__(self, "_role", role)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_explicit", explicit)
        object.__setattr__(self, "_security", None)
        object.__setattr__(self, "_hidden_topics", None)

    @classmethod
    def from_dict(cls, conf: Mapping[str, Any], role: "Role") -> "ClientConfig":
        """Parse, validate and complete a user configuration for a client of *role*.

        *role* is ``"producer"``, ``"consumer"`` or ``"admin"``. Values may be given as
        Python values or as strings the way librdkafka accepts them (``"5"``, ``"true"``,
        ``"all"``, ...); ``None`` leaves a property at its default. Raises
        :class:`KafkaException` with ``KafkaError._INVALID_ARG`` for an unknown property, a
        bad value or an inconsistent combination.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not isinstance(conf, Mapping):
            raise TypeError(f"configuration must be a mapping, not {type(conf).__name__}")
        values: Dict[str, Any] = {p.name: p.default for p in _TABLE}
        explicit: Dict[str, Any] = {}
        given_as: Dict[str, str] = {}
        for key, raw in _with_topic_conf(conf, values, explicit, given_as):
            if not isinstance(key, str):
                raise _invalid(f"Configuration property names must be strings, not {key!r}")
            prop = _BY_ANY_NAME.get(key)
            if prop is None:
                raise _unknown(key)
            earlier = given_as.get(prop.name)
            if prop.distinct_names and earlier is not None and earlier != key:
                raise _same_thing(earlier, key)
            if prop.name == "partitioner":
                _check_partitioner(raw)
            if raw is None or (raw == "" and (prop.name in _EMPTY_IS_UNSET
                                              or prop.name in _EMPTY_LEAVES_DEFAULT)):
                if prop.name in _CHECKED_STRINGS:
                    raise _invalid(f"Invalid value for configuration property "
                                   f"{_label(key, prop)}: (null)")
                if prop.type in _NULLABLE or prop.name in _NULLABLE_NAMES:
                    continue  # unset: the default applies (librdkafka: empty string)
                prefix = _EMPTY_VALUE_PREFIX.get(prop.type, "Configuration")
                raise _invalid(f"{prefix} property {_label(key, prop)} cannot be set to "
                               f"empty value")
            value = _convert(key, prop, raw)
            reason = prop.refuse_values and prop.refuse_values.get(value)
            if reason:
                raise _invalid(f"Configuration property {_label(key, prop)} value "
                               f'"{_value_text(value)}" is not supported by this client: '
                               f"{reason}")
            values[prop.name] = value
            explicit[prop.name] = value
            given_as[prop.name] = key
        cfg = cls(role, values, explicit)
        cfg._check_features()
        cfg._finalize(given_as)
        cfg._build_logger()
        cfg._build_security()
        cfg._build_topic_filter()
        cfg._warn_scope(given_as)
        cfg._warn_unsupported(given_as)
        return cfg

    def _check_features(self) -> None:
        if "builtin.features" not in self._explicit:
            return
        lacking = dict(_MISSING_FEATURES)
        why_not_gssapi = gssapi_unavailable()
        if why_not_gssapi:   # the system's Kerberos library is not installed
            lacking["sasl_gssapi"] = why_not_gssapi
        missing = [f for f in self._values["builtin.features"] if f in lacking]
        if missing:
            raise _invalid(
                f'Invalid value "{",".join(missing)}" for configuration property '
                f'"builtin.features": not supported by this client: '
                + "; ".join(f"{f}: {lacking[f]}" for f in missing))

    def _build_logger(self) -> None:
        """log_cb, or an explicit log_level, puts a ClientLogger where the client looks
        for its logger (the "logger" value)."""
        v = self._values
        if v["log_cb"] is not None or "log_level" in self._explicit:
            target = v["logger"] or logging.getLogger("kafka_client")
            v["logger"] = ClientLogger(target, v["log_cb"], v["log_level"])

    def _warn_unsupported(self, given_as: Dict[str, str]) -> None:
        """One warning per property set that this client accepts but ignores."""
        log = self._logger()
        for canonical, given in given_as.items():
            prop = PROPERTIES[canonical]
            if prop.status == WARNING:
                note = prop.note
                if prop.warning_names_value:
                    note += f" (not loaded: {self._explicit[canonical]})"
                log.warning("Configuration property %s is not supported by this client and "
                            "is ignored: %s", given, note)
            elif self._role in prop.pending_roles:
                log.warning("Configuration property %s is not supported by this %s yet and "
                            "is ignored: %s", given, self._role, prop.note)
            elif prop.warn_values and self._explicit[canonical] in prop.warn_values:
                log.warning("Configuration property %s=%s is ignored: %s", given,
                            _value_text(self._explicit[canonical]),
                            prop.warn_values[self._explicit[canonical]])

    # --- cross-property rules (librdkafka's finalize step) ---

    def _build_topic_filter(self) -> None:
        """topic.blacklist compiled once (a bad expression fails the constructor)."""
        patterns = self._values["topic.blacklist"]
        if not patterns:
            return
        try:
            compiled = re.compile("|".join(f"(?:{p})" for p in patterns))
        except re.error as exc:
            raise _invalid(f'Invalid value for configuration property "topic.blacklist": '
                           f"{exc}") from None
        object.__setattr__(self, "_hidden_topics", compiled)

    def _build_security(self) -> None:
        """TLS context and SASL settings, built now so a bad certificate file or missing
        credentials fail the constructor, naming the property."""
        try:
            security = SecuritySettings.from_config(self._values)
        except SecurityConfigError as exc:
            raise _invalid(f"Invalid security configuration: {exc}") from None
        object.__setattr__(self, "_security", security)

    def _finalize(self, given_as: Dict[str, str]) -> None:
        v = self._values
        ex = self._explicit
        role = self._role

        if v.get("transactional.id") == "":
            # librdkafka's: an empty id is no id (the broker refuses an empty one: every
            # init_transactions() failed, retriably, for ever)
            v["transactional.id"] = None
        if role == "producer":
            self._finalize_producer(given_as)
        else:
            if role == "admin":
                # librdkafka's admin client is a producer handle: what a producer refuses
                # it refuses too (a configuration shared by both); nothing derived is kept
                ClientConfig("producer", dict(v), dict(ex))._finalize_producer(given_as)
            # Producer-only machinery stays off for consumers and admin clients.
            v["enable.idempotence"] = False

        if role == "consumer":
            max_msg = v["message.max.bytes"]
            if "fetch.max.bytes" in ex:
                if v["fetch.max.bytes"] < max_msg:
                    raise _invalid(
                        f'"fetch.max.bytes" ({v["fetch.max.bytes"]}) must be >= '
                        f'"message.max.bytes" ({max_msg})')
            else:
                v["fetch.max.bytes"] = max(
                    min(v["fetch.max.bytes"], v["queued.max.messages.kbytes"] * 1024), max_msg)
            need = v["fetch.max.bytes"] + 512
            if "receive.message.max.bytes" in ex:
                if v["receive.message.max.bytes"] < need:
                    raise _invalid(
                        f'"receive.message.max.bytes" ({v["receive.message.max.bytes"]}) must '
                        f'be >= "fetch.max.bytes" + 512 ({need})')
            else:
                v["receive.message.max.bytes"] = max(v["receive.message.max.bytes"], need)
            if v["group.protocol"] == "consumer":
                # KIP-848 moved these to the broker; librdkafka refuses them too.
                for name in _CLASSIC_GROUP_ONLY:
                    if name in ex:
                        raise _invalid(
                            f'"{name}" is not supported with group.protocol=consumer: the '
                            f'broker decides it' + (
                                ' (use "group.remote.assignor")'
                                if name == "partition.assignment.strategy" else ""))
            elif v["max.poll.interval.ms"] < v["session.timeout.ms"]:
                raise _invalid(
                    f'"max.poll.interval.ms" ({v["max.poll.interval.ms"]}) must be >= '
                    f'"session.timeout.ms" ({v["session.timeout.ms"]})')
            if not v["partition.assignment.strategy"]:
                raise _invalid('"partition.assignment.strategy" must name at least one assignor')
            if v["fetch.wait.max.ms"] + 1000 > v["socket.timeout.ms"]:
                self._logger().warning(
                    "Configuration property fetch.wait.max.ms (%d) should be at least 1000 ms "
                    "lower than socket.timeout.ms (%d)",
                    v["fetch.wait.max.ms"], v["socket.timeout.ms"])

        strategies = v["partition.assignment.strategy"]
        if len({s in _COOPERATIVE_ASSIGNORS for s in strategies}) > 1:
            # every client checks it, as librdkafka's (a configuration shared by both)
            raise _invalid(
                f'"partition.assignment.strategy" ({",".join(strategies)}) mixes '
                f"cooperative and eager assignors, which cannot be combined")
        if "metadata.max.age.ms" not in ex and v["topic.metadata.refresh.interval.ms"] > 0:
            v["metadata.max.age.ms"] = min(v["topic.metadata.refresh.interval.ms"] * 3, 86400000)
        if "topic.metadata.refresh.fast.interval.ms" not in ex:
            v["topic.metadata.refresh.fast.interval.ms"] = min(v["retry.backoff.ms"], 60000)
        if v["reconnect.backoff.max.ms"] < v["reconnect.backoff.ms"]:
            raise _invalid(
                f'"reconnect.backoff.max.ms" ({v["reconnect.backoff.max.ms"]}) must be >= '
                f'"reconnect.backoff.ms" ({v["reconnect.backoff.ms"]})')
        if v["retry.backoff.max.ms"] < v["retry.backoff.ms"]:
            # Accepted, as librdkafka does; the backoff is then constant (KIP-580's rule:
            # retry.backoff.ms is the upper bound too).
            v["retry.backoff.max.ms"] = v["retry.backoff.ms"]
        if v["debug"]:
            # librdkafka's: debug contexts raise log_level to 7 (debug), whatever it was
            # set to, or their lines would be dropped by the level they asked for
            v["log_level"] = 7
        if "allow.auto.create.topics" not in ex:
            # librdkafka's AdminClient is a producer handle: list_topics(topic) creates
            # the topic there too (the admin calls themselves never ask for it)
            v["allow.auto.create.topics"] = role in ("producer", "admin")
        if v["https.ca.location"] and v["https.ca.pem"]:
            raise _invalid('"https.ca.location" and "https.ca.pem" are mutually exclusive')
        https_ca = v["https.ca.location"]
        if https_ca and https_ca != "probe" and not os.path.exists(https_ca):
            # librdkafka checks this at construction, whether or not OIDC is used
            raise _invalid(f'"https.ca.location" must be an existing file or directory '
                           f"({https_ca})")
        if v["ssl.keystore.location"] and not v["ssl.keystore.password"]:
            raise _invalid('"ssl.keystore.password" is mandatory when "ssl.keystore.location" '
                           "is set")
        if v["sasl.oauthbearer.method"] == "oidc" and (
                (v["sasl.mechanism"] or "").upper() == "OAUTHBEARER"):
            # as librdkafka: the OIDC settings are checked only where OAUTHBEARER is used
            self._check_oidc()

    def _finalize_producer(self, given_as: Dict[str, str]) -> None:
        """The producer's rules: transactions, idempotence, linger.ms."""
        v = self._values
        ex = self._explicit
        if v["transactional.id"] is not None:
            if not v["enable.idempotence"]:
                if "enable.idempotence" in ex:
                    raise _invalid(
                        '"transactional.id" requires "enable.idempotence" to be true')
                v["enable.idempotence"] = True
            txn_timeout = v["transaction.timeout.ms"]
            if "socket.timeout.ms" not in ex:
                v["socket.timeout.ms"] = min(max(txn_timeout - 100, 900), 300000)
            elif txn_timeout + 100 < v["socket.timeout.ms"]:
                raise _invalid(
                    f'"socket.timeout.ms" ({v["socket.timeout.ms"]}) must be at most '
                    f'"transaction.timeout.ms" + 100 ({txn_timeout + 100})')
        if v["enable.idempotence"]:
            self._adjust_for_idempotence(given_as)
        elif v["enable.gapless.guarantee"] and "enable.gapless.guarantee" in ex:
            raise _invalid(
                '"enable.gapless.guarantee" requires "enable.idempotence" to be true')
        timeout = v["message.timeout.ms"]
        if timeout != 0 and timeout <= v["linger.ms"]:
            if "linger.ms" in ex:
                raise _invalid(
                    f'"message.timeout.ms" ({timeout}) must be greater than '
                    f'"linger.ms" ({_fmt_num(v["linger.ms"])})')
            v["linger.ms"] = timeout - 0.1  # keep batches from outliving their messages
        if "sticky.partitioning.linger.ms" not in ex:
            v["sticky.partitioning.linger.ms"] = int(min(900000, 2 * v["linger.ms"]))

    def _check_oidc(self) -> None:
        """sasl.oauthbearer.method=oidc: what it needs, as librdkafka checks it."""
        v = self._values
        if v["enable.sasl.oauthbearer.unsecure.jwt"]:
            raise _invalid('"enable.sasl.oauthbearer.unsecure.jwt" and '
                           '"sasl.oauthbearer.method=oidc" are mutually exclusive')
        if v["oauth_cb"] is not None:
            # confluent-kafka calls the application's oauth_cb then; so do we.
            self._logger().warning("Configuration property sasl.oauthbearer.method=oidc is "
                                   "ignored: oauth_cb is set and provides the tokens")
            return
        def need(name: str) -> None:
            if not v[name]:
                raise _invalid(f'"{name}" is mandatory when "sasl.oauthbearer.method=oidc" '
                               f"is set")

        def exclusive(a: str, b: str) -> None:
            if v[a] and v[b]:
                raise _invalid(f'"{a}" and "{b}" are mutually exclusive')

        if v["sasl.oauthbearer.metadata.authentication.type"] == "azure_imds":
            return   # its endpoint: see OidcTokenEndpoint.from_config
        need("sasl.oauthbearer.token.endpoint.url")
        if v["sasl.oauthbearer.grant.type"] != _JWT_BEARER:
            need("sasl.oauthbearer.client.id")
            need("sasl.oauthbearer.client.secret")
            return
        key_file, key_pem = ("sasl.oauthbearer.assertion.private.key.file",
                             "sasl.oauthbearer.assertion.private.key.pem")
        assertion_file = "sasl.oauthbearer.assertion.file"
        exclusive(key_file, key_pem)
        exclusive(assertion_file, key_file)
        exclusive(assertion_file, key_pem)
        if not (v[key_file] or v[key_pem] or v[assertion_file]):
            raise _invalid(f'"{key_file}" or "{key_pem}" (or "{assertion_file}") is '
                           f'mandatory when "sasl.oauthbearer.grant.type" is {_JWT_BEARER}')

    def _adjust_for_idempotence(self, given_as: Dict[str, str]) -> None:
        """Apply the idempotent producer's requirements: fail on explicit conflicts, else
        adjust the defaults."""
        v = self._values
        ex = self._explicit

        def name(canonical: str) -> str:
            return _label(given_as.get(canonical, canonical), PROPERTIES[canonical])

        inflight = "max.in.flight.requests.per.connection"
        if inflight in ex:
            if v[inflight] > 5:
                raise _invalid(
                    f"{name(inflight)} must be at most 5 when \"enable.idempotence\" is true "
                    f"(got {v[inflight]})")
        else:
            v[inflight] = min(v[inflight], 5)
        if "retries" in ex:
            if v["retries"] < 1:
                raise _invalid(
                    f'{name("retries")} must be at least 1 when "enable.idempotence" is true '
                    f'(got {v["retries"]})')
        else:
            v["retries"] = INT32_MAX
        bp = "queue.buffering.backpressure.threshold"
        if bp in ex and v[bp] > 1:
            raise _invalid(
                f'{name(bp)} must be 1 when "enable.idempotence" is true (got {v[bp]})')
        v[bp] = 1
        if "acks" in ex:
            if v["acks"] != -1:
                raise _invalid(
                    f'{name("acks")} must be all (-1) when "enable.idempotence" is true '
                    f'(got {v["acks"]})')
        else:
            v["acks"] = -1
        if v["transactional.id"] is not None:
            txn_timeout = v["transaction.timeout.ms"]
            if "message.timeout.ms" not in ex:
                v["message.timeout.ms"] = txn_timeout
            elif v["message.timeout.ms"] > txn_timeout:
                raise _invalid(
                    f'{name("message.timeout.ms")} ({v["message.timeout.ms"]}) must be at most '
                    f'"transaction.timeout.ms" ({txn_timeout})')

    def _warn_scope(self, given_as: Dict[str, str]) -> None:
        """Log (not fail) for properties that the other kind of client uses."""
        role = self._role
        for canonical, given in given_as.items():
            scope = PROPERTIES[canonical].scope
            if scope == "*":
                continue
            if _WARNED_SCOPE[role] == scope:
                self._logger().warning(
                    "Configuration property %s is a %s property and will be ignored by this "
                    "%s instance", given, _SCOPE_NAMES[scope], role)

    def _logger(self) -> Any:
        return self._values.get("logger") or _log

    def logger_for(self, component: str) -> Any:
        """What a part of the client logs through: the ``logger`` property (or the
        log_cb/log_level wrapper) when set, else the component's own logger
        ``component`` (``kafka_client.consumer.group``, ...), which the ``debug``
        contexts turn up."""
        return self._values["logger"] or logging.getLogger(component)

    # --- read access ---

    def topic_hidden(self, name: str) -> bool:
        """Whether ``topic.blacklist`` hides the topic ``name``."""
        hidden = self._hidden_topics
        return hidden is not None and hidden.search(name) is not None

    @property
    def security(self) -> Any:
        """The :class:`~kafka_client._net.security.SecuritySettings` of this
        configuration (TLS context, SASL mechanism and credentials, OAUTHBEARER tokens)."""
        return self._security

    @property
    def role(self) -> str:
        """``"producer"``, ``"consumer"`` or ``"admin"``."""
        return self._role

    def is_explicit(self, name: str) -> bool:
        """True if the user set *name* (or one of its aliases) rather than leaving the default."""
        return describe(name).name in self._explicit

    def explicit(self) -> Dict[str, Any]:
        """The properties the user set, by canonical name, as converted values."""
        return dict(self._explicit)

    def as_dict(self) -> Dict[str, Any]:
        """Every property by canonical name, after defaults and adjustments."""
        return dict(self._values)

    def __getitem__(self, name: str) -> Any:
        prop = _BY_ANY_NAME.get(name)
        if prop is None:
            raise KeyError(name)
        return self._values[prop.name]

    def __getattr__(self, attr: str) -> Any:
        prop = _BY_ATTR.get(attr)
        if prop is None:
            raise AttributeError(f"{type(self).__name__!s} has no property {attr!r}")
        return self._values[prop.name]

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError("ClientConfig is read-only")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in _BY_ANY_NAME

    def __repr__(self) -> str:
        shown = {k: ("***" if "password" in k else v) for k, v in self._explicit.items()}
        return f"ClientConfig(role={self._role!r}, explicit={shown!r})"

    def broker_addresses(self) -> List[Tuple[str, int]]:
        """``bootstrap.servers`` parsed into ``(host, port)`` pairs (see
        :func:`parse_bootstrap_servers`)."""
        return parse_bootstrap_servers(self._values["bootstrap.servers"] or "")


def parse_bootstrap_servers(text: str, default_port: int = 9092) -> List[Tuple[str, int]]:
    """Split a broker list such as ``"a:9092,b,[::1]:9093,PLAINTEXT://c:9094"`` into
    ``(host, port)`` pairs. An optional ``scheme://`` prefix is dropped; IPv6 addresses go in
    brackets when a port follows. Raises :class:`KafkaException` (``_INVALID_ARG``) for a bad
    port."""
    out: List[Tuple[str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, port_text = item, ""
        if item.startswith("["):
            end = item.find("]")
            if end < 0:
                raise _invalid(f'Invalid broker address "{item}" in "bootstrap.servers"')
            host, rest = item[1:end], item[end + 1:]
            if rest.startswith(":"):
                port_text = rest[1:]
            elif rest:
                raise _invalid(f'Invalid broker address "{item}" in "bootstrap.servers"')
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        port = default_port
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise _invalid(f'Invalid port in broker address "{item}" in "bootstrap.servers"')
            port = int(port_text)
        if not host:
            raise _invalid(f'Missing host in broker address "{item}" in "bootstrap.servers"')
        out.append((host, port))
    return out


# --- documentation ---

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_text(prop: Property) -> str:
    d = prop.default
    if d is None:
        return ""
    if isinstance(d, bool):
        return "true" if d else "false"
    if isinstance(d, tuple):
        return ",".join(d)
    return _fmt_num(d)


def to_markdown() -> str:
    """Render the property table as Markdown (the content of docs/configuration.md)."""
    lines = [
        "# Configuration properties",
        "",
        "Generated from `kafka_client/config.py` by "
        "`python -m kafka_client.config --markdown`; do not edit by hand.",
        "",
        "Names, aliases, defaults and ranges follow librdkafka, so configuration written for "
        "confluent-kafka carries over. Values may be given as Python values or as strings "
        "(`\"5\"`, `\"true\"`, `\"all\"`). Integers are read as librdkafka reads them: "
        "a fraction is dropped (`1500.7` and `\"1500.7\"` are 1500), `0x` starts hex and a "
        "leading `0` octal (`\"010\"` is 8); text after the number, which librdkafka "
        "would drop silently (`\"1e3\"` is 1 there, `\"5ms\"` 5), is refused, and so is "
        "a fraction for `acks` (`0.7` would be 0 there: no acknowledgement). "
        "An unknown property or an invalid value fails with "
        "`KafkaException(KafkaError._INVALID_ARG)`; a property meant for the other kind of "
        "client is accepted and a warning is logged.",
        "",
        "Every property name in librdkafka's CONFIGURATION.md is in this table, but for "
        "those refused by name (see Refused at the end). Status: "
        "**effect** = it does what librdkafka documents (the note says where a value is "
        "refused, because ignoring it would weaken what was asked for, or where it "
        "differs); **warning** = accepted, ignored, and one warning naming it is logged "
        "when it is set. No name of the table is refused whatever its value. The "
        "properties librdkafka "
        "sets only "
        "through its C functions (callbacks, `opaque`, `default_topic_conf`, "
        "`ssl_key`/`ssl_certificate`/`ssl_ca`) are set by name here, callbacks as Python "
        "callables.",
        "",
        "Side: P = producer, C = consumer, * = every client. "
        "\"Derived\" defaults apply only when the property is not set explicitly. `None` "
        "for a property that is not a string, callable or logger is refused (\"cannot be "
        "set to empty value\"), as in librdkafka, and so is `\"\"` (also for `sasl.mechanism` "
        "and `broker.version.fallback`); for those `None` means the default.",
        "",
        "| Property | Aliases | Side | Type | Range / values | Default | Status | Note | "
        "Description |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in _TABLE:
        desc = p.description
        if p.derived:
            desc += f" Derived default: {p.derived}."
        note = p.note
        extra = [f"{_value_text(v)}: refused ({why})" for v, why in p.refuse_values.items()]
        extra += [f"{_value_text(v)}: warning ({why})" for v, why in p.warn_values.items()]
        if p.pending_roles:
            extra.append(f"warning for {', '.join(p.pending_roles)}")
        note = "; ".join(x for x in [note] + extra if x)
        lines.append(
            "| " + " | ".join(_md_cell(c) for c in (
                f"`{p.name}`",
                ", ".join(f"`{a}`" for a in p.aliases),
                p.scope,
                p.type,
                p.range_text(),
                _default_text(p),
                p.status,
                note,
                desc,
            )) + " |")
    lines += [
        "",
        "## Rules between properties",
        "",
        "- Producer with `enable.idempotence=true`: `acks` must be all (-1), "
        "`max.in.flight.requests.per.connection` at most 5, `retries` at least 1 and "
        "`queue.buffering.backpressure.threshold` 1; when not set they become all, "
        "min(value, 5), 2147483647 and 1.",
        "- Producer with `transactional.id`: idempotence is switched on (an explicit "
        "`enable.idempotence=false` is an error); `message.timeout.ms` must not exceed "
        "`transaction.timeout.ms` (default: equal to it) and `socket.timeout.ms` must not "
        "exceed `transaction.timeout.ms` + 100 (default: `transaction.timeout.ms` - 100).",
        "- Producer: `enable.gapless.guarantee` needs `enable.idempotence`; "
        "`message.timeout.ms` (when not 0) must be greater than `linger.ms`.",
        "- Consumer: `fetch.max.bytes` >= `message.max.bytes`; `receive.message.max.bytes` >= "
        "`fetch.max.bytes` + 512; `max.poll.interval.ms` >= `session.timeout.ms`. Every "
        "client: cooperative and eager assignors cannot be mixed.",
        "- The admin client refuses what a producer refuses (the producer rules above), as "
        "librdkafka's admin client, a producer handle, does; the producer's derived values "
        "do not apply to it.",
        "- Every client: `reconnect.backoff.max.ms` >= `reconnect.backoff.ms` (a "
        "`retry.backoff.max.ms` below `retry.backoff.ms` is raised to it: a constant "
        "backoff, as in librdkafka and KIP-580).",
        "- Every client, whatever `security.protocol` (as librdkafka): `https.ca.location` "
        "must be an existing file or directory (or `probe`); `ssl.keystore.location` needs "
        "`ssl.keystore.password`. `sasl.oauthbearer.method=oidc` and what it needs are "
        "checked where `sasl.mechanism` is OAUTHBEARER.",
        "- `security.protocol` ssl / sasl_ssl builds the TLS context at construction (a "
        "missing file or wrong key password fails there); sasl_* needs a supported "
        "`sasl.mechanism` and its credentials (see docs/security.md).",
        "",
        "## Refused",
        "",
        ("librdkafka properties of features this client does not have; setting them "
         "fails with `_INVALID_ARG` saying so: "
         + "; ".join(f"`{n}` ({why})" for n, why in UNSUPPORTED.items()) + "."
         if UNSUPPORTED else "None: every librdkafka property of a feature this client "
         "lacks would be refused by name here, saying so."),
        "",
        "## Accepted and ignored",
        "",
        "Set, these log one warning each and have no effect: "
        + ", ".join(f"`{n}`" for n in sorted(IGNORED)) + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Command line: ``--markdown`` prints the table as Markdown."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        sys.stdout.write(to_markdown())
        return 0
    sys.stderr.write("usage: python -m kafka_client.config --markdown\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
