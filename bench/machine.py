"""What machine a benchmark ran on, for its report: a figure means little without it."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def describe() -> dict[str, object]:
    """CPU model, core count, Python version and operating system of this machine."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.system(),
        "platform": platform.platform(),
    }
