"""What the end-to-end benchmarks report about the machine and the broker they ran on."""
from __future__ import annotations

import os
import platform
import subprocess
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("?" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def machine() -> str:
    """System, architecture, CPU count and model."""
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu_model()})"


def broker_version(broker: Any) -> str:
    """The broker binary's own version line, its kind and its storage."""
    cmd = [broker.binary] if isinstance(broker.binary, str) else list(broker.binary)
    storage = "memory storage" if broker.kind == "tansu" else "disk"
    try:
        r = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{broker.kind} (version unknown: {e})"
    text = [ln for ln in (r.stdout + r.stderr).splitlines()
            if ln.strip() and "GLIBC" not in ln]
    return f"{text[-1].strip() if text else '?'} ({broker.kind}, {storage})"
