"""``python -m kafka_client.testing``: run a test cluster in the foreground.

    python -m kafka_client.testing --brokers 3 --topic orders:6:3 \\
        --broker-config min.insync.replicas=2 --control-port 19000

prints the bootstrap servers and runs until Ctrl-C (or SIGTERM). With
``--control-port``, tests in another process drive it with
``Cluster.attach("127.0.0.1:19000")`` (faults, leader moves, broker stops).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import tempfile
from typing import Dict, List, Optional


def _pairs(values: List[str], sep: str, what: str) -> Dict[str, str]:
    out = {}
    for item in values:
        key, found, value = item.partition(sep)
        if not found or not key:
            raise SystemExit(f"{what}: expected NAME{sep}VALUE, got {item!r}")
        out[key] = value
    return out


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def _port_list(text: str) -> List[int]:
    return [_port(p.strip()) for p in text.split(",") if p.strip()]


def _log_level(text: str) -> str:
    if not isinstance(logging.getLevelName(text.upper()), int):
        raise argparse.ArgumentTypeError(f"{text!r} is not a logging level (DEBUG, INFO, "
                                         "WARNING, ERROR, CRITICAL)")
    return text.upper()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_client.testing",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--ports", default=[], type=_port_list,
                        help="comma separated listener ports, one per broker (default: free)")
    parser.add_argument("--advertised-ports", default=[], type=_port_list,
                        help="comma separated ports given to clients in Metadata answers, "
                             "one per broker (a TLS terminator in front; default: --ports)")
    parser.add_argument("--racks", default="",
                        help="comma separated broker.rack values, one per broker (empty: "
                             "no rack for that broker), e.g. a,b,c")
    parser.add_argument("--data-dir", help="keep the logs here (default: a temporary dir)")
    parser.add_argument("--broker-config", action="append", default=[], metavar="NAME=VALUE",
                        help="a Kafka broker property, e.g. auto.create.topics.enable=false")
    parser.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                        help="a SASL user (with --broker-config sasl.enabled.mechanisms=...)")
    parser.add_argument("--authorizer", action="store_true",
                        help="enforce ACLs (Kafka's StandardAuthorizer, no ACL: refused)")
    parser.add_argument("--super-user", action="append", default=[], metavar="PRINCIPAL",
                        help="a principal every ACL check lets through, e.g. User:admin")
    parser.add_argument("--topic", action="append", default=[],
                        metavar="NAME[:PARTITIONS[:REPLICATION]]", help="create a topic")
    parser.add_argument("--control-port", type=_port,
                        help="serve the control channel on this loopback port (0: any)")
    parser.add_argument("--log-level", default="INFO", type=_log_level)
    args = parser.parse_args(argv)

    from kafka_client.testing._server import ClusterServer, ControlError, serve_control_port
    from kafka_client.testing._controller import ControllerError

    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(message)s")
    broker_config = _pairs(args.broker_config, "=", "--broker-config")
    users = _pairs(args.user, ":", "--user")
    racks = [r.strip() or None for r in args.racks.split(",")] if args.racks else None
    own_dir = args.data_dir is None
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kafka-test-cluster-")
    server = None
    try:
        try:
            server = ClusterServer(args.brokers, data_dir, broker_config, args.ports, users,
                                   advertised_ports=args.advertised_ports, racks=racks,
                                   authorizer=args.authorizer, super_users=args.super_user)
            server.start()
            for spec in args.topic:
                name, _, rest = spec.partition(":")
                partitions, _, rf = rest.partition(":")
                server.controller.create_topic(name, int(partitions or 1), int(rf or -1))
            control_port = None
            if args.control_port is not None:
                control_port = serve_control_port(server, args.control_port)
        except (ValueError, OSError, ControlError, ControllerError) as exc:
            print(f"cannot start the cluster: {exc}", file=sys.stderr)
            if server is not None:
                server.shutdown()
            return 1
        bootstrap = ",".join(f"{b.host}:{b.port}" for b in server.brokers.values())
        print(f"bootstrap.servers={bootstrap}", flush=True)
        if control_port is not None:
            print(f"control=127.0.0.1:{control_port}", flush=True)
        print(f"data dir: {data_dir}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
        try:
            server.loop.run()
        except KeyboardInterrupt:
            server.shutdown()
    finally:
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
