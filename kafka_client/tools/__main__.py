"""``python -m kafka_client.tools <command> ...``"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from kafka_client.tools import dump_log


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_client.tools")
    commands = parser.add_subparsers(dest="command", required=True)
    dump_log.add_arguments(commands.add_parser(
        "dump-log", help="print the batches and records of a segment file",
        description=dump_log.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    if args.command == "dump-log":
        return dump_log.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
