"""TLS test helpers: certificates made on the spot (``openssl`` command) and stunnel, a
TLS terminator no one here wrote, in front of a plaintext broker.

* :func:`make_certificates` writes a CA, a server certificate for ``127.0.0.1`` and
  ``localhost``, a client certificate (for mutual TLS; its key also encrypted and as a
  PKCS#12 keystore), and a second, unrelated CA (for "unknown CA" cases).
* :class:`Stunnel` runs ``stunnel`` (Debian package stunnel4) accepting TLS on a free
  loopback port and forwarding to the broker; ``verify_clients=True`` requires a client
  certificate signed by the CA.
* :class:`TlsTansu` is a Tansu broker that advertises the stunnel port, so every
  connection the client opens after bootstrap goes through TLS too.
* :class:`TlsEndpoints` starts the set the TLS tests use: a Tansu behind server-only TLS,
  one behind mutual TLS, and stunnels presenting a certificate for another name and one
  from an unknown CA.

Only processes started here are ever signalled.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence

from kafka_client._testing.brokers import LOOPBACK, TansuBroker, free_port
from kafka_client._testing.processes import stop_process_group, wait_listening

__all__ = ["Certificates", "make_certificates", "stunnel_binary", "Stunnel", "TlsTansu",
           "create_topic_plaintext", "TlsEndpoints",
           "KEY_PASSWORD"]

#: Passphrase of the encrypted copy of the client key and of the PKCS#12 keystore.
KEY_PASSWORD = "client-secret"


@dataclass(frozen=True)
class Certificates:
    """Paths of the files :func:`make_certificates` wrote (PEM unless said)."""

    folder: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path  # protected with KEY_PASSWORD
    client_p12: Path            # PKCS#12 with KEY_PASSWORD
    other_ca: Path              # a CA that signed nothing used here
    other_server_cert: Path     # signed by other_ca
    other_server_key: Path
    wrong_name_cert: Path       # signed by ca, for broker.invalid only
    wrong_name_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: "
                           f"{proc.stderr.decode(errors='replace')}")


def _ca(folder: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)


def _signed(folder: Path, name: str, ca: str, cn: str, ext: Sequence[str]) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)
    extfile = folder / f"{name}.ext"
    extfile.write_text("\n".join(ext) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-extfile", extfile.name, "-out", f"{name}.pem",
             cwd=folder)


def make_certificates(folder: Optional[str] = None,
                      server_names: Sequence[str] = ("127.0.0.1", "localhost")) -> Certificates:
    """Write a fresh CA, server and client certificates into ``folder`` (a new temporary
    folder when None). The server certificate names ``server_names`` (IPs and DNS
    names) as subject alternative names."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    out = Path(folder or tempfile.mkdtemp(prefix="kafka-tls-"))
    out.mkdir(parents=True, exist_ok=True)
    _ca(out, "ca")
    _ca(out, "other-ca")
    sans = ",".join(("IP:" if _is_ip(n) else "DNS:") + n for n in server_names)
    server_ext = [f"subjectAltName={sans}", "extendedKeyUsage=serverAuth"]
    _signed(out, "server", "ca", "kafka-test-broker", server_ext)
    _signed(out, "other-server", "other-ca", "kafka-test-broker", server_ext)
    _signed(out, "wrong-name", "ca", "broker.invalid",
            ["subjectAltName=DNS:broker.invalid", "extendedKeyUsage=serverAuth"])
    _signed(out, "client", "ca", "kafka-test-client", ["extendedKeyUsage=clientAuth"])
    _openssl("pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
             "-out", "client-encrypted.key", cwd=out)
    _openssl("pkcs12", "-export", "-in", "client.pem", "-inkey", "client.key",
             "-certfile", "ca.pem", "-passout", f"pass:{KEY_PASSWORD}",
             "-out", "client.p12", cwd=out)
    return Certificates(out, out / "ca.pem", out / "server.pem", out / "server.key",
                        out / "client.pem", out / "client.key", out / "client-encrypted.key",
                        out / "client.p12", out / "other-ca.pem", out / "other-server.pem",
                        out / "other-server.key", out / "wrong-name.pem",
                        out / "wrong-name.key")


def _is_ip(name: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in name else socket.AF_INET, name)
    except OSError:
        return False
    return True


def stunnel_binary() -> Optional[str]:
    """The stunnel command (Debian: stunnel4), or None when it is not installed."""
    return shutil.which("stunnel4") or shutil.which("stunnel")


class Stunnel:
    """stunnel accepting TLS on ``127.0.0.1:port`` (a free one unless given) and forwarding
    plaintext to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, cert: Path, key: Path, *,
                 port: Optional[int] = None, ca: Optional[Path] = None,
                 verify_clients: bool = False) -> None:
        binary = stunnel_binary()
        if binary is None:
            raise FileNotFoundError("stunnel is not installed (Debian package stunnel4)")
        self.binary = binary
        self.host = LOOPBACK
        self.port = port or free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="kafka-stunnel-"))
        self.log_path = self.folder / "stunnel.log"
        lines = [
            "foreground = yes",
            "pid =",
            "debug = 4",
            f"output = {self.log_path}",
            "[kafka]",
            f"accept = {self.host}:{self.port}",
            f"connect = {target_host}:{target_port}",
            f"cert = {cert}",
            f"key = {key}",
        ]
        if verify_clients:
            if ca is None:
                raise ValueError("verify_clients needs the CA that signs client certificates")
            lines += [f"CAfile = {ca}", "verifyChain = yes", "requireCert = yes"]
        self.config_path = self.folder / "stunnel.conf"
        self.config_path.write_text("\n".join(lines) + "\n")
        self.process: Optional[subprocess.Popen] = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> "Stunnel":
        self.process = subprocess.Popen(
            [self.binary, str(self.config_path)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        why = wait_listening(self.process, self.host, self.port, timeout)
        if why is None:
            return self
        self.stop()
        raise RuntimeError(f"stunnel {why}: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None:
            stop_process_group(proc)

    def cleanup(self) -> None:
        if self.process is None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Stunnel":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()


class TlsTansu(TansuBroker):
    """Tansu that advertises ``advertised_port`` (the stunnel in front of
    it) in metadata while listening in plaintext on its own port. ``authentication``
    starts it with ``--authentication`` (SASL/SCRAM checked against users it cannot be
    given: every login fails; see docs/security.md)."""

    def __init__(self, advertised_port: Optional[int] = None, authentication: bool = False,
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.advertised_port = advertised_port  # None: its own port
        self.authentication = authentication

    def command(self) -> Sequence[str]:
        listen = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port or self.port}"
        cmd = [self.binary, "broker", "--listener-url", listen,
               "--advertised-listener-url", advertised, "--storage-engine", "memory://tansu/"]
        return cmd + (["--authentication"] if self.authentication else [])

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0,
                     config: Optional[dict] = None) -> None:
        """Create a topic through the plaintext port (metadata names the TLS port, which
        the base class's admin client would then need TLS settings for)."""
        create_topic_plaintext(self.host, self.port, name, partitions, timeout, config)


def create_topic_plaintext(host: str, port: int, name: str, partitions: int = 1,
                           timeout: float = 10.0, config: Optional[dict] = None) -> None:
    """CreateTopics on one broker's plaintext port, then wait for metadata to show it."""
    from kafka_client._testing.blocking import BlockingConnection
    from kafka_proto.errors import ErrorCode
    from kafka_proto.messages import CreateTopicsRequest, MetadataRequest

    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=str(v))
                 for k, v in (config or {}).items()])
    with BlockingConnection(host, port, timeout=timeout) as conn:
        resp = conn.request(CreateTopicsRequest(topics=[topic],
                                                timeout_ms=int(timeout * 1000)))
        code = resp.topics[0].error_code
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"CreateTopics {name}: error {ErrorCode(code).name}")
        deadline = time.monotonic() + timeout
        while True:
            md = conn.request(MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=name)]))
            found = [t for t in md.topics if t.name == name and t.error_code == ErrorCode.NONE]
            if found and len(found[0].partitions) == partitions:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name!r} not visible in metadata after create")
            time.sleep(0.05)


class TlsEndpoints:
    """Every TLS endpoint the tests need, started together (see the module docstring):
    ``server_only`` and ``mutual`` (each a :class:`TlsTansu` with its stunnel),
    ``wrong_name`` and ``unknown_ca`` (stunnels in front of ``server_only``'s broker).
    ``certs`` are the files. ``stop()`` stops all."""

    def __init__(self) -> None:
        self.certs = make_certificates()
        self._stunnels: list = []
        self._brokers: list = []
        c = self.certs
        try:
            self.server_only, self.server_only_broker = self._tansu_behind_tls(False)
            self.mutual, self.mutual_broker = self._tansu_behind_tls(True)
            target = self.server_only_broker
            self.wrong_name = self._stunnel(target, c.wrong_name_cert, c.wrong_name_key)
            self.unknown_ca = self._stunnel(target, c.other_server_cert, c.other_server_key)
        except BaseException:
            self.stop()
            raise

    def _stunnel(self, broker: TansuBroker, cert: Path, key: Path, port: Optional[int] = None,
                 verify_clients: bool = False) -> Stunnel:
        st = Stunnel(broker.host, broker.port, cert, key, port=port, ca=self.certs.ca,
                     verify_clients=verify_clients)
        self._stunnels.append(st)
        return st.start()

    def _tansu_behind_tls(self, verify_clients: bool) -> "tuple[Stunnel, TlsTansu]":
        port = free_port()
        broker = TlsTansu(port)
        self._brokers.append(broker)
        broker.start()
        st = self._stunnel(broker, self.certs.server_cert, self.certs.server_key, port,
                           verify_clients)
        return st, broker

    def conf(self, endpoint: Stunnel, **extra: object) -> dict:
        """A client configuration for ``endpoint`` trusting the test CA."""
        conf: Dict[str, object] = {
            "bootstrap.servers": endpoint.bootstrap, "security.protocol": "ssl",
            "ssl.ca.location": str(self.certs.ca)}
        conf.update(extra)
        return conf

    def stop(self) -> None:
        for st in self._stunnels:
            st.stop()
            st.cleanup()
        for b in self._brokers:
            b.stop()
            b.cleanup()
        shutil.rmtree(self.certs.folder, ignore_errors=True)
