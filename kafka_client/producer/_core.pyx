# cython: language_level=3
"""The producer's per-message path, compiled: the batch/partition/topic records and
``produce()``.

Everything else in ``kafka_client`` is plain Python. This one path is not, because it
runs once per message on the application thread while holding the GIL the I/O thread
needs too: written as Python it cost ~0.73 us per message (confluent-kafka's
``produce()``: ~0.57 us), which capped throughput below the C client however little the
rest of the producer did. Compiled, the same steps (type checks, size limit, queue
limits under the accumulator's lock, partition choice, one append into the open batch)
cost a fraction of that. The policy around it (opening and closing batches, waiting
for metadata, linger, the sender) stays in :mod:`kafka_client.producer.accumulator`,
whose ``Accumulator`` subclasses :class:`AccumulatorCore`.
"""
cimport cython
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact
from cpython.dict cimport PyDict_Check, PyDict_GetItem
from cpython.long cimport PyLong_CheckExact
from cpython.ref cimport PyObject
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from cpython.pythread cimport (NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_release_lock, PyThread_type_lock)

import time
from collections import deque
from operator import index as _index

from kafka_client.errors import KafkaError, KafkaException
from kafka_proto.records import BinaryColumn

_monotonic = time.monotonic
#: produce()'s default partition, -1: "the partitioner chooses" (a cached small int)
cdef object _PARTITIONER = -1
#: produce()'s default timestamp, 0: "now" (a cached small int)
cdef object _NOW = 0


@cython.final
cdef class BatchLock:
    """A plain mutex for ``with`` in Python code that ``produce()`` takes with two C
    calls instead of two method calls (which cost more than the rest of the locking)."""

    cdef PyThread_type_lock _lock

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef inline void take(self) noexcept:
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            with nogil:  # held by the other thread: let it run and finish
                PyThread_acquire_lock(self._lock, WAIT_LOCK)

    cdef inline void give(self) noexcept:
        PyThread_release_lock(self._lock)

    def __enter__(self):
        self.take()
        return self

    def __exit__(self, *exc_info):
        self.give()
        return False


@cython.final
@cython.freelist(64)
cdef class PendingMessage:
    """A message that waits for its topic's metadata (librdkafka's unassigned queue):
    what ``produce()`` was given, its size (key + value bytes) and when it came."""

    cdef readonly object value
    cdef readonly object key
    cdef readonly object partition
    cdef readonly object on_delivery
    cdef readonly object timestamp
    cdef readonly object headers
    cdef readonly Py_ssize_t size
    cdef readonly double queued_at     # monotonic

    def __repr__(self):
        return f"<PendingMessage partition={self.partition} {self.size} bytes>"


@cython.final
@cython.freelist(64)
cdef class DeliveryCallback:
    """One message's delivery callback and what its report gives back: the message's
    index in its batch (its offset is the batch's base offset + index), key, value,
    headers and timestamp (0: the batch's clock)."""

    cdef readonly Py_ssize_t index
    cdef readonly object callback
    cdef readonly object key
    cdef readonly object value
    cdef readonly object headers
    cdef readonly object timestamp

    def __repr__(self):
        return f"<DeliveryCallback #{self.index} {self.callback!r}>"


@cython.final
@cython.freelist(16)
cdef class DeliveryRange:
    """The delivery callback of ``count`` consecutive messages of a batch appended by one
    ``produce_batch()`` call (from the batch's ``index``-th message on): one record per
    bulk append instead of one per message. ``values`` and ``keys`` (None: no keys) are
    the producer's own lists (or :class:`~kafka_proto.records.BinaryColumn` views) of
    what was appended, for the reports; ``timestamp`` as in :class:`DeliveryCallback`."""

    cdef readonly Py_ssize_t index
    cdef readonly Py_ssize_t count
    cdef readonly object callback
    cdef readonly object values
    cdef readonly object keys
    cdef readonly object timestamp

    def __init__(self, Py_ssize_t index, callback, values, keys, timestamp):
        self.index = index
        self.count = len(values)
        self.callback = callback
        self.values = values
        self.keys = keys
        self.timestamp = timestamp

    def __repr__(self):
        return (f"<DeliveryRange #{self.index}..#{self.index + self.count - 1} "
                f"{self.callback!r}>")


@cython.final
cdef class Batch:
    """One record batch of one partition, from its first message to its delivery report.

    ``cbs`` holds, in message order, a :class:`DeliveryCallback` for each message that
    has a delivery callback, or a :class:`DeliveryRange` for a run of them appended in
    bulk (None when no message has one).
    """

    cdef public PartitionState part
    cdef public object builder
    cdef public object append          # builder.append, bound once
    cdef public double created
    cdef public double deadline
    cdef public list cbs
    cdef public Py_ssize_t count
    cdef public object nbytes          # encoded size, once closed
    cdef public Py_ssize_t counted     # bytes of its messages counted in msg_bytes
    cdef public object data            # the built batch, once sent
    cdef public object base_sequence
    cdef public object attempts
    cdef public double retry_at
    cdef public object seq             # order of the batch within its partition
    cdef public bint sent              # went out at least once (POSSIBLY_PERSISTED if lost)
    cdef public bint done              # delivery report queued (late answers are ignored)
    cdef public object pid
    cdef public object epoch
    cdef public object wall_ms         # for reports of messages stamped "now"
    cdef public object last_error      # why it waits to be resent

    def __init__(self, PartitionState part, builder, double now, double timeout, seq):
        self.part = part
        self.builder = builder
        self.append = builder.append
        self.created = now
        self.deadline = now + timeout if timeout > 0 else float("inf")
        self.cbs = None
        self.count = 0
        self.nbytes = 0
        self.counted = 0
        self.data = None
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.seq = seq
        self.sent = False
        self.done = False
        self.pid = -1
        self.epoch = -1
        self.wall_ms = int(time.time() * 1000)
        self.last_error = None

    def __repr__(self):
        p = self.part
        return f"<Batch {p.topic.name}[{p.index}] #{self.seq} {self.count} msgs>"


@cython.final
cdef class PartitionState:
    """One partition's open batch, closed batches waiting to be sent, and what decides
    when the next one may go (in flight, retrying, idempotence sequence). The
    accumulator owns it: other modules read it, only the accumulator changes it."""

    cdef public TopicState topic
    cdef public object index
    cdef public Batch open
    cdef public object ready           # deque of closed batches, in order
    cdef public object in_flight       # batches sent and not answered
    cdef public object next_seq        # idempotence: sequence of the next new batch
    cdef public object batch_seq       # counts batches, to keep retries in their place
    cdef public object leader
    cdef public bint retrying          # a batch waits to be resent: send nothing newer

    def __init__(self, TopicState topic, index):
        self.topic = topic
        self.index = index
        self.open = None
        self.ready = deque()
        self.in_flight = 0
        self.next_seq = 0
        self.batch_seq = 0
        self.leader = -1
        self.retrying = False

    def __repr__(self):
        return f"<PartitionState {self.topic.name}[{self.index}]>"


@cython.final
cdef class TopicState:
    """One topic: its partitions (None until metadata is known), the partitioner, and
    messages waiting for the first metadata (:class:`PendingMessage`, in order)."""

    cdef public object name
    cdef public list parts
    cdef public Py_ssize_t count
    cdef public object choose          # partitioner(key, count, available) -> int
    cdef public list pending
    cdef public object unknown_since
    cdef public object error           # set when the topic is known not to exist
    cdef public object available       # partitions with a leader, None when all have
    cdef public PartitionState sticky  # keyless messages' partition
    #: when a batch of it last opened or closed, or a message last waited for its
    #: metadata (monotonic): metadata.max.idle.ms counts from there
    cdef public double last_used
    #: the metadata entry (TopicInfo) and its leaders list last applied to it: an answer
    #: that brings the same objects again has nothing new for it (see apply_metadata)
    cdef public object applied
    cdef public object applied_leaders

    def __init__(self, name, choose):
        self.name = name
        self.last_used = _monotonic()
        self.applied = None
        self.applied_leaders = None
        self.parts = None
        self.count = 0
        self.choose = choose
        self.pending = []
        self.unknown_since = None
        self.error = None
        self.available = None
        self.sticky = None


cdef enum:
    # produce() calls between two looks at the clock for IO_CHECK_INTERVAL_S
    IO_CHECK_EVERY = 4

#: Least time between two looks at whether the I/O thread waits for the GIL
cdef double IO_CHECK_INTERVAL_S = 0.0001


cdef class AccumulatorCore:
    """The accumulator's state that ``produce()`` touches, as C fields, and ``produce()``.

    The subclass (``Accumulator``, the only user of these fields and of the lock) sets
    every field in its ``__init__`` and provides ``_open(p, size)``, ``_close(p, b)`` and
    ``_new_topic(name)`` (called under the lock, rarely).
    """

    cdef readonly BatchLock lock       # taken by produce() and the I/O thread
    cdef public dict topics
    cdef public object default_cb
    cdef public long long msg_count    # messages in the producer (until reported)
    cdef public long long msg_bytes
    cdef public long long max_msgs
    cdef public long long max_bytes
    cdef public long long message_max
    cdef public long long batch_num
    cdef public long long batch_limit
    cdef public bint sticky_cache
    cdef public set pending_topics     # topics with messages waiting for metadata
    #: called from produce() at most every IO_CHECK_INTERVAL_S (looked at every
    #: IO_CHECK_EVERY calls): lets a starved I/O thread run (IOThread.let_run), or None
    cdef public object io_check
    #: None while produce() may queue; otherwise a callable giving the KafkaError it
    #: raises (an idempotent producer's fatal error, a transactional producer outside a
    #: transaction): set through Accumulator.refuse_produce()
    cdef public object refusal
    cdef int _until_io_check
    cdef double _next_io_check

    def __cinit__(self):
        self.lock = BatchLock()
        self._until_io_check = IO_CHECK_EVERY

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None,
                timestamp=0, headers=None, *, callback=None):
        """Encode one message into its partition's batch (see ``Producer.produce``)."""
        cdef Py_ssize_t size
        cdef double now
        cdef int part
        if self.refusal is not None:
            _refuse_checked(self.refusal, value, key, partition, timestamp, on_delivery,
                            callback, headers)
        if PyBytes_CheckExact(value):
            size = PyBytes_GET_SIZE(value)
        elif value is None:
            size = 0
        else:
            value = as_bytes(value, "value")
            size = PyBytes_GET_SIZE(value)
        if key is not None:
            if not PyBytes_CheckExact(key):
                key = as_bytes(key, "key")
            size += PyBytes_GET_SIZE(key)
        if size > self.message_max:
            raise too_large(size, self.message_max)
        part = _partition_arg(partition)
        if timestamp is not _NOW:
            timestamp = _timestamp_arg(timestamp)
        if callback is not None:
            on_delivery = callback
            if not callable(on_delivery):
                raise not_callable("callback", on_delivery)
        elif on_delivery is None:
            on_delivery = self.default_cb
        elif not callable(on_delivery):
            raise not_callable("on_delivery", on_delivery)
        if headers is not None:
            headers = normalize_headers(headers)
            if headers is not None:
                # Headers count against message.max.bytes, as librdkafka counts them: a
                # record too large with them failed its whole batch at the broker.
                size += headers_size(headers)
                if size > self.message_max:
                    raise too_large(size, self.message_max)
        self._enqueue(topic, value, key, part, on_delivery, timestamp, headers, size)
        self._until_io_check -= 1
        if self._until_io_check <= 0:
            self._until_io_check = IO_CHECK_EVERY
            if self.io_check is not None:
                now = _clock()
                if now >= self._next_io_check:
                    self._next_io_check = now + IO_CHECK_INTERVAL_S
                    self.io_check()

    def produce_messages(self, topic, list messages, partition=-1, on_delivery=None,
                         timestamp=0):
        """confluent-kafka's ``produce_batch(topic, messages, partition, on_delivery)``:
        one dict per message (see ``Producer.produce_batch``). A message that cannot be
        queued gets the reason as a KafkaError under ``"_error"`` in its dict (and a
        stale ``"_error"`` of a queued one is removed); returns how many were queued.
        Before any is queued, a malformed message raises as confluent-kafka's does,
        naming its index: TypeError (ValueError for its headers)."""
        cdef Py_ssize_t i, n = len(messages), queued = 0
        cdef list prepared = [None] * n
        cdef int default_part = _partition_arg(partition)
        cdef bint full = False
        cdef bint any_ready = False
        cdef PendingMessage pm
        cdef dict m
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if timestamp is not _NOW:
            timestamp = _timestamp_arg(timestamp)
        if on_delivery is None:
            on_delivery = self.default_cb
        elif not callable(on_delivery):
            raise not_callable("on_delivery", on_delivery)
        # All checked before any is queued: a malformed message queues none of them.
        for i in range(n):
            item = messages[i]
            if not PyDict_Check(item):
                raise TypeError(f"Message at index {i} must be a dict, not "
                                f"{type(item).__name__}")
            try:
                prepared[i] = self._prepare(<dict>item, i, default_part, on_delivery,
                                            timestamp)
                any_ready = True
            except KafkaException as exc:
                prepared[i] = exc.args[0]
        if self.refusal is not None:
            # Refused (no transaction, a fatal error): each message gets the reason and
            # none is queued, as confluent-kafka's produce_batch() reports it per message
            refused = self.refusal()
            for i in range(n):
                (<dict>messages[i])["_error"] = refused
            return 0
        if any_ready:
            topic_error = self._topic_error(topic)
            if topic_error is not None:  # an empty name: the reason of each queueable one
                for i in range(n):
                    if type(prepared[i]) is PendingMessage:
                        prepared[i] = topic_error
        for i in range(n):
            m = <dict>messages[i]
            if type(prepared[i]) is not PendingMessage:
                m["_error"] = prepared[i]
                continue
            if full:  # later ones fail too: what is queued keeps the list's order
                m["_error"] = _queue_full()
                continue
            pm = <PendingMessage>prepared[i]
            try:
                self._enqueue(topic, pm.value, pm.key, pm.partition, pm.on_delivery,
                              pm.timestamp, pm.headers, pm.size)
            except KafkaException as exc:
                m["_error"] = exc.args[0]
                continue
            except BufferError:
                full = True
                m["_error"] = _queue_full()
                continue
            except Exception as exc:
                # partitioner_cb raised (the application's code, run here): this one is
                # not queued. Raised out of the call, it left those queued before it
                # with no trace in their dicts nor a count returned: a retry of the list
                # sent them twice.
                m["_error"] = KafkaError(KafkaError._APPLICATION,
                                         f"choosing its partition raised {exc!r}")
                continue
            if "_error" in m:
                del m["_error"]  # from an earlier attempt
            queued += 1
        return queued

    cdef object _topic_error(self, topic):
        # The topic's state, made as the first message's _enqueue would (under the
        # lock): a name that cannot be sent raises here, none queued, as
        # confluent-kafka's produce_batch() raises; the KafkaError for an empty name
        # (reported per message), or None.
        cdef BatchLock lock = self.lock
        lock.take()
        try:
            if topic not in self.topics:
                self._new_topic(topic)
        except KafkaException as exc:
            return exc.args[0]
        finally:
            lock.give()
        return None

    cdef PendingMessage _prepare(self, dict m, Py_ssize_t i, int default_part, default_cb,
                                 default_ts):
        # Message ``i``'s dict, checked and converted as produce() does its arguments;
        # the errors name the field and the index, in confluent-kafka's words.
        cdef PendingMessage pm = PendingMessage.__new__(PendingMessage)
        cdef Py_ssize_t size
        value = _field(m, "value")
        key = _field(m, "key")
        partition = _field(m, "partition")
        timestamp = _field(m, "timestamp")
        callback = _field(m, "callback")
        headers = _field(m, "headers")
        if value is not None and not PyBytes_CheckExact(value):
            value = _message_bytes(value, "value", i)
        if key is not None and not PyBytes_CheckExact(key):
            key = _message_bytes(key, "key", i)
        if callback is None:
            callback = default_cb
        elif not callable(callback):
            raise TypeError(f"Message callback at index {i} must be callable, not "
                            f"{type(callback).__name__}")
        size = (0 if value is None else PyBytes_GET_SIZE(value)) + \
            (0 if key is None else PyBytes_GET_SIZE(key))
        if headers is not None:
            try:
                headers = normalize_headers(headers)
                if headers is not None:
                    size += headers_size(headers)
            except (TypeError, ValueError) as exc:
                # ValueError, as confluent-kafka's produce_batch() raises it
                raise ValueError(f"Invalid headers at index {i}: {exc}") from None
        pm.value = value
        pm.key = key
        pm.on_delivery = callback
        pm.headers = headers
        pm.size = size
        if partition is None:
            pm.partition = default_part
        else:
            try:
                pm.partition = _partition_arg(partition)
            except TypeError:
                raise TypeError(f"Message partition at index {i} must be int, not "
                                f"{type(partition).__name__}") from None
            except OverflowError:
                raise invalid_partition(partition) from None   # reported in its dict
        if timestamp is None:
            pm.timestamp = default_ts
        else:
            try:
                pm.timestamp = _timestamp_arg(timestamp)
            except TypeError:
                raise TypeError(f"Message timestamp at index {i} must be an int "
                                f"(milliseconds), not {type(timestamp).__name__}") from None
        if size > self.message_max:
            raise too_large(size, self.message_max)
        return pm

    def wait_for_metadata_many(self, TopicState t, list values, list keys, int partition,
                               on_delivery, timestamp):
        """Under the lock: messages of ``produce_batch()``'s columnar form (checked by
        :func:`to_columns`) for a topic whose partitions are not known yet, all queued to
        wait for them (or none: KafkaException if the topic is known not to exist)."""
        cdef Py_ssize_t i
        cdef Py_ssize_t size
        for i in range(len(values)):  # the first raises if the topic does not exist
            value = values[i]
            key = None if keys is None else keys[i]
            size = (0 if value is None else PyBytes_GET_SIZE(value)) + \
                (0 if key is None else PyBytes_GET_SIZE(key))
            self._wait_for_metadata(t, value, key, partition, on_delivery, timestamp, None,
                                    size)

    @cython.final
    cdef inline int _enqueue(self, topic, value, key, int part, on_delivery, timestamp,
                             headers, Py_ssize_t size) except -1:
        # A checked message into its partition's batch, or to wait for the topic's
        # metadata; BufferError when the producer is full.
        cdef BatchLock lock
        cdef TopicState t
        lock = self.lock
        lock.take()
        try:
            if self.refusal is not None:
                # Refused while this call waited for the lock (a fatal error: the I/O
                # thread sets the refusal, then purges under the lock): queued now, the
                # message would miss the purge and wait for message.timeout.ms.
                raise KafkaException(self.refusal())
            if self.msg_count >= self.max_msgs or self.msg_bytes + size > self.max_bytes:
                raise BufferError("Local: Queue full")
            found = self.topics.get(topic)
            if found is None:
                found = self._new_topic(topic)
            t = <TopicState>found
            if t.parts is None:
                self._wait_for_metadata(t, value, key, part, on_delivery, timestamp,
                                        headers, size)
                return 0
            self._place(t, value, key, part, on_delivery, timestamp, headers, size)
            self.msg_count += 1
        finally:
            lock.give()
        return 0

    cdef int _wait_for_metadata(self, TopicState t, value, key, int partition, on_delivery,
                                timestamp, headers, Py_ssize_t size) except -1:
        # Under the lock: the topic's partitions are not known yet (librdkafka's
        # unassigned queue); the accumulator places these once they are.
        cdef PendingMessage m
        if t.error is not None:
            raise KafkaException(t.error)
        m = PendingMessage.__new__(PendingMessage)
        m.value = value
        m.key = key
        m.partition = partition
        m.on_delivery = on_delivery
        m.timestamp = timestamp
        m.headers = headers
        m.size = size
        m.queued_at = _monotonic()
        t.last_used = m.queued_at
        t.pending.append(m)
        self.pending_topics.add(t)
        self.msg_count += 1
        self.msg_bytes += size
        return 0

    def place_waiting(self, TopicState t, PendingMessage m):
        """Under the lock: place a message that waited for ``t``'s metadata into its
        partition's batch; raises KafkaException if it cannot be placed (a partition the
        topic does not have)."""
        self._place(t, m.value, m.key, m.partition, m.on_delivery, m.timestamp, m.headers,
                    m.size)
        self.msg_bytes -= m.size  # counted again with its batch, by _place

    cdef int _place(self, TopicState t, value, key, int partition, on_delivery, timestamp,
                    headers, Py_ssize_t size) except -1:
        cdef PartitionState p
        cdef Batch b
        cdef list cbs
        cdef DeliveryCallback d
        if partition < 0:
            if key is None and self.sticky_cache:
                # Keyless: the sticky partition while its batch is open; the partitioner
                # (time-based stickiness) is asked when it closed.
                p = t.sticky
                if p is None or p.open is None:
                    p = t.sticky = t.parts[t.choose(None, t.count, t.available)]
            else:
                p = t.parts[t.choose(key, t.count, t.available)]
        elif partition < t.count:
            p = t.parts[partition]
        else:
            raise KafkaException(KafkaError(
                KafkaError._UNKNOWN_PARTITION,
                f"{t.name} has no partition {partition} ({t.count} partitions)"))
        b = p.open
        if b is None:
            b = self._open(p, size)
        elif b.count and b.builder.size_in_bytes + size > self.batch_limit:
            self._close(p, b)
            b = self._open(p, size)
        b.append(value, key, timestamp or None, headers)
        # Counted at once, open batch or not: queue.buffering.max.kbytes bounds every
        # message in the producer, as librdkafka's does.
        b.counted += size
        self.msg_bytes += size
        if on_delivery is not None:
            cbs = b.cbs
            if cbs is None:
                cbs = b.cbs = []
            d = DeliveryCallback.__new__(DeliveryCallback)
            d.index = b.count
            d.callback = on_delivery
            d.key = key
            d.value = value
            d.headers = headers
            d.timestamp = timestamp
            cbs.append(d)
        b.count += 1
        if b.count >= self.batch_num:
            self._close(p, b)
        return 0


cdef inline double _clock() noexcept:
    # time.monotonic()'s clock, without a Python call (produce() looks at it often)
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int _refuse_checked(refusal, value, key, partition, timestamp, on_delivery, callback,
                         headers) except -1:
    """produce() while refused (a fatal error, no transaction): the arguments' types
    first, as confluent-kafka converts them before librdkafka refuses the message
    (TypeError before _STATE or _FATAL; their values, sizes and ranges are not looked
    at), then ``KafkaException(refusal())``. Off the hot path: only when refused."""
    if value is not None:
        as_bytes(value, "value")
    if key is not None:
        as_bytes(key, "key")
    try:
        _partition_arg(partition)
        if timestamp is not _NOW:
            _timestamp_arg(timestamp)
    except KafkaException:
        pass  # a value out of range: librdkafka's refusal comes first
    if callback is not None:
        if not callable(callback):
            raise not_callable("callback", callback)
    elif on_delivery is not None and not callable(on_delivery):
        raise not_callable("on_delivery", on_delivery)
    if headers is not None:
        normalize_headers(headers)
    raise KafkaException(refusal())


cdef inline int _partition_arg(partition) except -2:
    # A C int: TypeError for what is not an integer, OverflowError beyond 32 bits. The
    # default -1 (one cached int object) skips the conversion, whose error check costs a
    # PyErr_Occurred() call for exactly that value.
    cdef int part
    if partition is _PARTITIONER:
        return -1
    if PyLong_CheckExact(partition):
        part = partition
    else:
        part = _index(partition)
    if part < -1:
        raise invalid_partition(part)
    return part


cdef object _timestamp_arg(timestamp):
    # The timestamp as a plain int, checked (_check_timestamp): any integer Python can
    # index with (numpy integers, ...), as confluent-kafka's C argument parsing takes.
    if not PyLong_CheckExact(timestamp):
        try:
            timestamp = _index(timestamp)
        except TypeError:
            raise TypeError(f"timestamp must be an int (milliseconds), not "
                            f"{type(timestamp).__name__}") from None
    _check_timestamp(timestamp)
    return timestamp


cdef int _check_timestamp(timestamp) except -1:
    # Refused before anything is queued: the codec takes no time below -1, and -1 (no
    # timestamp) is not a time either; 0 stands for "now" (librdkafka's meaning).
    cdef long long ms
    if not isinstance(timestamp, int):
        raise TypeError(f"timestamp must be an int (milliseconds), not "
                        f"{type(timestamp).__name__}")
    try:
        ms = timestamp
    except OverflowError:
        ms = -1
    if ms < 0:
        raise KafkaException(KafkaError(
            KafkaError._INVALID_ARG,
            f"invalid timestamp {timestamp}: milliseconds since the epoch (0 to 2**63-1), "
            f"or 0 for now"))
    return 0


cdef inline object _field(dict m, str name):
    cdef PyObject* found = PyDict_GetItem(m, name)
    return None if found == NULL else <object>found


cdef object _message_bytes(obj, str what, Py_ssize_t i):
    # A message dict's value or key as bytes, or TypeError in confluent-kafka's words
    # (with the type it got)
    try:
        return as_bytes(obj, what)
    except TypeError:
        raise TypeError(f"Message {what} at index {i} must be bytes or str, not "
                        f"{type(obj).__name__}") from None


cdef object _queue_full():
    # produce_batch()'s per-message error, in confluent-kafka's words
    return KafkaError(KafkaError._QUEUE_FULL, "Message failed: Local: Queue full")


def check_timestamp(timestamp):
    """The timestamp as a plain int; raises as ``produce()`` does for one that is not an
    integer (TypeError) or is below 0 or beyond 64 bits (KafkaException
    ``_INVALID_ARG``)."""
    return _timestamp_arg(timestamp)


def too_large(Py_ssize_t size, long long message_max):
    """The error for a message (key + value) over ``message.max.bytes``."""
    return KafkaException(KafkaError(
        KafkaError.MSG_SIZE_TOO_LARGE,
        f"Message of {size} bytes is larger than message.max.bytes ({message_max})"))


@cython.final
cdef class Columns:
    """``produce_batch()``'s columnar arguments checked for the codec: ``values`` and
    ``keys`` (None: no keys) as lists of bytes or None (str UTF-8 encoded; the caller's
    list itself when it needed no change) or, from pyarrow arrays, both as
    :class:`~kafka_proto.records.BinaryColumn` over the arrays' buffers; the sum of their
    sizes and the largest message (key + value)."""

    cdef readonly object values
    cdef readonly object keys
    cdef readonly Py_ssize_t total
    cdef readonly Py_ssize_t biggest


def to_columns(values, keys=None):
    """Check and convert ``produce_batch(topic, values, keys)``'s columns: TypeError
    naming the first item that is not bytes, str, bytearray, memoryview or None (or a
    pyarrow array that is not of a binary or string type), ValueError when keys and
    values differ in length."""
    cdef Columns c = Columns.__new__(Columns)
    cdef Py_ssize_t i, n, size
    c.values = _column(values, "values")
    n = len(c.values)
    if keys is not None:
        c.keys = _column(keys, "keys")
        if len(c.keys) != n:
            raise ValueError(f"keys and values differ in length ({len(c.keys)} keys, "
                             f"{n} values)")
    if type(c.values) is BinaryColumn or type(c.keys) is BinaryColumn:
        if c.keys is not None and type(c.values) is not type(c.keys):
            # One pyarrow column and one list: the codec encodes from one kind.
            if type(c.values) is BinaryColumn:
                c.values = c.values.to_list()
            else:
                c.keys = c.keys.to_list()
        else:
            c.total = c.values.byte_size + (0 if c.keys is None else c.keys.byte_size)
            c.biggest = c.values.max_row_size(c.keys)
            return c
    for i in range(n):
        value = c.values[i]
        size = 0 if value is None else PyBytes_GET_SIZE(value)
        if c.keys is not None:
            key = c.keys[i]
            if key is not None:
                size += PyBytes_GET_SIZE(key)
        c.total += size
        if size > c.biggest:
            c.biggest = size
    return c


cdef object _column(items, str what):
    # bytes or None items: the list as it is; anything else converted in a copy; a
    # pyarrow array: a BinaryColumn over its buffers.
    cdef list out
    cdef bint own = False
    cdef Py_ssize_t i
    if PyList_CheckExact(items):
        out = <list>items
    elif isinstance(items, (str, bytes, bytearray, memoryview, dict)):
        raise _not_a_list(items, what)
    elif type(items).__module__ == "pyarrow.lib":
        from kafka_client.producer.arrow import binary_column  # pyarrow is optional
        return binary_column(items, what)
    else:
        try:
            out = list(items)
        except TypeError:
            raise _not_a_list(items, what) from None
        own = True
    for i in range(len(out)):
        item = out[i]
        if item is None or PyBytes_CheckExact(item):
            continue
        if not own:
            out = list(out)
            own = True
        try:
            out[i] = as_bytes(item, what)
        except TypeError:  # named here: no index formatted per converted item
            if isinstance(item, dict) and what == "values":
                raise _mixed_messages(items, out, i) from None
            raise TypeError(f"{what}[{i}] must be bytes, str or None, not "
                            f"{type(item).__name__}") from None
    return out


cdef object _not_a_list(items, str what):
    # produce_batch()'s values (confluent-kafka's messages) or keys of a wrong kind
    if what == "values":
        return TypeError(f"messages must be a list, not {type(items).__name__} (a list of "
                         f"message dicts, or of values: bytes, str or None)")
    return TypeError(f"{what} must be a list of bytes, str or None, not "
                     f"{type(items).__name__}")


cdef object _mixed_messages(items, list out, Py_ssize_t i):
    # A message dict among the columnar form's values: confluent-kafka's form given in
    # another container, or a list whose first item is not a dict.
    if not isinstance(items, list):
        return TypeError(f"messages must be a list, not {type(items).__name__} (message "
                         f"dicts are taken in a list)")
    return TypeError(f"Message at index 0 must be a dict, not {type(out[0]).__name__}: the "
                     f"one at index {i} is, and a list holds message dicts or values "
                     f"(bytes, str or None), not both")


def invalid_partition(partition):
    """The error for a partition below -1 (-1 lets the partitioner choose)."""
    return KafkaException(KafkaError(
        KafkaError._INVALID_ARG,
        f"invalid partition {partition}: a partition number, or -1 for the partitioner"))


def not_callable(str what, obj):
    return TypeError(f"{what} must be callable, not {type(obj).__name__}")


def as_bytes(obj, str what):
    """``obj`` as bytes for a key, value or header value: str is UTF-8 encoded."""
    if isinstance(obj, str):
        return obj.encode("utf-8")
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"{what} must be bytes, str or None, not {type(obj).__name__}")


cdef Py_ssize_t headers_size(list headers) except -1:
    """The bytes of normalized headers (keys in UTF-8, values), as message.max.bytes
    counts them. A key that UTF-8 cannot encode is refused here, at produce(), not later
    by the batch's encoder on the I/O thread."""
    cdef Py_ssize_t n = 0
    for k, v in headers:
        try:
            n += PyBytes_GET_SIZE((<str>k).encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ValueError(f"header key {k!r} cannot be encoded as UTF-8: {exc}") from None
        if v is not None:
            n += PyBytes_GET_SIZE(v)
    return n


def normalize_headers(headers):
    """Headers as confluent-kafka takes them: a dict, or a list of (key, value) tuples
    (another container, or items of another kind, are a TypeError as there). A value is
    bytes, str (UTF-8) or None (bytearray and memoryview too, an addition); a key that is
    not a str is sent as ``str(key)``, as confluent-kafka sends it (``b"k"`` as ``"b'k'"``).
    Returns a list of (str, bytes | None), or None when empty."""
    if isinstance(headers, dict):
        items = headers.items()
    elif isinstance(headers, list):
        items = headers
    else:
        raise TypeError("expected headers to be dict or list of (key, value) tuples, not "
                        f"{type(headers).__name__}")
    out = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("Headers are expected to be a list of (key, value) tuples")
        k, v = item
        if not isinstance(k, str):
            k = str(k)
        if v is not None and not isinstance(v, bytes):
            v = as_bytes(v, "header value")
        out.append((k, v))
    return out or None
