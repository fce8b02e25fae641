# Type stub for the compiled module kafka_client/producer/_core.pyx.
from collections import deque
from typing import (
    Any, Callable, Dict, List, Literal, Optional, Sequence, Set, Tuple, Union, final,
)

from kafka_client.errors import KafkaException
from kafka_proto.records import BinaryColumn, RecordBatchBuilder

@final   # cython.final
class PendingMessage:
    value: Optional[bytes]
    key: Optional[bytes]
    partition: int
    on_delivery: Optional[Callable[..., Any]]
    timestamp: int
    headers: Optional[List[Tuple[str, Optional[bytes]]]]
    size: int
    queued_at: float

@final   # cython.final
class DeliveryCallback:
    index: int
    callback: Callable[..., Any]
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Optional[List[Tuple[str, Optional[bytes]]]]
    timestamp: int

@final   # cython.final
class DeliveryRange:
    index: int
    count: int
    callback: Callable[..., Any]
    values: Union[List[Optional[bytes]], BinaryColumn]
    keys: Optional[Union[List[Optional[bytes]], BinaryColumn]]
    timestamp: int
    def __init__(self, index: int, callback: Callable[..., Any],
                 values: Union[List[Optional[bytes]], BinaryColumn],
                 keys: Optional[Union[List[Optional[bytes]], BinaryColumn]],
                 timestamp: int) -> None: ...

@final   # cython.final
class Columns:
    values: Union[List[Optional[bytes]], BinaryColumn]
    keys: Optional[Union[List[Optional[bytes]], BinaryColumn]]
    total: int
    biggest: int

@final   # cython.final
class Batch:
    part: PartitionState
    builder: Optional[RecordBatchBuilder]    # None once built (data)
    append: Callable[..., None]
    created: float
    deadline: float
    cbs: Optional[List[Union[DeliveryCallback, DeliveryRange]]]
    count: int
    nbytes: int
    counted: int
    data: Optional[bytes]
    base_sequence: int
    attempts: int
    retry_at: float
    seq: int
    sent: bool
    done: bool
    pid: int
    epoch: int
    wall_ms: int
    last_error: Any
    def __init__(self, part: PartitionState, builder: RecordBatchBuilder, now: float,
                 timeout: float, seq: int) -> None: ...

@final   # cython.final
class PartitionState:
    topic: TopicState
    index: int
    open: Optional[Batch]
    ready: deque[Batch]
    in_flight: int
    next_seq: int
    batch_seq: int
    leader: int
    retrying: bool
    def __init__(self, topic: TopicState, index: int) -> None: ...

@final   # cython.final
class TopicState:
    name: str
    parts: Optional[List[PartitionState]]
    count: int
    choose: Callable[..., int]
    pending: List[PendingMessage]
    unknown_since: Optional[float]
    error: Any
    available: Optional[List[int]]
    sticky: Optional[PartitionState]
    last_used: float
    applied: Any
    applied_leaders: Any
    def __init__(self, name: str, choose: Callable[..., int]) -> None: ...

class AccumulatorCore:
    lock: BatchLock
    topics: Dict[str, TopicState]
    default_cb: Optional[Callable[..., Any]]
    msg_count: int
    msg_bytes: int
    max_msgs: int
    max_bytes: int
    message_max: int
    batch_num: int
    batch_limit: int
    sticky_cache: bool
    pending_topics: Set[TopicState]
    io_check: Optional[Callable[[], None]]
    refusal: Optional[Callable[[], Any]]
    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Optional[Callable[..., Any]] = None, timestamp: int = 0,
                headers: Any = None, *, callback: Optional[Callable[..., Any]] = None
                ) -> None: ...
    def produce_messages(self, topic: str, messages: List[Dict[str, Any]], partition: Any = -1,
                         on_delivery: Optional[Callable[..., Any]] = None,
                         timestamp: int = 0) -> int: ...
    def wait_for_metadata_many(self, t: TopicState, values: List[Optional[bytes]],
                               keys: Optional[List[Optional[bytes]]], partition: int,
                               on_delivery: Optional[Callable[..., Any]],
                               timestamp: int) -> None: ...
    def place_waiting(self, t: TopicState, m: PendingMessage) -> None: ...

def invalid_partition(partition: int) -> KafkaException: ...
def check_timestamp(timestamp: Any) -> int: ...
def too_large(size: int, message_max: int) -> KafkaException: ...
def to_columns(values: Sequence[Any], keys: Optional[Sequence[Any]] = None) -> Columns: ...
def not_callable(what: str, obj: Any) -> TypeError: ...
def as_bytes(obj: Any, what: str) -> bytes: ...
def normalize_headers(headers: Any) -> Optional[List[Tuple[str, Optional[bytes]]]]: ...

@final   # cython.final
class BatchLock:
    def __enter__(self) -> BatchLock: ...
    def __exit__(self, *exc_info: Any) -> Literal[False]: ...
