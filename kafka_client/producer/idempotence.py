"""The idempotent producer's state: producer id and epoch, and how Produce errors are
read when sequence numbers are in play (librdkafka's rules, as far as implemented).

* Before the first batch goes out, InitProducerId gives a producer id and epoch.
* Each partition numbers its records: a batch gets ``base_sequence`` = the partition's
  next sequence when it is first sent, and keeps it on every retry (the broker drops a
  batch it already has: DUPLICATE_SEQUENCE_NUMBER counts as delivered).
* At most ``max.in.flight.requests.per.connection`` (<= 5) batches of a partition are in
  flight; a batch to be retried waits until the partition has nothing in flight, so the
  broker sees sequences in order again.
* When a batch that had its sequence number fails (timed out, refused for good, purged),
  the partition's sequence has a gap: librdkafka then bumps the epoch (a new
  InitProducerId with the current id and epoch, KIP-360) and restarts every sequence at
  0 once nothing is in flight. Here: :meth:`Idempotence.request_bump` and the sender's
  drain-then-reinit step. A broker that refuses the bump is asked for a new producer id
  instead. Batches the broker refused on every attempt are renumbered and sent again;
  those sent under the old epoch that wait to be resent for another reason fail
  (POSSIBLY_PERSISTED) rather than go out again under the new one.
* Recovered (KIP-360, as librdkafka): UNKNOWN_PRODUCER_ID for a batch the broker never
  had (the producer's state was deleted with its records) bumps the epoch and resends
  it; OUT_OF_ORDER_SEQUENCE_NUMBER right after an earlier batch of the same partition
  failed is a consequence of that failure and the batch waits for it. Fatal: an
  OUT_OF_ORDER_SEQUENCE_NUMBER nothing explains (the broker's sequence is not ours),
  UNKNOWN_PRODUCER_ID for a batch that may be in the log already, and any gap with
  ``enable.gapless.guarantee``: the producer fails what is in flight with that error
  (flagged fatal), purges what is queued and refuses new messages with ``_FATAL``. A
  transactional producer's ids and epochs come from its transaction coordinator
  (:mod:`kafka_client.producer.transactions`).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Optional

from kafka_client.errors import KafkaError, broker_code
from kafka_proto.errors import ErrorCode
from kafka_proto.records import restamp_batch

__all__ = ["Idempotence", "has_producer_id", "restamp", "NOT_PERSISTED", "POSSIBLY_PERSISTED",
           "PERSISTED", "OUT_OF_ORDER_SEQUENCE_NUMBER", "DUPLICATE_SEQUENCE_NUMBER",
           "INVALID_PRODUCER_EPOCH", "UNKNOWN_PRODUCER_ID"]

_log = logging.getLogger("kafka_client.producer.idempotence")

# librdkafka's rd_kafka_msg_status_t values (confluent-kafka has no names for them).
NOT_PERSISTED = 0
POSSIBLY_PERSISTED = 1
PERSISTED = 2

# The names sender.py imports from here: the Produce errors read with sequence numbers in
# play, and the re-stamping of a batch sent again under a new producer id or epoch (the
# codec owns both the error table and the batch layout).
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
DUPLICATE_SEQUENCE_NUMBER = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
INVALID_PRODUCER_EPOCH = ErrorCode.INVALID_PRODUCER_EPOCH
UNKNOWN_PRODUCER_ID = ErrorCode.UNKNOWN_PRODUCER_ID
restamp = restamp_batch


class Idempotence:
    """Producer id/epoch and the fatal-error latch (I/O thread; ``fatal`` is read by the
    application thread too)."""

    def __init__(self, config: Any) -> None:
        self.log = config.logger_for(_log.name)
        self.enabled = bool(config["enable.idempotence"])
        self.gapless = bool(config["enable.gapless.guarantee"])
        self.txn_timeout_ms = config["transaction.timeout.ms"]
        self.producer_id = -1
        self.epoch = -1
        #: producer ids and epochs assigned so far, and when the last one came (monotonic)
        self.assignments = 0
        self.assigned_at = time.monotonic()
        self.init_in_flight = False
        self.init_retry_at = 0.0
        self.init_failures = 0
        self.bump_wanted = False
        self.fatal: Optional[KafkaError] = None

    @property
    def ready(self) -> bool:
        return not self.enabled or (self.producer_id >= 0 and not self.bump_wanted)

    def request_bump(self, reason: str) -> None:
        if not self.bump_wanted:
            self.log.info("idempotent producer: epoch bump needed (%s)", reason)
        self.bump_wanted = True

    def assigned(self, producer_id: int, epoch: int, now: float) -> None:
        """An InitProducerId answer (the idempotent producer's or the transactional one's)
        gave this producer id and epoch: counted and stamped for the statistics' ``eos``
        (``epoch_cnt``, ``idemp_stateage``)."""
        self.producer_id = producer_id
        self.epoch = epoch
        self.assignments += 1
        self.assigned_at = now
        self.bump_wanted = False

    def init_request(self) -> Any:
        from kafka_proto.messages import InitProducerIdRequest

        return InitProducerIdRequest(transactional_id=None,
                                     transaction_timeout_ms=self.txn_timeout_ms,
                                     producer_id=self.producer_id,
                                     producer_epoch=self.epoch)

    def on_init(self, resp: Any, err: Optional[KafkaError], now: float,
                backoff: float) -> bool:
        """Digest an InitProducerId answer; True if a producer id is now known."""
        self.init_in_flight = False
        code = err.code() if err is not None else broker_code(resp.error_code)
        if code == ErrorCode.NONE and not has_producer_id(resp):
            # No error, and no id: nothing to produce with. Retried after the backoff
            # like a failure (asked again at once, it made thousands of requests a
            # second).
            self.log.warning("InitProducerId answered without a usable producer id and "
                             "epoch (%d, epoch %d); retrying", resp.producer_id,
                             resp.producer_epoch)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        if code == ErrorCode.NONE:
            self.assigned(resp.producer_id, resp.producer_epoch, now)
            self.init_failures = 0
            self.log.debug("producer id %d epoch %d", self.producer_id, self.epoch)
            return True
        self.init_failures += 1
        self.init_retry_at = now + min(backoff * (2 ** min(self.init_failures, 6)), 5.0)
        self.log.info("InitProducerId failed (%s); retrying", err.str() if err else code)
        if err is None and self.bump_wanted and self.producer_id >= 0:
            # The broker refused to bump the epoch of this producer id (Tansu 0.6 answers
            # UNKNOWN_SERVER_ERROR every time): ask for a new producer id instead, which
            # does the same for a producer without transactions (sequences restart at 0).
            self.log.info("epoch bump refused: asking for a new producer id")
            self.producer_id = self.epoch = -1
        return False

    def set_fatal(self, error: KafkaError, wrap: bool = True) -> KafkaError:
        """Latch the producer's fatal error (the first one counts): ``error``'s code
        flagged fatal, as confluent-kafka raises librdkafka's fatal error (its
        ``rd_kafka_fatal_error()`` code: OUT_OF_ORDER_SEQUENCE_NUMBER, not ``_FATAL``), or
        as it is (``wrap`` False: a transactional producer's ``_FENCED``, ...)."""
        if self.fatal is None:
            if wrap:
                self.fatal = KafkaError(error.code(), f"Fatal error: {error.name()}: "
                                        f"{error.str()}", fatal=True)
                self.log.error("idempotent producer: fatal error: %s", error.str())
            else:
                self.fatal = error
        return self.fatal


def has_producer_id(resp: Any) -> bool:
    """An InitProducerId answer without error carries a usable id and epoch (a broker
    that answers -1 gives nothing to produce with)."""
    return resp.producer_id >= 0 and resp.producer_epoch >= 0
