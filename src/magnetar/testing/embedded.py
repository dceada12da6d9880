"""``embedded_broker``: a throwaway Magnetar broker for a test run, whatever the test runner.

The broker is a child process (``magnetar.broker_process``), not a thread: a user's suite may run its
own event loops (pytest-asyncio, anyio, trio), patch the clock or fork, and none of that can reach a
broker in another process. Its data lives in a temporary directory removed afterwards, and it is
stopped by SIGTERM to its PID (killed if it does not stop), so nothing outlives the ``with`` block.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from magnetar.broker_process import START_TIMEOUT_S, BrokerProcess, BrokerProcessError

#: Settings given to ``magnetar standalone`` as flags, not through its TOML file: the flags
#: override the file, so a ``port`` written there would be silently ignored.
COMMAND_LINE_SETTINGS = frozenset({"host", "port", "http_port"})


def split_settings(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(TOML settings, command-line settings) of ``embedded_broker``'s keyword arguments.

    ``data_dir`` is refused: the embedded broker's data is a temporary directory of its own, and
    one a test names would be deleted with it.
    """
    if "data_dir" in settings:
        raise TypeError("embedded_broker() keeps its data in a temporary directory: data_dir is not accepted")
    toml = {k: v for k, v in settings.items() if k not in COMMAND_LINE_SETTINGS}
    flags = {k: v for k, v in settings.items() if k in COMMAND_LINE_SETTINGS}
    return toml, flags


class EmbeddedBroker:
    """What a test needs of a running embedded broker: its URLs, PID, data directory and log."""

    def __init__(self, process: BrokerProcess) -> None:
        self._process = process

    @property
    def service_url(self) -> str:
        """``pulsar://127.0.0.1:PORT``, for ``pulsar.Client`` (and ours)."""
        return self._process.service_url

    @property
    def admin_url(self) -> str:
        """``http://127.0.0.1:PORT``: the admin API (``/admin/v2/...``) and ``/metrics``."""
        return self._process.http_url

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://...``, where the settings ask for TLS (else BrokerProcessError)."""
        return self._process.service_url_tls

    @property
    def admin_url_tls(self) -> str:
        """``https://...``, where the settings ask for TLS (else BrokerProcessError)."""
        return self._process.https_url

    @property
    def pid(self) -> int:
        assert self._process.proc is not None
        return self._process.proc.pid

    @property
    def data_dir(self) -> Path:
        return self._process.data_dir

    @property
    def log_path(self) -> Path:
        """The broker's stdout and stderr, to read while it runs (removed with the data)."""
        return self._process.log_path

    def log_tail(self, chars: int = 4000) -> str:
        return self._process.log_tail(chars)

    def __repr__(self) -> str:
        return (
            f"EmbeddedBroker(pid={self.pid}, service_url={self.service_url!r}, admin_url={self.admin_url!r})"
        )


@contextmanager
def embedded_broker(
    *, start_timeout: float = START_TIMEOUT_S, python: str = sys.executable, **settings: Any
) -> Iterator[EmbeddedBroker]:
    """Start ``magnetar standalone`` on free ports of 127.0.0.1 and yield it once it listens.

    ``settings`` are broker settings as in the TOML file (docs/configuration.md), e.g.
    ``embedded_broker(max_message_size=1024)``; ``port`` and ``http_port`` (default 0: the OS picks a
    free one) and ``host`` become flags. ``workers=2`` runs a supervisor and two broker processes
    (docs/architecture.md, Workers), stopped together with it. A broker that cannot start (an
    unknown setting, a bad value) raises BrokerProcessError with its log; one that exits with an
    error when stopped does too.
    """
    toml, flags = split_settings(settings)
    with tempfile.TemporaryDirectory(prefix="magnetar-test-", ignore_cleanup_errors=True) as tmp:
        process = BrokerProcess(Path(tmp), toml or None, host=flags.get("host", "127.0.0.1"), python=python)
        try:
            process.start(
                port=flags.get("port", 0), http_port=flags.get("http_port", 0), timeout=start_timeout
            )
        except BaseException:
            process.close()
            raise
        try:
            yield EmbeddedBroker(process)
        finally:
            try:
                code = process.stop()  # kills it (and raises) if SIGTERM is not enough
            finally:
                process.close()  # no restart follows: its ports go back to the OS
        if code != 0:
            raise BrokerProcessError(
                f"the embedded broker exited with {code} when stopped:\n{process.log_tail()}"
            )
