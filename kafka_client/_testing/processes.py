"""Helper processes of the tests (stunnel, a Kerberos KDC), each started in a session of
its own: wait until one listens, stop its whole process group. Only processes started by
the tests are ever signalled."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import Optional

__all__ = ["wait_listening", "stop_process_group"]


def wait_listening(process: "subprocess.Popen[bytes]", host: str, port: int,
                   timeout: float) -> Optional[str]:
    """Wait until ``host:port`` accepts a connection; None then, else why not (the
    process exited, or the time ran out)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            return f"exited with {process.returncode}"
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return None
        except OSError:
            if time.monotonic() > deadline:
                return f"did not listen on {host}:{port} within {timeout:g} s"
            time.sleep(0.05)


def stop_process_group(process: "subprocess.Popen[bytes]", timeout: float = 5.0) -> None:
    """SIGTERM to the process's group (started with ``start_new_session``), SIGKILL
    after ``timeout`` seconds."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
