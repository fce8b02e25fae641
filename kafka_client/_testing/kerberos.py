"""A Kerberos realm for the GSSAPI tests: MIT Kerberos's KDC (``krb5kdc``, Debian
``krb5-kdc``; ``kadmin.local`` from ``krb5-admin-server``) started on a free loopback port
with a database, configuration and keytabs in a temporary folder of its own.

:meth:`Kdc.env` gives the variables that point the Kerberos library at this realm
(``KRB5_CONFIG``) and, per principal, at its keytab and credential cache. Nothing
outside the folder is touched; only the KDC started here is ever signalled.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional

from kafka_client._testing.brokers import LOOPBACK, free_port
from kafka_client._testing.processes import stop_process_group, wait_listening

__all__ = ["Kdc", "kdc_unavailable", "REALM"]

REALM = "KAFKA.TEST"
_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def _which(tool: str) -> Optional[str]:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def kdc_unavailable() -> Optional[str]:
    """Why a KDC cannot be started here (None: it can)."""
    missing = [t for t in _TOOLS if _which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (Debian krb5-kdc, krb5-admin-server, "
                f"krb5-user)")
    return None


class Kdc:
    """A running KDC for :data:`REALM`; use as a context manager or call :meth:`stop`."""

    def __init__(self, folder: Optional[str] = None) -> None:
        why = kdc_unavailable()
        if why:
            raise RuntimeError(why)
        self.folder = Path(folder or tempfile.mkdtemp(prefix="kafka-kdc-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.krb5_conf = self.folder / "krb5.conf"
        self.kdc_conf = self.folder / "kdc.conf"
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {REALM}\n"
            " dns_lookup_kdc = false\n dns_lookup_realm = false\n"
            " dns_canonicalize_hostname = false\n rdns = false\n"
            " udp_preference_limit = 1\n"      # TCP: no lost datagrams to wait out
            f" default_ccache_name = FILE:{self.folder}/ccache-default\n"
            "[realms]\n"
            f" {REALM} = {{\n  kdc = {LOOPBACK}:{self.port}\n }}\n"
            "[domain_realm]\n"
            f" {LOOPBACK} = {REALM}\n localhost = {REALM}\n")
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f" kdc_ports = {self.port}\n kdc_tcp_ports = {self.port}\n"
            "[realms]\n"
            f" {REALM} = {{\n"
            f"  database_name = {self.folder}/principal\n"
            f"  key_stash_file = {self.folder}/stash\n"
            f"  acl_file = {self.folder}/kadm5.acl\n"
            "  max_life = 1h\n max_renewable_life = 1d\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{self.folder}/kdc.log\n")
        (self.folder / "kadm5.acl").write_text("")
        self._base_env = dict(os.environ, KRB5_CONFIG=str(self.krb5_conf),
                              KRB5_KDC_PROFILE=str(self.kdc_conf))
        self._run(_which("kdb5_util"), "create", "-s", "-r", REALM, "-P", "master-secret")
        self._process = subprocess.Popen(
            [str(_which("krb5kdc")), "-n", "-r", REALM], env=self._base_env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        why = wait_listening(self._process, LOOPBACK, self.port, 20.0)
        if why is not None:
            log = self.folder / "kdc.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            self.stop()
            raise RuntimeError(f"krb5kdc {why}: {tail}")

    def _run(self, *args: Optional[str]) -> str:
        done = subprocess.run([str(a) for a in args], env=self._base_env, text=True,
                              capture_output=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(str(a) for a in args[:2])} failed: "
                               f"{done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def keytab_path(self, principal: str) -> Path:
        """Where :meth:`add_principal` writes ``principal``'s keytab by default."""
        return self.folder / (principal.replace("/", "_") + ".keytab")

    def add_principal(self, principal: str, keytab: Optional[Path] = None) -> Path:
        """Create ``principal`` (of this realm) with a random key, written to ``keytab``
        (added to it when it exists; default :meth:`keytab_path`); returns the keytab."""
        keytab = keytab or self.keytab_path(principal)
        self._run(_which("kadmin.local"), "-r", REALM, "-q",
                  f"addprinc -randkey {principal}")
        self._run(_which("kadmin.local"), "-r", REALM, "-q",
                  f"ktadd -k {keytab} {principal}")
        return keytab

    def env(self, keytab: Optional[Path] = None, ccache: Optional[str] = None
            ) -> Dict[str, str]:
        """Environment variables for a process of this realm: the configuration, and
        the keytab (``KRB5_KTNAME``, an acceptor's key) and credential cache
        (``KRB5CCNAME``) when given."""
        env = {"KRB5_CONFIG": str(self.krb5_conf)}
        if keytab is not None:
            env["KRB5_KTNAME"] = f"FILE:{keytab}"
        if ccache is not None:
            env["KRB5CCNAME"] = f"FILE:{self.folder}/{ccache}"
        return env

    @contextmanager
    def activated(self, keytab: Optional[Path] = None, ccache: Optional[str] = None
                  ) -> Iterator[Dict[str, str]]:
        """This process's environment set to :meth:`env` (and so the Kerberos library of
        this process and of the processes it starts) until the block ends."""
        env = self.env(keytab, ccache)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def __enter__(self) -> "Kdc":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        stop_process_group(self._process)
        shutil.rmtree(self.folder, ignore_errors=True)
