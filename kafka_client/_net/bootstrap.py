"""Broker addresses: resolve a ``(host, port)`` to every socket address it names.

``bootstrap.servers`` is parsed by :func:`kafka_client.config.parse_bootstrap_servers`;
this module turns each entry into the list of addresses a connection tries in turn (a
name such as ``localhost`` often gives both ``::1`` and ``127.0.0.1``, and only one of
them may be listening).
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Any, Callable, List, Optional, Tuple

__all__ = ["Address", "resolve", "is_ip_literal", "canonical_names"]

#: ``(family, sockaddr)`` as socket.connect() wants it.
Address = Tuple[int, tuple]

_FAMILIES = {"any": socket.AF_UNSPEC, "v4": socket.AF_INET, "v6": socket.AF_INET6}


def is_ip_literal(host: str) -> bool:
    """True for an IPv4 or IPv6 address written out (no name lookup needed)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def resolve(host: str, port: int, family: str = "any",
            resolver: Optional[Callable[[str, int], Any]] = None) -> List[Address]:
    """Every TCP address of ``host:port``, in resolver order, without duplicates.

    ``family`` is ``broker.address.family`` (``any``, ``v4``, ``v6``). ``resolver(host,
    port)`` (the ``resolve_cb`` property) replaces ``socket.getaddrinfo``: it returns
    getaddrinfo-shaped tuples, of which those of other families are left out. Raises
    ``OSError`` (``socket.gaierror``) when the name does not resolve, ``ValueError`` when
    the resolver's answer is not getaddrinfo-shaped. This blocks in the resolver, so the
    I/O thread calls it only when a connection actually starts.
    """
    fam = _FAMILIES.get(family, socket.AF_UNSPEC)
    if resolver is None:
        infos = socket.getaddrinfo(host, port, fam, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    else:
        infos = resolver(host, port)
    out: List[Address] = []
    seen = set()
    try:
        for af, _type, _proto, _canon, sockaddr in infos:
            if fam != socket.AF_UNSPEC and af != fam:
                continue
            key = (af, tuple(sockaddr[:2]))
            if key in seen:
                continue
            seen.add(key)
            out.append((af, tuple(sockaddr)))
    except (TypeError, ValueError):
        raise ValueError(f"resolve_cb returned {infos!r}, not a list of socket.getaddrinfo() "
                         f"tuples (family, type, proto, canonname, sockaddr)") from None
    if not out:
        raise socket.gaierror(socket.EAI_NONAME, f"no {family} address for {host}")
    return out


def canonical_names(host: str, port: int, family: str = "any",
                    resolver: Optional[Callable[[str, int], Any]] = None) -> List[str]:
    """``client.dns.lookup=resolve_canonical_bootstrap_servers_only`` (KIP-235), as
    librdkafka does it: the name of each address of ``host`` by reverse lookup (an
    address without one stays numeric), in resolver order, without duplicates. A
    Kerberos client behind a DNS alias then asks for the brokers' own service
    principals. ``[host]`` when the name does not resolve (connecting reports that)."""
    try:
        addresses = resolve(host, port, family, resolver)
    except (OSError, ValueError):
        return [host]
    names: List[str] = []
    for _family, sockaddr in addresses:
        try:
            name, _service = socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)
        except OSError:
            name = str(sockaddr[0])
        if name not in names:
            names.append(name)
    return names or [host]
