"""Plain request loops over a :class:`~kafka_client._testing.blocking.BlockingConnection`:
create topics, produce ready-made record batches, fetch a partition to its end.

For the demo and the integration tests until the real producer and consumer exist;
every step is one generated request and its response, nothing hidden.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence

from kafka_client._testing.blocking import BlockingConnection
from kafka_proto.errors import ErrorCode, broker_error
from kafka_proto.messages import (
    ApiKey,
    CreateTopicsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from kafka_proto.records import read_batches

__all__ = [
    "BrokerErrorResponse",
    "FetchResult",
    "create_topics",
    "topic_ids",
    "produce",
    "fetch_once",
    "fetch_all",
]


class BrokerErrorResponse(RuntimeError):
    """A response carried a non-zero error code."""

    def __init__(self, what: str, code: int, message: Optional[str] = None) -> None:
        self.code = code
        self.error_name = broker_error(code).name
        text = f"{what}: {self.error_name} ({code})"
        if message:
            text += f": {message}"
        super().__init__(text)


def create_topics(conn: BlockingConnection, names: Iterable[str], partitions: int = 1,
                  timeout_ms: int = 10_000, exist_ok: bool = False) -> None:
    """CreateTopics (replication factor 1) and check every per-topic error code."""
    req = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=n, num_partitions=partitions,
                                                   replication_factor=1)
                for n in names],
        timeout_ms=timeout_ms)
    resp = conn.request(req)
    for t in resp.topics:
        if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and exist_ok:
            continue
        if t.error_code:
            raise BrokerErrorResponse(f"CreateTopics {t.name}", t.error_code,
                                      getattr(t, "error_message", None))


def topic_ids(conn: BlockingConnection, names: Sequence[str]) -> Dict[str, uuid.UUID]:
    """Topic ids from Metadata (v10+ carries them)."""
    version = conn.version_for(ApiKey.METADATA)
    if version < 10:
        raise RuntimeError(f"Metadata v{version} has no topic ids")
    resp = conn.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=False), version)
    out = {}
    for t in resp.topics:
        if t.error_code:
            raise BrokerErrorResponse(f"Metadata {t.name}", t.error_code)
        out[t.name] = t.topic_id
    return out


def produce(conn: BlockingConnection, topic: str, partition: int, batch: Any,
            acks: int = -1, timeout_ms: int = 30_000, version: Optional[int] = None,
            transactional_id: Optional[str] = None, check: bool = True) -> Any:
    """One ProduceRequest carrying one encoded record batch for one partition; returns
    the partition's response (None for acks=0).

    One batch, because Kafka (and noida-db) reject a v3+ ProduceRequest with more than
    one batch per partition (CORRUPT_MESSAGE); Tansu accepts it.
    """
    req = ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=[ProduceRequest.TopicProduceData(
            name=topic,
            partition_data=[ProduceRequest.PartitionProduceData(index=partition,
                                                                records=batch)])])
    if acks == 0:
        conn.send(req, version, expect_response=False)
        return None
    resp = conn.request(req, version)
    part = _only_partition(resp.responses, "partition_responses",
                           f"Produce {topic}[{partition}]")
    if check and part.error_code:
        raise BrokerErrorResponse(f"Produce {topic}[{partition}]", part.error_code,
                                  getattr(part, "error_message", None))
    return part


def _only_partition(topics: Any, field: str, what: str) -> Any:
    """The one partition answer of a one-partition request; a response without it is an
    error (UNKNOWN_SERVER_ERROR), not an IndexError."""
    if not topics or not getattr(topics[0], field):
        raise BrokerErrorResponse(what, -1, "the response holds no answer for the partition")
    return getattr(topics[0], field)[0]


class FetchResult(NamedTuple):
    """What a fetch loop read from one partition."""

    batches: List[Any]         # decoded batches (RecordBatch / LegacyBatch), in order
    high_watermark: int
    fetch_requests: int
    bytes_received: int


def fetch_once(conn: BlockingConnection, topic: str, partition: int, offset: int, *,
               version: Optional[int] = None, topic_id: Optional[uuid.UUID] = None,
               max_bytes: int = 50 * 1024 * 1024, partition_max_bytes: int = 10 * 1024 * 1024,
               max_wait_ms: int = 100, isolation_level: int = 0) -> Any:
    """One FetchRequest for one partition; returns the partition's response."""
    if version is None:
        version = conn.version_for(ApiKey.FETCH)
    if version >= 13:
        if topic_id is None:
            topic_id = topic_ids(conn, [topic])[topic]
        ftopic = FetchRequest.FetchTopic(topic_id=topic_id, partitions=[])
    else:
        ftopic = FetchRequest.FetchTopic(topic=topic, partitions=[])
    ftopic.partitions.append(FetchRequest.FetchPartition(
        partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes))
    req = FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                       isolation_level=isolation_level, topics=[ftopic])
    resp = conn.request(req, version)
    if getattr(resp, "error_code", 0):
        raise BrokerErrorResponse(f"Fetch v{version}", resp.error_code)
    part = _only_partition(resp.responses, "partitions",
                           f"Fetch {topic}[{partition}] v{version}")
    if part.error_code:
        raise BrokerErrorResponse(f"Fetch {topic}[{partition}] v{version}", part.error_code)
    return part


def fetch_all(conn: BlockingConnection, topic: str, partition: int = 0, *,
              start_offset: int = 0, version: Optional[int] = None,
              partition_max_bytes: int = 10 * 1024 * 1024, check_crc: bool = True,
              until: Optional[int] = None, max_requests: int = 100_000) -> FetchResult:
    """Fetch from ``start_offset`` until the high watermark (or ``until``) is reached.

    Counting by the high watermark, not ListOffsets, on purpose: Tansu 0.6 answers
    ListOffsets(latest) with the last batch's base offset + 1.
    """
    auto = version is None
    if version is None:
        version = conn.version_for(ApiKey.FETCH)
    tid = topic_ids(conn, [topic])[topic] if version >= 13 else None
    if tid is not None and tid.int == 0:
        if not auto:
            raise RuntimeError(f"broker has no topic id for {topic!r}: cannot Fetch v{version}")
        # noida-db advertises Fetch v13+ but reports all-zero topic ids: use names.
        version, tid = 12, None
    offset = start_offset
    batches: List[Any] = []
    requests = received = 0
    hw = -1
    while requests < max_requests:
        part = fetch_once(conn, topic, partition, offset, version=version, topic_id=tid,
                          partition_max_bytes=partition_max_bytes)
        requests += 1
        hw = part.high_watermark
        target = hw if until is None else min(until, hw)
        data = part.records
        before = offset
        if data:
            received += len(data)
            for batch in read_batches(data, check_crc=check_crc):
                if batch.last_offset < offset:
                    continue  # a compressed legacy wrapper or batch starting before offset
                batches.append(batch)
                offset = batch.last_offset + 1
        if offset >= target:
            return FetchResult(batches, hw, requests, received)
        if offset == before and data and partition_max_bytes < (1 << 30):
            # Only a truncated batch came back (bigger than the limit): ask for more.
            partition_max_bytes *= 2
    raise RuntimeError(f"fetch loop on {topic}[{partition}] made no progress to {hw} "
                       f"(at {offset} after {requests} requests)")
