"""SASL/GSSAPI (Kerberos v5, RFC 4752) through the system's GSS-API library: MIT
Kerberos's ``libgssapi_krb5`` (Debian ``libgssapi-krb5-2``), called with ctypes, the
way librdkafka calls it through Cyrus SASL.

The initiator names the broker ``<sasl.kerberos.service.name>@<broker host>`` (a
host-based service: Kerberos makes it ``kafka/<host>@REALM``) and takes its own
credentials from the default credential cache (``KRB5CCNAME``), which
``sasl.kerberos.kinit.cmd`` fills (:class:`KinitRefresher`). The exchange: context tokens
until the Kerberos context is established (mutual authentication: the broker proves
itself too), then the broker's wrapped offer of security layers, answered with a
wrapped choice of none (Kafka runs no SASL security layer; TLS is its protection).

:class:`AcceptorContext` is the broker's side, used by the test cluster
(``kafka_client.testing``); it takes its key from the default keytab (``KRB5_KTNAME``).

ctypes releases the GIL around each call. The first step, which may ask the KDC for the
broker's service ticket, runs on a helper thread of the connection (``may_block``), so a
slow KDC never holds up the client's other connections.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import re
import subprocess
import threading
from typing import Any, Mapping, Optional

from kafka_client._net.security.sasl import SaslError, SaslMechanism

__all__ = ["GssapiUnavailable", "GssError", "InitiatorContext", "AcceptorContext",
           "GssapiMechanism", "KinitRefresher", "render_kinit_cmd", "available",
           "NO_SECURITY_LAYER"]

_OM_uint32 = ctypes.c_uint32
#: GSS-API status values (RFC 2744)
_COMPLETE = 0
_CONTINUE_NEEDED = 1
_ERROR_BITS = 0xFFFF0000          # calling and routine errors; the low bits are only notes
_GSS_CODE, _MECH_CODE = 1, 2
_MUTUAL_FLAG, _REPLAY_FLAG, _SEQUENCE_FLAG, _INTEG_FLAG = 2, 4, 8, 32
#: RFC 4752: the security layer octet "no security layer"
NO_SECURITY_LAYER = 1


class _Buffer(ctypes.Structure):
    _fields_ = [("length", ctypes.c_size_t), ("value", ctypes.c_void_p)]


class _Oid(ctypes.Structure):
    _fields_ = [("length", _OM_uint32), ("elements", ctypes.c_void_p)]


_OidP = ctypes.POINTER(_Oid)
_BufferP = ctypes.POINTER(_Buffer)
_U32P = ctypes.POINTER(_OM_uint32)
_VoidPP = ctypes.POINTER(ctypes.c_void_p)


class GssapiUnavailable(SaslError):
    """The GSS-API library cannot be loaded here; the message says what to install."""


class GssError(SaslError):
    """A GSS-API call failed; the message has the library's own words."""


_lock = threading.Lock()
_lib: Any = None


def _library() -> Any:
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        name = ctypes.util.find_library("gssapi_krb5") or "libgssapi_krb5.so.2"
        try:
            lib: Any = ctypes.CDLL(name)   # it also carries the two OIDs set below
        except OSError:
            raise GssapiUnavailable(
                "SASL GSSAPI needs the MIT Kerberos GSS-API library (libgssapi_krb5; "
                "Debian/Ubuntu: libgssapi-krb5-2, Fedora: krb5-libs), which is not "
                "installed") from None
        sig = {
            "gss_import_name": [_U32P, _BufferP, _OidP, _VoidPP],
            "gss_init_sec_context": [_U32P, ctypes.c_void_p, _VoidPP, ctypes.c_void_p, _OidP,
                                     _OM_uint32, _OM_uint32, ctypes.c_void_p, _BufferP,
                                     ctypes.POINTER(_OidP), _BufferP, _U32P, _U32P],
            "gss_accept_sec_context": [_U32P, _VoidPP, ctypes.c_void_p, _BufferP,
                                       ctypes.c_void_p, _VoidPP, ctypes.POINTER(_OidP),
                                       _BufferP, _U32P, _U32P, _VoidPP],
            "gss_wrap": [_U32P, ctypes.c_void_p, ctypes.c_int, _OM_uint32, _BufferP,
                         ctypes.POINTER(ctypes.c_int), _BufferP],
            "gss_unwrap": [_U32P, ctypes.c_void_p, _BufferP, _BufferP,
                           ctypes.POINTER(ctypes.c_int), _U32P],
            "gss_display_name": [_U32P, ctypes.c_void_p, _BufferP, ctypes.POINTER(_OidP)],
            "gss_display_status": [_U32P, _OM_uint32, ctypes.c_int, _OidP, _U32P, _BufferP],
            "gss_release_buffer": [_U32P, _BufferP],
            "gss_release_name": [_U32P, _VoidPP],
            "gss_delete_sec_context": [_U32P, _VoidPP, _BufferP],
        }
        for fn, argtypes in sig.items():
            func = getattr(lib, fn)
            func.argtypes = argtypes
            func.restype = _OM_uint32
        lib.hostbased_service = _OidP.in_dll(lib, "GSS_C_NT_HOSTBASED_SERVICE")
        lib.krb5_mech = _OidP.in_dll(lib, "gss_mech_krb5")
        _lib = lib
        return lib


def available() -> Optional[str]:
    """None when GSSAPI can be used here, else why not."""
    try:
        _library()
    except GssapiUnavailable as exc:
        return str(exc)
    return None


def _status_text(lib: Any, code: int, kind: int) -> str:
    texts = []
    context = _OM_uint32(0)
    minor = _OM_uint32(0)
    for _ in range(8):   # the library gives one message per call
        buf = _Buffer()
        if lib.gss_display_status(ctypes.byref(minor), code, kind, None,
                                  ctypes.byref(context), ctypes.byref(buf)) & _ERROR_BITS:
            break
        texts.append(ctypes.string_at(buf.value, buf.length).decode("utf-8", "replace"))
        lib.gss_release_buffer(ctypes.byref(minor), ctypes.byref(buf))
        if not context.value:
            break
    return "; ".join(t for t in texts if t)


def _check(lib: Any, what: str, major: int, minor: ctypes.c_uint32) -> None:
    if major & _ERROR_BITS:
        text = _status_text(lib, major, _GSS_CODE)
        detail = _status_text(lib, minor.value, _MECH_CODE) if minor.value else ""
        raise GssError(f"{what} failed: {text}" + (f" ({detail})" if detail else ""))


def _in(data: bytes) -> "tuple[_Buffer, Any]":
    """An input buffer over ``data`` (and what keeps its memory alive)."""
    holder = ctypes.create_string_buffer(data, len(data))
    return _Buffer(len(data), ctypes.cast(holder, ctypes.c_void_p)), holder


def _out(lib: Any, buf: _Buffer) -> bytes:
    data = ctypes.string_at(buf.value, buf.length) if buf.length else b""
    minor = _OM_uint32(0)
    lib.gss_release_buffer(ctypes.byref(minor), ctypes.byref(buf))
    return data


class _Context:
    """A security context: established by :meth:`step`, then wrap/unwrap."""

    def __init__(self) -> None:
        self._lib = _library()
        self._ctx = ctypes.c_void_p(None)
        self.complete = False

    def wrap(self, data: bytes) -> bytes:
        """``data`` with an integrity check, not encrypted (RFC 4752 asks no more)."""
        lib, minor = self._lib, _OM_uint32(0)
        inp, _keep = _in(data)
        out = _Buffer()
        major = lib.gss_wrap(ctypes.byref(minor), self._ctx, 0, 0, ctypes.byref(inp), None,
                             ctypes.byref(out))
        _check(lib, "gss_wrap", major, minor)
        return _out(lib, out)

    def unwrap(self, data: bytes) -> bytes:
        lib, minor = self._lib, _OM_uint32(0)
        inp, _keep = _in(data)
        out = _Buffer()
        major = lib.gss_unwrap(ctypes.byref(minor), self._ctx, ctypes.byref(inp),
                               ctypes.byref(out), None, None)
        _check(lib, "gss_unwrap", major, minor)
        return _out(lib, out)

    def close(self) -> None:
        if self._ctx.value:
            minor = _OM_uint32(0)
            self._lib.gss_delete_sec_context(ctypes.byref(minor), ctypes.byref(self._ctx),
                                             None)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class InitiatorContext(_Context):
    """The client's side of a Kerberos context with ``service@host``."""

    def __init__(self, service: str, host: str) -> None:
        super().__init__()
        lib, minor = self._lib, _OM_uint32(0)
        self.target = f"{service}@{host}"
        inp, _keep = _in(self.target.encode("utf-8"))
        self._name = ctypes.c_void_p(None)
        major = lib.gss_import_name(ctypes.byref(minor), ctypes.byref(inp),
                                    lib.hostbased_service, ctypes.byref(self._name))
        _check(lib, f"gss_import_name({self.target})", major, minor)

    def step(self, token: bytes) -> bytes:
        """Feed the acceptor's token (empty at first); returns the next token to send."""
        lib, minor = self._lib, _OM_uint32(0)
        inp, _keep = _in(token)
        out = _Buffer()
        flags = _MUTUAL_FLAG | _REPLAY_FLAG | _SEQUENCE_FLAG | _INTEG_FLAG
        major = lib.gss_init_sec_context(
            ctypes.byref(minor), None, ctypes.byref(self._ctx), self._name, lib.krb5_mech,
            flags, 0, None, ctypes.byref(inp) if token else None, None, ctypes.byref(out),
            None, None)
        data = _out(lib, out)
        _check(lib, f"Kerberos authentication to {self.target}: gss_init_sec_context",
               major, minor)
        self.complete = major == _COMPLETE
        return data

    def close(self) -> None:
        super().close()
        if self._name.value:
            minor = _OM_uint32(0)
            self._lib.gss_release_name(ctypes.byref(minor), ctypes.byref(self._name))


class AcceptorContext(_Context):
    """The broker's side: accepts with the default keytab's key; :attr:`initiator` is
    the client's principal once complete."""

    def __init__(self) -> None:
        super().__init__()
        self.initiator = ""

    def step(self, token: bytes) -> bytes:
        lib, minor = self._lib, _OM_uint32(0)
        inp, _keep = _in(token)
        out = _Buffer()
        source = ctypes.c_void_p(None)
        major = lib.gss_accept_sec_context(
            ctypes.byref(minor), ctypes.byref(self._ctx), None, ctypes.byref(inp), None,
            ctypes.byref(source), None, ctypes.byref(out), None, None, None)
        data = _out(lib, out)
        _check(lib, "gss_accept_sec_context", major, minor)
        if source.value:
            name = _Buffer()
            if not lib.gss_display_name(ctypes.byref(minor), source, ctypes.byref(name),
                                        None) & _ERROR_BITS:
                self.initiator = _out(lib, name).decode("utf-8", "replace")
            lib.gss_release_name(ctypes.byref(minor), ctypes.byref(source))
        self.complete = major == _COMPLETE
        return data


class GssapiMechanism(SaslMechanism):
    """SASL GSSAPI (RFC 4752) for one authentication to the broker at ``host``."""

    name = "GSSAPI"
    may_block = True    # the first step may ask the KDC for the broker's ticket

    def __init__(self, service: str, host: str) -> None:
        self._context = InitiatorContext(service, host)
        self._layers_chosen = False

    def initial(self) -> bytes:
        return self._context.step(b"")

    def respond(self, challenge: bytes) -> Optional[bytes]:
        ctx = self._context
        if not ctx.complete:
            # The broker's context token (its half of mutual authentication); once the
            # context is complete with nothing more to send, the answer is empty.
            return ctx.step(challenge)
        if not self._layers_chosen:
            offer = ctx.unwrap(challenge)
            if len(offer) != 4:
                raise SaslError(f"GSSAPI: the broker's security layer offer has "
                                f"{len(offer)} bytes, not 4")
            if not offer[0] & NO_SECURITY_LAYER:
                raise SaslError("GSSAPI: the broker requires a SASL security layer "
                                "(integrity or confidentiality), which Kafka clients do not "
                                "run")
            self._layers_chosen = True
            # No security layer, no maximum message size, no authorization id.
            return ctx.wrap(bytes([NO_SECURITY_LAYER, 0, 0, 0]))
        self.complete = True
        ctx.close()
        return None


# -- the client's Kerberos ticket: sasl.kerberos.kinit.cmd ----------------------------------

#: seconds a kinit command may run
KINIT_TIMEOUT_S = 60.0
_PLACEHOLDER = re.compile(r"%\{([^}]*)\}")


def render_kinit_cmd(conf: Mapping[str, Any]) -> str:
    """``sasl.kerberos.kinit.cmd`` with each ``%{property}`` replaced by the property's
    value, as librdkafka renders it; ValueError naming a property that is not set (the
    default command needs ``sasl.kerberos.keytab``) or unknown."""
    def value(match: "re.Match[str]") -> str:
        name = match.group(1)
        if name not in conf:
            raise ValueError(f'"sasl.kerberos.kinit.cmd": %{{{name}}} names no '
                             f"configuration property")
        v = conf[name]
        if v is None or callable(v):
            raise ValueError(f'"sasl.kerberos.kinit.cmd" uses %{{{name}}}, which is not set '
                             f'(set "{name}", or "sasl.kerberos.min.time.before.relogin" to 0 '
                             f"when the ticket is renewed outside the client)")
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (list, tuple)):
            return ",".join(str(x) for x in v)
        return str(v)
    return _PLACEHOLDER.sub(value, conf["sasl.kerberos.kinit.cmd"] or "")


class KinitRefresher:
    """Runs the rendered kinit command (a shell command, as librdkafka's ``system()``)
    when the client starts and every ``interval`` seconds after, on a timer thread; a
    failure is logged (with the command's output) and the next run tried at the next
    interval, as librdkafka does."""

    def __init__(self, command: str, interval: float, log: Any) -> None:
        self.command = command
        self.interval = interval
        self.log = log
        self.runs = 0
        self.last_error = ""
        self._timer: Optional[threading.Timer] = None
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Run the command now (the first ticket before any connection), then on the
        timer."""
        self.run()
        self._schedule()

    def run(self) -> bool:
        """Run the command once; whether it succeeded."""
        self.runs += 1
        try:
            done = subprocess.run(self.command, shell=True, capture_output=True, text=True,
                                  timeout=KINIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            why = f"did not finish within {KINIT_TIMEOUT_S:g} s"
        except OSError as exc:
            why = str(exc)
        else:
            if done.returncode == 0:
                self.last_error = ""
                self.log.debug("Kerberos ticket refreshed: %s", self.command)
                return True
            output = (done.stderr or done.stdout).strip()
            why = f"exited with code {done.returncode}" + (f": {output}" if output else "")
        self.last_error = why
        self.log.error("Kerberos ticket refresh failed: %s: %s", self.command, why)
        return False

    def _schedule(self) -> None:
        with self._lock:
            if self._closed or self.interval <= 0:
                return
            timer = threading.Timer(self.interval, self._tick)
            timer.daemon = True
            timer.name = "kafka-kinit"
            self._timer = timer
            timer.start()

    def _tick(self) -> None:
        if not self._closed:
            self.run()
            self._schedule()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
