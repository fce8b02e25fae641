"""Injected faults and the request log, kept by the cluster process.

* Errors: "the next N answers of API X on broker B carry error E" (a queue per broker
  and API; ``broker=None`` matches any broker). By default the request is not executed:
  the answer is built from the request with the error everywhere, as a broker that
  refused it would send. With ``executed`` the request is executed first and only its
  answer is replaced (a write whose acknowledgement was lost).
* Latency: answers of a broker (optionally of some APIs only) leave that much later.
* The request log: one entry per request served (followers' fetches excepted), with the
  error codes of the answer and what the handler noted (Produce: producer id, epoch,
  base sequence and the offset given, per partition), plus events such as closed
  connections and injected faults.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

from kafka_proto.messages import api_info

__all__ = ["Faults", "RequestLog"]


class Faults:
    def __init__(self) -> None:
        self._errors: Dict[Tuple[Optional[int], int], Deque[Tuple[int, bool]]] = {}
        self._latency: Dict[Optional[int], Tuple[float, Optional[frozenset]]] = {}

    def push_errors(self, broker: Optional[int], api_key: int, codes: List[int],
                    executed: bool = False) -> None:
        self._errors.setdefault((broker, api_key), deque()).extend(
            (code, executed) for code in codes)

    def take_error(self, broker: int, api_key: int) -> Optional[Tuple[int, bool]]:
        """``(error code, executed)`` for the next answer of this API on this broker."""
        for key in ((broker, api_key), (None, api_key)):
            queue = self._errors.get(key)
            if queue:
                code = queue.popleft()
                if not queue:
                    del self._errors[key]
                return code
        return None

    def pending_errors(self) -> List[Dict[str, Any]]:
        return [{"broker": b, "api_key": k, "codes": [c for c, _ in q],
                 "executed": [e for _, e in q]} for (b, k), q in self._errors.items()]

    def set_latency(self, broker: Optional[int], seconds: float,
                    api_keys: Optional[List[int]] = None) -> None:
        if seconds <= 0:
            self._latency.pop(broker, None)
        else:
            self._latency[broker] = (seconds, frozenset(api_keys) if api_keys else None)

    def latency(self, broker: int, api_key: int) -> float:
        for key in (broker, None):
            setting = self._latency.get(key)
            if setting is not None and (setting[1] is None or api_key in setting[1]):
                return setting[0]
        return 0.0

    def clear(self) -> None:
        self._errors.clear()
        self._latency.clear()


class RequestLog:
    """Entries are plain dicts (they cross to the test process as JSON)."""

    #: Entries kept at most (the oldest are dropped; sequence numbers go on).
    LIMIT = 100_000

    def __init__(self, limit: int = LIMIT) -> None:
        self.entries: List[Dict[str, Any]] = []
        self.first_seq = 0     # sequence number of entries[0] (older ones were dropped)
        self.limit = limit

    def _append(self, entry: Dict[str, Any]) -> Dict[str, Any]:
        entry["seq"] = self.first_seq + len(self.entries)
        self.entries.append(entry)
        if len(self.entries) > self.limit:
            drop = len(self.entries) - self.limit
            del self.entries[:drop]
            self.first_seq += drop
        return entry

    def add(self, broker: int, head: Any, principal: Optional[str]) -> Dict[str, Any]:
        return self._append({
            "kind": "request", "time": time.time(), "broker": broker,
            "api_key": head.api_key, "api": api_info(head.api_key).name,
            "version": head.api_version, "correlation_id": head.correlation_id,
            "client_id": head.client_id, "principal": principal, "error_codes": [],
            "errors": []})

    def add_event(self, broker: int, kind: str, detail: str, **extra: Any) -> Dict[str, Any]:
        entry = {"kind": kind, "time": time.time(), "broker": broker, "detail": detail}
        entry.update(extra)
        return self._append(entry)

    def since(self, seq: int = 0) -> List[Dict[str, Any]]:
        start = max(seq - self.first_seq, 0)
        return self.entries[start:]

    def clear(self) -> int:
        self.first_seq += len(self.entries)
        self.entries = []
        return self.first_seq
