"""Shared base classes and helpers for the generated message classes.

Hand-written: the modules in _generated/ (written by tools/gen_messages.py) import it."""
import threading
from collections import namedtuple
from operator import attrgetter
from struct import Struct
from struct import error as StructError
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    Optional,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)
from uuid import UUID

from kafka_proto._wire import Reader, Writer
from kafka_proto.errors import (
    InvalidLengthError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    UnsupportedVersionError,
)

_ZERO_UUID = UUID(int=0)
_new = object.__new__
# What bytes and records fields accept (decoded records are memoryview slices of the input).
Buffer = Union[bytes, bytearray, memoryview]
# Most elements a zero-size-element array may claim (those counts cannot be checked against
# the remaining input, and each element still costs an object).
ZERO_SIZE_ARRAY_LIMIT = 1 << 16


class _Unset:
    __slots__ = ()

    def __repr__(self):
        return "<default>"


# Any: the generated constructors' "not given" default, whatever the field's type.
_UNSET: Any = _Unset()

# One row per field: versions are inclusive bounds (None when never), struct is the element
# or field class for struct types.
FieldSpec = namedtuple(
    "FieldSpec",
    "name type min_version max_version nullable_min nullable_max tag tagged_min tagged_max "
    "ignorable struct",
)
_F = FieldSpec  # (separately: type checkers see no named tuple in a chained assignment)


def _check_version(cls, version):
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(
            f"{cls.__qualname__} has versions {cls.MIN_VERSION}-{cls.MAX_VERSION}, not {version}"
        )


def _absent(obj, name, version):
    raise ProtocolEncodeError(
        f"{type(obj).__qualname__}.{name} has a non-default value but version {version} "
        f"does not have that field"
    )


def _null(obj, name, version):
    raise ProtocolEncodeError(
        f"{type(obj).__qualname__}.{name} is None but version {version} does not allow null"
    )


def _null_on_wire(where, name, version):
    raise ProtocolDecodeError(
        f"{where}.{name} is null on the wire, not allowed in version {version}"
    )


def _tag_size_error(where, tag):
    raise ProtocolDecodeError(f"{where}: tagged field {tag} does not fill its declared size")


def _zero_size_count(n):
    if n < -1:
        raise InvalidLengthError(f"negative array length {n}")
    if n > ZERO_SIZE_ARRAY_LIMIT:
        raise InvalidLengthError(f"array of {n} empty elements exceeds {ZERO_SIZE_ARRAY_LIMIT}")
    return n


# encode_parts() state: (writer, parts, min_size) while a part-wise encode runs here.
_parts = threading.local()


def _write_records(w, value, compact):
    """Write a records field (None = null; non-nullable fields were checked by the caller).

    Inside encode_parts() on its writer, a large enough buffer is not copied: the bytes
    written so far become one part and the buffer itself the next.
    """
    state = getattr(_parts, "active", None)
    if state is not None and state[0] is w and value is not None:
        try:
            view = memoryview(value).cast("B")
        except (TypeError, ValueError):
            view = None  # not a contiguous buffer: copied below like any other
        if view is not None and view.nbytes >= state[2]:
            if compact:
                w.write_uvarint(view.nbytes + 1)
            else:
                w.write_int32(view.nbytes)
            state[1].append(w.getvalue())
            w.clear()
            state[1].append(view)
            return
    if compact:
        w.write_compact_nullable_bytes(value)
    else:
        w.write_nullable_bytes(value)


_PACKERS: Dict[Tuple[int, str], Struct] = {}
_PACKED_SIZE = {"b": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "d": 8}


def _packer(n, code):
    s = _PACKERS.get((n, code))
    if s is None:
        s = Struct(f">{n}{code}")
        if n <= 64:  # cache the common small sizes only
            _PACKERS[(n, code)] = s
    return s


def _read_packed(r, n, code):
    """Read n fixed-size big-endian numbers as a list (one unpack instead of n calls)."""
    if not n:
        return []
    return list(_packer(n, code).unpack(r.read_raw_view(n * _PACKED_SIZE[code])))


def _write_packed(w, values, code):
    """Write fixed-size big-endian numbers (the array length is written by the caller)."""
    if values:
        try:
            w.write_raw(_packer(len(values), code).pack(*values))
        except StructError as exc:
            raise ProtocolEncodeError(
                f"array element out of range or of the wrong type: {exc}"
            ) from exc


def _read_tags(r, n):
    """Read the n fields of a tagged-field section that has no known tags: {tag: bytes}."""
    u = {}
    for _ in range(n):
        tag = r.read_uvarint()
        u[tag] = r.read_raw(r.read_uvarint())
    return u


def _write_tags(w, known, unknown):
    """Write a tagged-field section; known wins over unknown for the same tag."""
    if unknown:
        merged = dict(unknown)
        if known:
            merged.update(known)
    elif known:
        merged = known
    else:
        w.write_uvarint(0)
        return
    w.write_uvarint(len(merged))
    for tag in sorted(merged):
        data = merged[tag]
        w.write_uvarint(tag)
        w.write_uvarint(len(data))
        w.write_raw(data)


T = TypeVar("T", bound="_Struct")
# Per struct class: a function returning its field values (slots) in one C call, for __eq__
# and _is_default; and (that function, the default instance's values) for _is_default.
# The default values are never handed out.
_VALUE_GETTERS: Dict[type, Callable[[Any], Any]] = {}
_DEFAULTS: Dict[type, Tuple[Callable[[Any], Any], Any]] = {}


def _values_getter(cls: Type["_Struct"]) -> Callable[[Any], Any]:
    getter = _VALUE_GETTERS.get(cls)
    if getter is None:
        slots = cls.__slots__
        getter = attrgetter(*slots) if slots else (lambda obj: ())
        _VALUE_GETTERS[cls] = getter
    return getter


class _Struct:
    """Base of every generated struct: equality, repr, encode and decode entry points."""

    __slots__ = ()
    MIN_VERSION: int = 0
    MAX_VERSION: int = 0
    FLEXIBLE_MIN_VERSION: Optional[int] = None
    FIELDS: Tuple[FieldSpec, ...] = ()
    __hash__ = None  # type: ignore[assignment]  # mutable
    if TYPE_CHECKING:
        # Every generated class defines these (its __slots__ hold the field values).
        unknown_tagged_fields: Optional[Dict[int, bytes]]

        def _write(self, w: Writer, version: int) -> None: ...

        @staticmethod
        def _read(r: Reader, version: int) -> Any: ...

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        values = _values_getter(type(self))
        return values(self) == values(other)

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in self.FIELDS]
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def _is_default(self) -> bool:
        # The encoders ask this of every tagged or version-limited struct field: the
        # default values are read once per class, not built again on every call.
        entry = _DEFAULTS.get(type(self))
        if entry is None:
            values = _values_getter(type(self))
            entry = _DEFAULTS[type(self)] = (values, values(type(self)()))
        return entry[0](self) == entry[1]

    def encode(self, version: int) -> bytes:
        """Encode the body (no header) in the given version and return the bytes."""
        w = Writer()
        self.encode_into(w, version)
        return w.getvalue()

    def encode_parts(self, version: int, min_size: int = 4096) -> List[Buffer]:
        """Encode like encode(), as a list of parts whose concatenation is the body.

        Records buffers of at least min_size bytes are not copied: each becomes a part of
        its own (a memoryview of the caller's buffer, which must not change until the parts
        are sent), ready for socket.sendmsg().
        """
        w = Writer()
        parts: List[Buffer] = []
        outer = getattr(_parts, "active", None)
        _parts.active = (w, parts, min_size)
        try:
            self.encode_into(w, version)
        finally:
            _parts.active = outer
        if len(w) or not parts:
            parts.append(w.getvalue())
        return parts

    def encode_into(self, w: Writer, version: int) -> None:
        """Append the encoding to a kafka_proto._wire.Writer."""
        _check_version(type(self), version)
        try:
            self._write(w, version)
        except (OverflowError, TypeError) as exc:
            raise ProtocolEncodeError(
                f"cannot encode {type(self).__qualname__} v{version}: {exc}"
            ) from exc

    @classmethod
    def decode(cls: Type[T], buffer: Buffer, version: int) -> T:
        """Decode a whole buffer (bytes-like); trailing bytes are an error."""
        _check_version(cls, version)
        r = Reader(buffer)
        obj = cls._read(r, version)
        if r.remaining:
            raise ProtocolDecodeError(
                f"{r.remaining} trailing bytes after {cls.__qualname__} v{version}"
            )
        return obj

    @classmethod
    def decode_prefix(cls: Type[T], buffer: Buffer, version: int) -> Tuple[T, int]:
        """Decode the message at the start of ``buffer`` and return it with the number of
        bytes it took; bytes after it are left alone (a Kafka broker ignores bytes after
        a request's fields, and librdkafka 2.x's admin Metadata v12 sends three)."""
        _check_version(cls, version)
        r = Reader(buffer)
        obj = cls._read(r, version)
        return obj, r.position

    @classmethod
    def decode_from(cls: Type[T], r: Reader, version: int) -> T:
        """Decode from a kafka_proto._wire.Reader, leaving it after the message."""
        _check_version(cls, version)
        return cls._read(r, version)


class _Message(_Struct):
    """Base of the top-level classes (requests, responses, headers, data schemas)."""

    __slots__ = ()
    API_KEY: Optional[int] = None
    API_NAME: Optional[str] = None


# --------------------------------------------------------------------------------------
# Fitting a message to a version, and finding its error codes: for a broker (or a test)
# that fills every field and lets the version decide what goes on the wire.

# Per (class, version): (name, default) of the fields to reset (absent from the version,
# not ignorable; the default only compared with, never handed out), fields that may not be
# None in the version, and (name, is_list) of the struct fields whose own plan is not empty.
_FitPlan = Tuple[List[Tuple[str, Any]], List[str], List[Tuple[str, bool]]]
_FIT_PLANS: Dict[Tuple[type, int], _FitPlan] = {}
# Field types that can hold None (the others are numbers and booleans).
_MAY_BE_NONE = ("string", "bytes", "records", "struct", "uuid")


def _in_range(low: Optional[int], high: Optional[int], version: int) -> bool:
    return low is not None and low <= version and (high is None or version <= high)


def _fit_plan(cls: Type[_Struct], version: int) -> _FitPlan:
    key = (cls, version)
    plan = _FIT_PLANS.get(key)
    if plan is None:
        absent: List[Tuple[str, Any]] = []
        not_null: List[str] = []
        nested: List[Tuple[str, bool]] = []
        defaults = cls()
        for f in cls.FIELDS:
            if not _in_range(f.min_version, f.max_version, version):
                if not f.ignorable:
                    absent.append((f.name, getattr(defaults, f.name)))
                continue
            if not _in_range(f.nullable_min, f.nullable_max, version) and (
                    f.type.startswith("[]") or f.type in _MAY_BE_NONE):
                not_null.append(f.name)
            if f.struct is not None and any(_fit_plan(f.struct, version)):
                nested.append((f.name, f.type.startswith("[]")))
        plan = (absent, not_null, nested)
        _FIT_PLANS[key] = plan
    return plan


def fit_to_version(message: Any, version: int) -> Any:
    """Make ``message`` (a generated struct) encodable in ``version`` and return it: the
    fields the version does not have (and whose encoder would refuse a value other than
    the default) go back to their defaults, and None in a field the version does not let
    be null becomes the field's default, in ``message`` and every struct inside it.

    Changes ``message`` in place. The plan for each class and version is worked out once.
    """
    absent, not_null, nested = _fit_plan(type(message), version)
    fresh = None
    for name, default in absent:
        if getattr(message, name) == default:
            continue   # already what the encoder expects
        fresh = fresh or type(message)()
        setattr(message, name, getattr(fresh, name))
    for name in not_null:
        if getattr(message, name) is None:
            fresh = fresh or type(message)()
            setattr(message, name, getattr(fresh, name))
    for struct in _structs_in(message, nested):
        fit_to_version(struct, version)
    return message


def _structs_in(message: Any, fields: List[Tuple[str, bool]]) -> Any:
    """The structs held by ``message``'s struct and struct-array fields ``fields``."""
    for name, is_list in fields:
        value = getattr(message, name)
        if value is None:
            continue
        if is_list:
            yield from value
        else:
            yield value


# Per class: whether it has an error_code field, and (name, is_list) of its struct fields
# that have one somewhere inside.
_ERROR_PATHS: Dict[type, Tuple[bool, List[Tuple[str, bool]]]] = {}


def _error_path(cls: Type[_Struct]) -> Tuple[bool, List[Tuple[str, bool]]]:
    path = _ERROR_PATHS.get(cls)
    if path is None:
        own = any(f.name == "error_code" for f in cls.FIELDS)
        nested = []
        for f in cls.FIELDS:
            if f.struct is not None and f.struct is not cls:
                sub_own, sub_nested = _error_path(f.struct)
                if sub_own or sub_nested:
                    nested.append((f.name, f.type.startswith("[]")))
        path = (own, nested)
        _ERROR_PATHS[cls] = path
    return path


def error_codes(message: Any) -> Set[int]:
    """Every non-zero ``error_code`` field value in ``message`` and the structs inside it
    (a response's errors at every level: top, topic, partition)."""
    found: Set[int] = set()
    _collect_error_codes(message, found)
    return found


def _collect_error_codes(message: Any, found: Set[int]) -> None:
    own, nested = _error_path(type(message))
    if own and message.error_code:
        found.add(message.error_code)
    for struct in _structs_in(message, nested):
        _collect_error_codes(struct, found)
