"""A broker on a small filesystem of its own, to fill up: a real "No space left on device".

A tmpfs of a few MiB is mounted over the broker's data directory in a private user and mount
namespace (``unshare -rm``: no root needed), held open by a holder process so that the data
outlives a broker restart. Brokers run inside that namespace through ``nsenter`` (the network
namespace is the host's, so 127.0.0.1 works). The test reaches the mount through
``/proc/<holder>/root``, where it adds and removes a filler file.

Needs util-linux's ``unshare`` and ``nsenter`` and unprivileged user namespaces: without them
``SmallDisk.start`` fails saying so (a full-disk test must not pass by not running).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.interop.conftest import BrokerProcess

MOUNTED = "mounted"
_CHUNK = b"\0" * (1024 * 1024)


class SmallDiskUnavailable(RuntimeError):
    """This machine cannot give a test a small filesystem of its own (see the module docstring)."""


class SmallDisk:
    """A ``size_bytes`` tmpfs at ``mountpoint``, seen by processes started through ``python``."""

    def __init__(self, workdir: Path, mountpoint: Path, size_bytes: int) -> None:
        self.workdir = workdir
        self.mountpoint = mountpoint
        self.size_bytes = size_bytes
        self.holder: subprocess.Popen[bytes] | None = None
        self.python = str(workdir / "python-in-small-disk")

    def start(self) -> SmallDisk:
        missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
        if missing:
            raise SmallDiskUnavailable(f"{' and '.join(missing)} not found (util-linux)")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        script = f'mount -t tmpfs -o size={self.size_bytes} tmpfs "$0" && echo {MOUNTED} && exec sleep 3600'
        self.holder = subprocess.Popen(
            ["unshare", "-rm", "sh", "-c", script, str(self.mountpoint)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().decode(errors="replace").strip()
        if line != MOUNTED:
            self.close()
            assert self.holder.stderr is not None
            raise SmallDiskUnavailable(
                "cannot mount a tmpfs in a user+mount namespace (unshare -rm):"
                f" {self.holder.stderr.read().decode(errors='replace').strip()}"
            )
        wrapper = Path(self.python)
        wrapper.write_text(f'#!/bin/sh\nexec nsenter -t {self.holder.pid} -U -m -- "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
        return self

    def path(self, relative: str = "") -> Path:
        """``relative`` inside the small filesystem, as this (outside) process reaches it."""
        assert self.holder is not None
        return Path(f"/proc/{self.holder.pid}/root") / str(self.mountpoint).lstrip("/") / relative

    def free_bytes(self) -> int:
        st = os.statvfs(self.path())
        return st.f_bavail * st.f_frsize

    def fill(self, name: str = "filler", leave: int = 0) -> int:
        """Write zeros to ``name`` until the filesystem is full (or has only ``leave`` bytes free);
        returns the bytes written."""
        written = 0
        with open(self.path(name), "ab", buffering=0) as f:
            chunk = _CHUNK
            while leave:
                room = self.free_bytes() - leave
                if room <= 0:
                    return written
                written += f.write(chunk[: min(len(chunk), room)])
            while True:
                try:
                    written += f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return written
                    chunk = chunk[: len(chunk) // 2]

    def unfill(self, name: str = "filler") -> None:
        self.path(name).unlink()

    def broker(self, workdir: Path, config: dict[str, object] | None = None) -> BrokerProcess:
        """A broker (not started) whose data directory is this filesystem's mount point."""
        broker = BrokerProcess(workdir, config)
        broker.python = self.python
        if broker.data_dir != self.mountpoint:
            raise ValueError(f"mount the small disk at {broker.data_dir}, not {self.mountpoint}")
        return broker

    def close(self) -> None:
        """End the holder (the filesystem goes with the last process inside it)."""
        if self.holder is not None and self.holder.poll() is None:
            self.holder.send_signal(signal.SIGKILL)
            self.holder.wait(10)
