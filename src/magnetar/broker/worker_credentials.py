"""What one worker presents at another's Pulsar port for an HTTP client it serves (``--workers``).

A WebSocket session or a REST produce request lands on any worker; the topics (partitions) that
another worker owns are served through a Pulsar connection to that owner, made by the worker that
has the HTTP client (``magnetar.websocket.sessions``), as Pulsar's WebSocket service connects to
its brokers. The owner must check the HTTP client's own credentials, not the worker's: a token is
verified again (and expires there as anywhere, challenged by AUTH_CHALLENGE), and a client
certificate, which the worker's TLS handshake verified and which cannot be presented again
without its private key, is passed on as the certificate's fields. So the worker CONNECTs with
the auth method ``magnetar-worker`` and the client's credentials sealed with a secret that only
the workers of one data directory know (an HMAC-SHA256 over them and the time): the owner takes
them only with a valid seal less than ``MAX_AGE_S`` old, and then authenticates them with its
own providers, as if the client had come itself (Pulsar's ``originalPrincipal`` from a proxy
role, without a role to configure).

A worker also CONNECTs as itself (``identity``: its broker id sealed the same way): a follower's
link to a spread topic's owner (docs/architecture.md, the spread), and a home worker deleting an
expired MQTT session's durable subscriptions at their owners, or making an away session's on a
topic just created (where that session's role may consume it). No client's credentials are behind
those, so the owner serves such a connection only what workers ask of each other
(``handlers/worker_access.py``); each client is authenticated and authorized by the worker it
connects to.

The secret is made by the first worker that needs it, in ``worker.secret`` in the data
directory (mode 0600: whoever reads it can read the data directory anyway).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.authentication import AuthenticationFailed, AuthenticationProvider

if TYPE_CHECKING:
    from magnetar.broker.authentication import Authentication

#: The auth method a worker CONNECTs with on an HTTP client's behalf, or as itself.
AUTH_METHOD = "magnetar-worker"
#: The sealed method of a worker's own identity (its broker id as the data).
IDENTITY = "magnetar-worker-identity"
#: The role a worker's own identity is logged as (no grant names it: ``worker_of`` is what counts).
WORKER_ROLE_PREFIX = "magnetar.worker."
SECRET_FILE = "worker.secret"
#: How old a seal may be (the clocks are one machine's).
MAX_AGE_S = 60.0
_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class Relayed:
    """An HTTP client's credentials, as the worker serving it proved them: ``method`` is the
    provider's (``token``, ``tls``), ``data`` its auth data, ``certificate`` the verified client
    certificate's fields (``ssl.SSLSocket.getpeercert()``'s dict), if any."""

    method: str
    data: bytes = b""
    certificate: dict[str, Any] | None = None


def identity(broker_id: str) -> Relayed:
    """Worker ``broker_id`` itself, as it seals its own identity."""
    return Relayed(IDENTITY, broker_id.encode())


class WorkerSecret:
    """The workers' shared secret, read (or made) at first use."""

    def __init__(self, data_dir: Path) -> None:
        self._path = Path(data_dir) / SECRET_FILE

    @cached_property
    def key(self) -> bytes:
        try:
            return self._read()
        except FileNotFoundError:
            pass
        # Written whole under another name, then linked: a reader sees no file or the whole key,
        # and of two workers making one at once, the first link wins and both use its key.
        temporary = self._path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_hex(_SECRET_BYTES).encode())
            with contextlib.suppress(FileExistsError):
                os.link(temporary, self._path)
        finally:
            temporary.unlink(missing_ok=True)
        return self._read()

    def _read(self) -> bytes:
        key = self._path.read_bytes().strip()
        if len(key) < _SECRET_BYTES:
            raise AuthenticationFailed(f"{self._path} does not hold a worker secret")
        return key

    def seal(self, relayed: Relayed, now: float | None = None) -> bytes:
        """``relayed`` as auth data for ``AUTH_METHOD``."""
        body = json.dumps(
            {
                "method": relayed.method,
                "data": base64.b64encode(relayed.data).decode(),
                "certificate": relayed.certificate,
                "at": time.time() if now is None else now,
            },
            separators=(",", ":"),
        )
        mac = hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()
        return json.dumps({"body": body, "mac": mac}, separators=(",", ":")).encode()

    def open(self, auth_data: bytes, now: float | None = None) -> Relayed:
        """The credentials sealed in ``auth_data``; AuthenticationFailed for a bad or old seal."""
        try:
            envelope = json.loads(auth_data)
            body, mac = envelope["body"], envelope["mac"]
            if not isinstance(body, str) or not isinstance(mac, str):
                raise TypeError("body and mac are strings")
        except (ValueError, TypeError, KeyError) as exc:
            raise AuthenticationFailed(f"worker credentials do not parse: {exc}") from None
        expected = hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, mac):
            raise AuthenticationFailed("worker credentials are not sealed with this broker's secret")
        try:
            fields = json.loads(body)
            age = (time.time() if now is None else now) - float(fields["at"])
            data = base64.b64decode(fields["data"])
            relayed = Relayed(str(fields["method"]), data, fields.get("certificate"))
        except (ValueError, TypeError, KeyError) as exc:
            raise AuthenticationFailed(f"worker credentials do not parse: {exc}") from None
        if not -MAX_AGE_S < age < MAX_AGE_S:
            raise AuthenticationFailed(f"worker credentials are {age:.0f} s old")
        return relayed


class WorkerProvider(AuthenticationProvider):
    """Takes an HTTP client's credentials sealed by another worker (``WorkerSecret``) and checks
    them with this broker's own providers: the role, and when a token expires, are theirs."""

    auth_method = AUTH_METHOD

    def __init__(self, secret: WorkerSecret, authentication: Authentication) -> None:
        self._secret = secret
        self._authentication = authentication

    def authenticate(self, auth_data: bytes, peer_certificate: Any | None = None) -> str:
        relayed = self._secret.open(auth_data)
        if relayed.method == AUTH_METHOD:
            raise AuthenticationFailed("worker credentials cannot seal worker credentials")
        if relayed.method == IDENTITY:
            return WORKER_ROLE_PREFIX + _worker_id(relayed)
        provider = self._authentication.provider(relayed.method)
        return provider.authenticate(relayed.data, relayed.certificate)

    def worker_of(self, auth_data: bytes) -> str | None:
        try:
            relayed = self._secret.open(auth_data)
        except AuthenticationFailed:
            return None
        return _worker_id(relayed) if relayed.method == IDENTITY else None

    def expires_at(self, auth_data: bytes) -> float | None:
        try:
            relayed = self._secret.open(auth_data)
            if relayed.method == IDENTITY:
                return None  # the seal's age is checked at CONNECT; a worker stays itself
            return self._authentication.provider(relayed.method).expires_at(relayed.data)
        except AuthenticationFailed:
            return 0.0


def _worker_id(relayed: Relayed) -> str:
    try:
        worker = relayed.data.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("a worker identity that is not UTF-8") from None
    if not worker:
        raise AuthenticationFailed("a worker identity names no worker")
    return worker


def install(authentication: Authentication | None, data_dir: Path) -> WorkerSecret:
    """The workers' secret, and its provider among ``authentication``'s (when it is on)."""
    secret = WorkerSecret(data_dir)
    if authentication is not None:
        authentication.providers[AUTH_METHOD] = WorkerProvider(secret, authentication)
    return secret
