"""Starting `python -m kafka_client.testing` as a child process, for the tests of its
command line: the process and the `name=value` lines it prints once it serves."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_cli_cluster(args: List[str], **popen_kwargs: Any
                      ) -> Tuple[subprocess.Popen, Dict[str, str]]:
    """Start the cluster's command line with ``args`` and read its ``bootstrap.servers``
    and ``control`` lines. The caller stops the process (it is returned even when those
    lines never come: then the assertion error names the exit)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "kafka_client.testing", *args],
                            stdout=subprocess.PIPE, text=True, env=env, **popen_kwargs)
    lines: Dict[str, str] = {}
    try:
        while len(lines) < 2:
            line = proc.stdout.readline()
            assert line, "the cluster exited"
            name, _, value = line.strip().partition("=")
            lines[name] = value
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, lines
