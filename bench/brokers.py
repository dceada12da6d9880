"""The brokers under test and how to start each one on 127.0.0.1 with a free port and a fresh data dir.

- ``magnetar-fsync``: Magnetar with its default ``fsync_policy = "always"`` (receipt after fsync);
- ``magnetar-nofsync``: Magnetar with ``fsync_policy = "never"`` (receipt after the write to the OS);
- ``pulsar-lite``: the peer, a Rust broker from PyPI (RocksDB storage, metrics endpoint turned off); a
  spec's settings become top-level keys of its TOML config (e.g. ``max_message_size_bytes``).

Magnetar runs either from the installed working tree or from a snapshot of a git ref (``--magnetar-ref``),
so that a benchmark is not disturbed by half-made edits in the tree.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import BrokerProcess, listening_ports
from magnetar.broker_process import parse_listening, standalone_command, toml_value, write_config

MAGNETAR = "magnetar"
PEER = "pulsar-lite"
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BrokerSpec:
    name: str  # the column in the report
    kind: str  # MAGNETAR or PEER
    settings: dict[str, object] = field(default_factory=dict)
    about: str = ""


SPECS = {
    "magnetar-fsync": BrokerSpec(
        "magnetar-fsync", MAGNETAR, {"fsync_policy": "always"}, "Magnetar, fsync_policy = always (default)"
    ),
    "magnetar-nofsync": BrokerSpec(
        "magnetar-nofsync", MAGNETAR, {"fsync_policy": "never"}, "Magnetar, fsync_policy = never"
    ),
    PEER: BrokerSpec(PEER, PEER, {}, "pulsar-lite (the peer), defaults, metrics endpoint off"),
}


def peer_installed() -> bool:
    return importlib.util.find_spec("pulsar_lite") is not None


def peer_binary() -> str:
    from pulsar_lite.binary_finder import find_pulsar_lite_binary

    return find_pulsar_lite_binary()


# -- Magnetar's source: the working tree or a snapshot of a ref ----------------------------------------------


@dataclass(frozen=True)
class MagnetarSource:
    """Where the broker's code comes from: ``src_dir`` goes first on PYTHONPATH (None: the installed tree)."""

    src_dir: Path | None
    commit: str
    dirty: bool

    @staticmethod
    def working_tree() -> MagnetarSource:
        commit = _git("rev-parse", "HEAD")
        dirty = bool(_git("status", "--porcelain", "--", "src"))
        return MagnetarSource(None, commit, dirty)

    @staticmethod
    def snapshot(ref: str, into: Path) -> MagnetarSource:
        """``git archive`` of ``ref`` unpacked into ``into``; its ``src`` is what the broker imports."""
        commit = _git("rev-parse", ref)
        into.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", commit, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        # Compiled now, as an installed package is: with PYTHONDONTWRITEBYTECODE set no start would
        # keep its bytecode, and every start-up measured would compile the sources (0.25 CPU s).
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "src")], check=True)
        return MagnetarSource(into / "src", commit, False)

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.src_dir is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.src_dir), env.get("PYTHONPATH")]))
        return env

    def version(self) -> str:
        out = subprocess.run(
            [sys.executable, "-c", "import magnetar; print(magnetar.__version__)"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"{out} ({self.commit[:10]}{', uncommitted changes' if self.dirty else ''})"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def peer_version() -> str:
    return importlib.metadata.version("pulsar-lite")


# -- starting one --------------------------------------------------------------------------------------------


def make_process(spec: BrokerSpec, workdir: Path, source: MagnetarSource) -> BrokerProcess:
    """A not yet started broker process for ``spec`` with its data and log in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    if spec.kind == MAGNETAR:
        return _magnetar(spec, workdir, source)
    return _peer(spec, workdir)


def _magnetar(spec: BrokerSpec, workdir: Path, source: MagnetarSource) -> BrokerProcess:
    config = write_config(workdir / "magnetar.toml", spec.settings)
    cmd = standalone_command(workdir / "data", config=config, python=sys.executable)
    return BrokerProcess(spec.name, cmd, workdir / "broker.log", _port_from_log, source.env(), workdir)


def _port_from_log(broker: BrokerProcess) -> int | None:
    listening = parse_listening(broker.log_tail(100_000))
    return listening.port if listening else None


def _peer(spec: BrokerSpec, workdir: Path) -> BrokerProcess:
    config = workdir / "pulsar-lite.toml"
    top = "".join(f"{key} = {toml_value(value)}\n" for key, value in spec.settings.items())
    config.write_text(top + "[metrics]\nenabled = false\n")
    (workdir / "data").mkdir(exist_ok=True)
    cmd = [
        peer_binary(),
        "--config",
        str(config),
        "--addr",
        "127.0.0.1:0",
        "--db-path",
        str(workdir / "data" / "db"),
        "--log-level",
        "warn",
    ]
    return BrokerProcess(spec.name, cmd, workdir / "broker.log", _port_from_proc, dict(os.environ), workdir)


def _port_from_proc(broker: BrokerProcess) -> int | None:
    """The peer does not log the port that ``:0`` picked: read its listening socket from /proc."""
    try:
        ports = [port for ip, port in listening_ports(broker.pid) if ip == "127.0.0.1"]
    except OSError:
        return None
    return ports[0] if len(ports) == 1 else None
