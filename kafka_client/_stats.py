"""The statistics document's parts every client shares (``stats_cb``, librdkafka's JSON
shape): rolling windows, per-partition defaults, the request names per broker.

librdkafka's document is what applications and metrics exporters parse, so every field
of it is present under its name, with the value this client has for it, or the value
librdkafka gives when the thing counted does not exist here (documented in
docs/producer.md#statistics).
"""
from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Mapping

from kafka_proto.messages import API_KEYS, ApiKey

__all__ = ["StatsWindow", "empty_window", "partition_stats", "topic_stats",
           "request_counts", "PRODUCER_REQUESTS", "CONSUMER_REQUESTS"]

#: the observations a window keeps for its percentiles (a uniform sample beyond it)
RESERVOIR = 1024
_PERCENTILES = (("p50", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0),
                ("p99", 99.0), ("p99_99", 99.99))


class StatsWindow:
    """librdkafka's rolling window: the observations of one quantity (a latency, a batch
    size) since the last statistics document. Added to by the I/O thread; rolled by the
    thread that builds the document (a sample added meanwhile may land in either).
    ``keep_samples`` false (no statistics document is ever built: statistics.interval.ms
    is 0) keeps the sums only: the percentiles' samples, up to RESERVOIR floats per
    window and never rolled, held ~75 KB per topic a producer wrote to."""

    __slots__ = ("count", "total", "squares", "low", "high", "samples", "keep")

    def __init__(self, keep_samples: bool = True) -> None:
        self.keep = keep_samples
        self.count = 0
        self.total = 0.0
        self.squares = 0.0
        self.low = math.inf
        self.high = 0.0
        self.samples: List[float] = []

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.squares += value * value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        if not self.keep:
            return
        samples = self.samples
        if len(samples) < RESERVOIR:
            samples.append(value)
        else:
            slot = random.randrange(self.count)
            if slot < RESERVOIR:
                samples[slot] = value

    def roll(self, scale: float = 1.0) -> Dict[str, int]:
        """The window as librdkafka's object (values times ``scale``, as integers), and a
        new window begins."""
        count, total, squares = self.count, self.total, self.squares
        low, high, samples = self.low, self.high, self.samples
        self.__init__(self.keep)  # type: ignore[misc]
        if not count:
            return empty_window()
        avg = total / count
        variance = max(0.0, squares / count - avg * avg)
        ordered = sorted(samples)
        out = {"min": int(low * scale), "max": int(high * scale), "avg": int(avg * scale),
               "sum": int(total * scale), "stddev": int(math.sqrt(variance) * scale)}
        for name, pct in _PERCENTILES:
            if not ordered:      # no samples kept: no percentiles
                out[name] = 0
                continue
            index = min(len(ordered) - 1, int(math.ceil(pct / 100.0 * len(ordered))) - 1)
            out[name] = int(ordered[max(index, 0)] * scale)
        out.update(outofrange=0, hdrsize=0, cnt=count)
        return out


def empty_window() -> Dict[str, int]:
    """A window with no observation, as librdkafka writes one."""
    out = {"min": 0, "max": 0, "avg": 0, "sum": 0, "stddev": 0}
    out.update({name: 0 for name, _pct in _PERCENTILES})
    out.update(outofrange=0, hdrsize=0, cnt=0)
    return out


#: OFFSET_INVALID, librdkafka's "no offset" in the statistics
_NO_OFFSET = -1001

_PARTITION_DEFAULTS: Dict[str, Any] = {
    "partition": -1, "broker": -1, "leader": -1, "desired": False, "unknown": False,
    "msgq_cnt": 0, "msgq_bytes": 0, "xmit_msgq_cnt": 0, "xmit_msgq_bytes": 0,
    "fetchq_cnt": 0, "fetchq_size": 0, "fetch_state": "none",
    "query_offset": _NO_OFFSET, "next_offset": 0, "app_offset": _NO_OFFSET,
    "stored_offset": _NO_OFFSET, "stored_leader_epoch": -1,
    "commited_offset": _NO_OFFSET, "committed_offset": _NO_OFFSET,
    "committed_leader_epoch": -1, "eof_offset": _NO_OFFSET, "lo_offset": _NO_OFFSET,
    "hi_offset": _NO_OFFSET, "ls_offset": _NO_OFFSET, "consumer_lag": -1,
    "consumer_lag_stored": -1, "leader_epoch": -1, "txmsgs": 0, "txbytes": 0,
    "rxmsgs": 0, "rxbytes": 0, "msgs": 0, "rx_ver_drops": 0, "msgs_inflight": 0,
    "next_ack_seq": 0, "next_err_seq": 0, "acked_msgid": 0,
}


def partition_stats(**fields: Any) -> Dict[str, Any]:
    """One ``topics.<t>.partitions.<p>`` object: librdkafka's fields in its order, with
    ``fields`` set and librdkafka's values for what is not (``commited_offset``, its
    misspelt duplicate, follows ``committed_offset``)."""
    out = dict(_PARTITION_DEFAULTS)
    unknown = set(fields) - set(out)
    if unknown:
        raise KeyError(f"not a librdkafka partition statistic: {sorted(unknown)}")
    out.update(fields)
    out["commited_offset"] = out["committed_offset"]
    return out


def topic_stats(name: str, age_ms: int, metadata_age_ms: int,
                batchsize: Dict[str, int], batchcnt: Dict[str, int],
                partitions: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """One ``topics.<t>`` object, in librdkafka's order."""
    return {"topic": name, "age": age_ms, "metadata_age": metadata_age_ms,
            "batchsize": batchsize, "batchcnt": batchcnt, "partitions": partitions}


# librdkafka's names of the requests it counts per broker (``brokers.<b>.req``), in its
# order, per client type; "Unknown-N?" are API keys it has no name for.
_COMMON_TAIL = ("SaslHandshake", "ApiVersion", "SaslAuthenticate", "DescribeCluster",
                "DescribeProducers", "Unknown-62?", "DescribeTransactions",
                "ListTransactions", "Unknown-70?", "GetTelemetrySubscriptions",
                "PushTelemetry", "Unknown-73?", "Unknown-74?", "Unknown-75?",
                "ShareGroupHeartbeat", "Unknown-77?", "ShareFetch", "ShareAcknowledge")
PRODUCER_REQUESTS = ("Produce", "ListOffsets", "Metadata", "FindCoordinator",
                     "SaslHandshake", "ApiVersion", "InitProducerId", "AddPartitionsToTxn",
                     "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit") + _COMMON_TAIL[2:]
CONSUMER_REQUESTS = ("Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
                     "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup",
                     "SyncGroup") + _COMMON_TAIL

#: librdkafka's names that differ from the schemas' API names
_RENAMED: Dict[int, str] = {ApiKey.API_VERSIONS: "ApiVersion"}


def request_counts(sent: Mapping[int, int], names: Any) -> Dict[str, int]:
    """``brokers.<b>.req``: requests sent per API under librdkafka's ``names`` (every one
    listed, 0 when none was sent), then any other API this client sent under its own
    name."""
    out = {name: 0 for name in names}
    # a copy taken at once: the I/O thread may add an API while the document is built
    for key, count in list(sent.items()):
        info = API_KEYS.get(key)
        name = _RENAMED.get(key) or (info.name if info is not None else f"Unknown-{key}?")
        out[name] = out.get(name, 0) + count
    return out
