"""OpenSSL settings Python's ssl module cannot make: ``ssl.sigalgs.list``, ``ssl.providers``
and ``ssl.engine.location`` / ``ssl.engine.id``, made by calling OpenSSL through ctypes.

The one CPython-internals trick of kafka_client, all of it here: the ``SSL_CTX *`` of an
:class:`ssl.SSLContext` is read from the first field after ``PyObject_HEAD`` of CPython's
``PySSLContext``, and OpenSSL's functions are found through the handle of the ``_ssl``
extension module (which links libssl and libcrypto, so dlsym finds them). It is used only
where it was verified (:data:`VERIFIED`: CPython versions, OpenSSL 3, not a free-threaded
build, ``KAFKA_NATIVE_PLAIN`` unset, as for kafka_proto's own internals) and only after a
check on the context itself: OpenSSL's ``SSL_CTX_get_options`` of the pointer read must
equal ``ctx.options``. Otherwise :func:`unavailable_reason` says why, and the client
refuses these properties at construction with that reason (the plain path), rather than
ignore them.
"""
from __future__ import annotations

import ctypes
import os
import platform
import ssl
import sys
import sysconfig
import threading
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["OpenSSLError", "VERIFIED", "unavailable_reason", "set_sigalgs", "load_providers",
           "load_engine"]

#: (major, minor) CPython versions whose Modules/_ssl.c declares PySSLContext with the
#: SSL_CTX pointer right after PyObject_HEAD (each context is checked again at run time)
VERIFIED = {(3, 9), (3, 10), (3, 11), (3, 12), (3, 13)}

#: ssl.h: SSL_CTX_set1_sigalgs_list() is SSL_CTX_ctrl() with this command
_SSL_CTRL_SET_SIGALGS_LIST = 98
#: bytes from the start of a PySSLContext to its SSL_CTX pointer (PyObject_HEAD)
_SSL_CTX_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)


class OpenSSLError(ValueError):
    """An OpenSSL setting could not be made; the message says why."""


def unavailable_reason() -> Optional[str]:
    """Why OpenSSL cannot be reached here (None: it can)."""
    if platform.python_implementation() != "CPython" or sys.version_info[:2] not in VERIFIED \
            or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (f"it is set through OpenSSL directly, verified on CPython "
                f"{min(VERIFIED)[0]}.{min(VERIFIED)[1]}-{max(VERIFIED)[0]}."
                f"{max(VERIFIED)[1]} only (this is {platform.python_implementation()} "
                f"{platform.python_version()})")
    if os.environ.get("KAFKA_NATIVE_PLAIN", "") not in ("", "0"):
        return "it is set through OpenSSL directly, which KAFKA_NATIVE_PLAIN turns off"
    if ssl.OPENSSL_VERSION_INFO < (3,):
        return f"it needs OpenSSL 3 (Python's ssl uses {ssl.OPENSSL_VERSION})"
    return None


_lib: Any = None


def _library() -> Any:
    """libssl and libcrypto as ctypes sees them through the _ssl module."""
    global _lib
    reason = unavailable_reason()
    if reason is not None:
        raise OpenSSLError(reason)
    if _lib is None:
        lib = ctypes.CDLL(ssl._ssl.__file__)  # type: ignore[attr-defined]
        ptr, text, num = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
        for name, restype, argtypes in (
                ("SSL_CTX_get_options", ctypes.c_uint64, [ptr]),
                ("SSL_CTX_ctrl", ctypes.c_long, [ptr, num, ctypes.c_long, ptr]),
                ("SSL_CTX_set_client_cert_engine", num, [ptr, ptr]),
                ("OSSL_PROVIDER_load", ptr, [ptr, text]),
                ("ENGINE_by_id", ptr, [text]),
                ("ENGINE_ctrl_cmd_string", num, [ptr, text, text, num]),
                ("ENGINE_init", num, [ptr]),
                ("ENGINE_free", num, [ptr]),
                ("ENGINE_get_ssl_client_cert_function", ptr, [ptr]),
                ("ERR_get_error", ctypes.c_ulong, []),
                ("ERR_error_string_n", None, [ctypes.c_ulong, text, ctypes.c_size_t])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        _lib = lib
    return _lib


def _errors() -> str:
    """OpenSSL's error queue as text (emptied)."""
    lib = _library()
    texts = []
    while True:
        code = lib.ERR_get_error()
        if not code:
            break
        buf = ctypes.create_string_buffer(256)
        lib.ERR_error_string_n(code, buf, len(buf))
        texts.append(buf.value.decode(errors="replace"))
    return "; ".join(texts) or "no detail from OpenSSL"


def _ssl_ctx(ctx: ssl.SSLContext) -> int:
    """The SSL_CTX pointer of ``ctx``, once checked to be it."""
    lib = _library()
    pointer = ctypes.c_void_p.from_address(id(ctx) + _SSL_CTX_OFFSET).value
    if not pointer or lib.SSL_CTX_get_options(pointer) != ctx.options:
        raise OpenSSLError("it is set through OpenSSL directly, and the SSL_CTX of Python's "
                           "ssl.SSLContext is not where this client expects it")
    return pointer


def set_sigalgs(ctx: ssl.SSLContext, sigalgs: str) -> None:
    """Restrict the signature algorithms ``ctx`` offers and accepts (OpenSSL's list
    syntax, as ``SSL_CTX_set1_sigalgs_list``)."""
    pointer = _ssl_ctx(ctx)
    if _library().SSL_CTX_ctrl(pointer, _SSL_CTRL_SET_SIGALGS_LIST, 0,
                               ctypes.c_char_p(sigalgs.encode())) != 1:
        raise OpenSSLError(f'"{sigalgs}" is not a list of signature algorithms OpenSSL '
                           f"accepts: {_errors()}")


def load_providers(names: str) -> None:
    """Load each OpenSSL provider of the comma-separated ``names`` into OpenSSL's default
    library context: process-wide, and kept loaded."""
    lib = _library()
    for name in (n.strip() for n in names.split(",")):
        if name and not lib.OSSL_PROVIDER_load(None, name.encode()):
            raise OpenSSLError(f'OpenSSL provider "{name}" cannot be loaded: {_errors()}')


#: engines loaded, by (location, engine id): loaded once per process, kept initialised
_engines: Dict[Tuple[str, str], int] = {}
_engines_lock = threading.Lock()


def load_engine(ctx: ssl.SSLContext, location: str, engine_id: str,
                client_certificate: bool) -> None:
    """Load and initialise the OpenSSL engine at ``location`` through OpenSSL's dynamic
    engine, adding it to OpenSSL's list of engines (process-wide; once, then kept); an
    ``engine_id`` other than ``dynamic`` must be the library's engine id. When no client
    certificate is configured otherwise and the engine can supply one
    (``client_certificate``), it does."""
    pointer = _ssl_ctx(ctx)
    lib = _library()
    with _engines_lock:
        engine = _engines.get((location, engine_id))
        if engine is None:
            engine = _engines[(location, engine_id)] = _load_engine(lib, location, engine_id)
    if client_certificate and lib.ENGINE_get_ssl_client_cert_function(engine) \
            and not lib.SSL_CTX_set_client_cert_engine(pointer, engine):
        raise OpenSSLError(f"the OpenSSL engine {location} cannot supply the client "
                           f"certificate: {_errors()}")


def _load_engine(lib: Any, location: str, engine_id: str) -> int:
    engine = lib.ENGINE_by_id(b"dynamic")
    if not engine:
        raise OpenSSLError(f"OpenSSL has no dynamic engine to load {location}: {_errors()}")
    commands: List[Tuple[bytes, Optional[bytes]]] = [(b"SO_PATH", location.encode())]
    if engine_id != "dynamic":
        commands.append((b"ID", engine_id.encode()))
    commands += [(b"LIST_ADD", b"1"), (b"LOAD", None)]
    for command, argument in commands:
        if not lib.ENGINE_ctrl_cmd_string(engine, command, argument, 0):
            lib.ENGINE_free(engine)
            raise OpenSSLError(f"the OpenSSL engine {location} cannot be loaded: "
                               f"{_errors()}")
    if not lib.ENGINE_init(engine):
        lib.ENGINE_free(engine)
        raise OpenSSLError(f"the OpenSSL engine {location} cannot be initialised: "
                           f"{_errors()}")
    return engine
