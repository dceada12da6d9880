"""Run a Magnetar broker as a child process: ``python -m magnetar standalone``.

The smart-city job, the interop tests and the benchmark all start brokers this way, so the command line,
the TOML config file and the ``listening on`` line that says the broker is ready are known here once.
Nothing here imports the broker (only the standard library): the child runs whatever ``magnetar`` its
interpreter and environment find, which lets the benchmark run a snapshot of a git ref via PYTHONPATH.
A test suite may have brokers forked from a launcher that imported the broker once instead
(``start_from_launcher``, ``broker_launcher``): only where the child would run this interpreter with
this process's environment.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Self

if TYPE_CHECKING:
    from magnetar.broker_launcher import LaunchedProcess, Launcher

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# What ``magnetar standalone`` (magnetar.cli.main) logs once all its ports are open, made by
# ``listening_addresses``: ``listening on pulsar://h:p and http://h:p, data in ...``; with TLS the
# plain addresses are followed by `` (TLS: pulsar+ssl://h:p and https://h:p)``; a port that is off
# (TLS only: broker_service_port_enabled / web_service_port_enabled false) is left out.
LISTENING = re.compile(r"listening on (?P<addresses>[^\n]*)")
ADDRESS = re.compile(
    r"(?<![\w+])(?P<scheme>pulsar|http|pulsar\+ssl|https|mqtts|mqtt)://(?P<host>[^\s/]+?):(?P<port>\d+)"
)


#: The line ``magnetar standalone`` logs when it cannot start (magnetar.cli.standalone): its reason.
CANNOT_START = re.compile(r"cannot start: (?P<reason>[^\n]*)")


#: The variables (``MAGNETAR_<NAME>``, over the config file) that give a start its TLS ports: the
#: command line has no flag for them.
TLS_PORT_VARIABLES = {
    "tls_port": "MAGNETAR_BROKER_SERVICE_PORT_TLS",
    "https_port": "MAGNETAR_WEB_SERVICE_PORT_TLS",
}

#: Holding a freed port against other programs relies on Linux's SO_REUSEADDR (a bound socket that
#: does not listen lets a listener bind beside it); elsewhere the holder would keep the broker out.
HOLDS_PORTS = sys.platform.startswith("linux")

#: Started on first use by ``start_from_launcher(True)`` (a test suite's choice): brokers forked
#: from a process that has imported the broker already (``broker_launcher``).
_launcher: Launcher | None = None
_use_launcher = False


def start_from_launcher(on: bool) -> None:
    """Whether ``BrokerProcess.start`` forks brokers from a launcher that has imported the broker
    (``magnetar.broker_launcher``: about 0.5 s of CPU less per start) where it would run this
    interpreter with this environment; a launcher that fails falls back to a new process."""
    global _use_launcher
    _use_launcher = on


def _launched(argv: list[str], env: Mapping[str, str], log_path: Path) -> LaunchedProcess | None:
    """A broker forked by this process's launcher (started on first use); None if it cannot be."""
    global _launcher
    from magnetar.broker_launcher import Launcher, LauncherError

    try:
        if _launcher is None or not _launcher.alive:
            _launcher = Launcher()
            atexit.register(_launcher.close)
        return _launcher.launch(argv, env, log_path)
    except LauncherError:
        _launcher = None
        return None


class BrokerProcessError(RuntimeError):
    """The broker exited or stayed silent before it listened, or ignored the signal to stop."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        #: Why, in one line: the broker's own ``cannot start:`` reason when it logged one.
        self.reason = reason or message.splitlines()[0]


class Listening(NamedTuple):
    """The addresses from a broker's ``listening on`` line; None for a port the broker does not serve."""

    host: str
    port: int | None
    http_host: str
    http_port: int | None
    #: The pulsar+ssl:// and HTTPS ports; None where the broker serves no TLS there.
    tls_port: int | None = None
    https_port: int | None = None
    #: The MQTT port (``mqtt_port``); None where the broker serves no MQTT.
    mqtt_port: int | None = None
    #: The MQTT-over-TLS port (``mqtts_port``); None where the broker serves none.
    mqtts_port: int | None = None


def listening_addresses(
    host: str,
    port: int | None,
    http_port: int | None,
    tls_port: int | None,
    https_port: int | None,
    mqtt_port: int | None = None,
    mqtts_port: int | None = None,
) -> str:
    """The addresses of the ``listening on`` line: the plain ones, then `` (TLS: ...)``; a port
    that is None is left out. Plain only, the text is what it always was (older parsers read it)."""
    plain = [f"pulsar://{host}:{port}"] if port is not None else []
    plain += [f"http://{host}:{http_port}"] if http_port is not None else []
    plain += [f"mqtt://{host}:{mqtt_port}"] if mqtt_port is not None else []
    tls = [f"pulsar+ssl://{host}:{tls_port}"] if tls_port is not None else []
    tls += [f"https://{host}:{https_port}"] if https_port is not None else []
    tls += [f"mqtts://{host}:{mqtts_port}"] if mqtts_port is not None else []
    if plain and tls:
        return f"{' and '.join(plain)} (TLS: {' and '.join(tls)})"
    return " and ".join(plain or tls)


def parse_listening(log_text: str) -> Listening | None:
    """The addresses a broker's log says it listens on; None before it says so."""
    match = LISTENING.search(log_text)
    if match is None:
        return None
    addresses = match["addresses"].partition(", data in ")[0]
    found = {m["scheme"]: (m["host"], int(m["port"])) for m in ADDRESS.finditer(addresses)}
    if not found:
        return None
    binary = found.get("pulsar") or found.get("pulsar+ssl") or next(iter(found.values()))
    web = found.get("http") or found.get("https") or binary
    return Listening(
        binary[0],
        found["pulsar"][1] if "pulsar" in found else None,
        web[0],
        found["http"][1] if "http" in found else None,
        found["pulsar+ssl"][1] if "pulsar+ssl" in found else None,
        found["https"][1] if "https" in found else None,
        found["mqtt"][1] if "mqtt" in found else None,
        found["mqtts"][1] if "mqtts" in found else None,
    )


def toml_value(value: object) -> str:
    """``value`` as a TOML value: a bool, number, string, or a list of those."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML value for {value!r}")


def write_config(path: Path, settings: Mapping[str, object]) -> Path:
    """Write flat broker settings (``key = value`` lines, see docs/configuration.md) to ``path``."""
    path.write_text("".join(f"{key} = {toml_value(value)}\n" for key, value in settings.items()))
    return path


def standalone_command(
    data_dir: Path,
    *,
    port: int = 0,
    http_port: int | None = 0,
    host: str = HOST,
    config: Path | None = None,
    python: str = sys.executable,
    mqtt_port: int | None = None,
    mqtts_port: int | None = None,
) -> list[str]:
    """The command line of a broker on ``data_dir``; port 0 lets the OS pick a free one, an
    ``http_port`` of None leaves ``--http-port`` out (the broker derives it from ``port``), an
    ``mqtt_port`` or ``mqtts_port`` of None leaves MQTT to the config (off unless it says)."""
    cmd = [python, "-m", "magnetar", "standalone", "--host", host, "--port", str(port)]
    cmd += ["--http-port", str(http_port)] if http_port is not None else []
    cmd += ["--mqtt-port", str(mqtt_port)] if mqtt_port is not None else []
    cmd += ["--mqtts-port", str(mqtts_port)] if mqtts_port is not None else []
    cmd += ["--data-dir", str(data_dir)]
    if config is not None:
        cmd += ["--config", str(config)]
    return cmd


class BrokerProcess:
    """One broker on ``workdir/data``: start it, wait until it listens, stop or kill it, start it again.

    ``config`` (flat settings) is written to ``workdir/broker.toml``; None passes no ``--config``. Each
    start logs stdout and stderr (the broker logs on stderr) to a file of its own in ``workdir``
    (``logs``, the latest last); a start that fails says the exit status and that log's end.

    Once a broker has stopped or been killed, its binary and HTTP ports, its pulsar+ssl:// and HTTPS
    ports where it serves TLS, and its MQTT and MQTT-over-TLS ports where it serves MQTT (picked by
    the OS, from the range it also hands to other programs' sockets), are held here, bound but not
    listening, until the next start has bound them again (``restart`` reuses them) or ``close``:
    another program could otherwise take a port in the seconds the new process takes to start, and
    the restart would fail with "Address already in use".
    """

    def __init__(
        self,
        workdir: Path,
        config: Mapping[str, object] | None = None,
        *,
        host: str = HOST,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config = config
        self.config_path = workdir / "broker.toml" if config is not None else None
        self.host = host
        self.python = python
        self.env = env
        self.proc: subprocess.Popen[bytes] | LaunchedProcess | None = None
        self.logs: list[Path] = []
        #: The ports as bound once started; None for one the broker does not serve (TLS only).
        self.port: int | None = 0
        self.http_port: int | None = 0
        #: The pulsar+ssl:// and HTTPS ports, where the config asks for TLS (else None).
        self.tls_port: int | None = None
        self.https_port: int | None = None
        #: The MQTT port, where the config sets mqtt_port (else None), and the MQTT-over-TLS one.
        self.mqtt_port: int | None = None
        self.mqtts_port: int | None = None
        #: The ports held while no broker listens on them (``_hold_ports``); closed when this is
        #: collected, too.
        self._held: list[socket.socket] = []
        weakref.finalize(self, _close_all, self._held)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(
        self,
        port: int = 0,
        http_port: int | None = 0,
        timeout: float = START_TIMEOUT_S,
        *,
        mqtt_port: int | None = None,
        mqtts_port: int | None = None,
        tls_port: int | None = None,
        https_port: int | None = None,
    ) -> Self:
        """Start the broker and wait until it listens; fails with the log's tail if it does not.
        ``mqtt_port`` and ``mqtts_port`` (``--mqtt-port``, ``--mqtts-port``) win over the config's,
        and so do ``tls_port`` and ``https_port`` (``TLS_PORT_VARIABLES``: there is no flag)."""
        if self.running:
            raise BrokerProcessError("the broker is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config_path is not None:
            write_config(self.config_path, self.config or {})
        cmd = standalone_command(
            self.data_dir,
            port=port,
            http_port=http_port,
            host=self.host,
            config=self.config_path,
            python=self.python,
            mqtt_port=mqtt_port,
            mqtts_port=mqtts_port,
        )
        log_path = self.workdir / ("broker.log" if not self.logs else f"broker-{len(self.logs)}.log")
        self.logs.append(log_path)
        env = self.env if self.env is not None else {**os.environ, "PYTHONUNBUFFERED": "1"}
        tls_ports = {"tls_port": tls_port, "https_port": https_port}
        env = {**env, **{TLS_PORT_VARIABLES[k]: str(p) for k, p in tls_ports.items() if p is not None}}
        try:
            launched = None
            if _use_launcher and self.env is None and self.python == sys.executable:
                log_path.write_bytes(b"")  # there before the fork writes to it
                launched = _launched(cmd[3:], env, log_path)  # after ``python -m magnetar``
            if launched is not None:
                self.proc = launched
            else:
                with open(log_path, "wb") as log:
                    self.proc = subprocess.Popen(
                        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=dict(env)
                    )
            self._wait_listening(timeout)
        finally:  # bound again by the broker (a listener may bind beside a holder), or it failed
            _close_all(self._held)
        return self

    def _wait_listening(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listening = parse_listening(self.log_path.read_text(errors="replace"))
            if listening is not None:
                self.host, self.port, _, self.http_port, self.tls_port, self.https_port = listening[:6]
                self.mqtt_port, self.mqtts_port = listening.mqtt_port, listening.mqtts_port
                return
            if (code := self.proc.poll()) is not None:
                tail = self.log_tail()
                said = [m["reason"] for m in CANNOT_START.finditer(tail)]
                raise BrokerProcessError(
                    f"the broker (pid {self.proc.pid}) {exit_status(code)} before"
                    f" listening; {self._log_said(tail)}",
                    said[-1] if said else None,
                )
            time.sleep(0.05)
        self.kill()
        raise BrokerProcessError(
            f"the broker (pid {self.proc.pid}) did not report 'listening on' within {timeout}s;"
            f" {self._log_said(self.log_tail())}"
        )

    def _log_said(self, tail: str) -> str:
        """What the failure message says of the latest start's log (stdout and stderr)."""
        if not self.log_path.exists() or self.log_path.stat().st_size == 0:
            return f"it wrote nothing on stdout or stderr ({self.log_path} is empty)"
        return f"its stdout and stderr ({self.log_path}) end:\n{tail}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Send ``sig`` and wait for the exit code (None if never started); if the broker is still
        running after ``timeout`` seconds it is killed and BrokerProcessError says so."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BrokerProcessError(
                f"the broker ignored signal {sig} for {timeout}s and was killed:\n{self.log_tail()}"
            ) from None
        self._hold_ports()
        return code

    def kill(self) -> None:
        """SIGKILL, if it runs (no flush, as in a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            self._hold_ports()

    def close(self) -> None:
        """Kill the broker if it runs and let go of the ports held for a restart."""
        self.kill()
        _close_all(self._held)

    def _hold_ports(self) -> None:
        """Bind the ports the broker listened on (not listening: connections are refused as before)
        so that no other program is given one before ``restart`` binds it again. A port taken in
        the moment since the broker ended stays taken: the restart then says so."""
        if not HOLDS_PORTS or self._held:
            return
        ports = {self.port, self.http_port, self.tls_port, self.https_port, self.mqtt_port, self.mqtts_port}
        for port in ports - {None, 0}:
            holder = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
            try:
                holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                holder.bind((self.host, port))
            except OSError:
                holder.close()
            else:
                self._held.append(holder)

    def restart(self, same_port: bool = True, timeout: float = START_TIMEOUT_S) -> Self:
        """Start again on the same data directory (and, ``same_port``, the same binary and HTTP
        ports, TLS ports where it served TLS, and MQTT ports where it served MQTT: what other brokers
        were told, a geo-replication remote's URLs say, clients reconnect to) after a stop or kill."""
        if self.running:
            raise BrokerProcessError("stop or kill the broker before restarting it")
        if not same_port:
            return self.start(timeout=timeout)
        return self.start(
            port=self.port or 0,
            http_port=self.http_port or 0,
            timeout=timeout,
            mqtt_port=self.mqtt_port,
            mqtts_port=self.mqtts_port,
            tls_port=self.tls_port,
            https_port=self.https_port,
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.stop()
        finally:
            _close_all(self._held)

    # -- facts --------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def service_url(self) -> str:
        if self.port is None:
            raise BrokerProcessError(
                "the broker serves no plain pulsar:// port (broker_service_port_enabled is false): "
                "use service_url_tls"
            )
        return f"pulsar://{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        if self.http_port is None:
            raise BrokerProcessError(
                "the broker serves no plain HTTP port (web_service_port_enabled is false): use https_url"
            )
        return f"http://{self.host}:{self.http_port}"

    @property
    def service_url_tls(self) -> str:
        if self.tls_port is None:
            raise BrokerProcessError("the broker serves no pulsar+ssl:// port (broker_service_port_tls)")
        return f"pulsar+ssl://{self.host}:{self.tls_port}"

    @property
    def https_url(self) -> str:
        if self.https_port is None:
            raise BrokerProcessError("the broker serves no HTTPS port (web_service_port_tls)")
        return f"https://{self.host}:{self.https_port}"

    @property
    def log_path(self) -> Path:
        """The latest start's log."""
        return self.logs[-1] if self.logs else self.workdir / "broker.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the latest start's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def exit_status(returncode: int) -> str:
    """``exited with 1``, or ``was killed by SIGKILL`` for a negative return code."""
    if returncode >= 0:
        return f"exited with {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


def _close_all(sockets: list[socket.socket]) -> None:
    while sockets:
        sockets.pop().close()
