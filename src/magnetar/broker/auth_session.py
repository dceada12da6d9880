"""A connection's authentication state (Pulsar keeps it in ``ServerCnx``'s auth fields and its
``AuthenticationState``): what the transport proved (TLS), the role the credentials proved, and
where their refresh stands (an AUTH_CHALLENGE out, answered by AUTH_RESPONSE).

Apart from the connection so that the socket's side (``connection.py``) and the credentials'
rules (``handlers/handshake.py``) each hold their own state; only the handshake changes it.
"""

from __future__ import annotations

from typing import Any


class AuthSession:
    """Slotted: one per connection, 100K of them."""

    __slots__ = (
        "attempted_method",
        "challenge_pending",
        "expires_at",
        "method",
        "peer_certificate",
        "refused",
        "role",
        "supports_refresh",
        "tls",
        "worker",
    )

    def __init__(self) -> None:
        #: Whether the client came over TLS (the pulsar+ssl:// port), and the certificate it
        #: presented, as ``ssl.SSLSocket.getpeercert()`` gives it: only one the broker verified
        #: against ``tls_trust_certs_file_path``, else None. ``tls_identity.role_from_certificate``
        #: reads the role from it.
        self.tls = False
        self.peer_certificate: dict[str, Any] | None = None
        #: The role its credentials proved (authentication.py); None while authentication is off.
        self.role: str | None = None
        #: The auth method those credentials came with (a refresh must use the same).
        self.method: str | None = None
        #: The auth method the client named last (the metrics' label of a refusal).
        self.attempted_method: str | bytes = ""
        #: When the credentials stop being valid (Unix time), None if never.
        self.expires_at: float | None = None
        #: The client said at CONNECT that it answers AUTH_CHALLENGE (feature flag).
        self.supports_refresh = False
        #: An AUTH_CHALLENGE is out and not yet answered with valid credentials.
        self.challenge_pending = False
        #: Why CONNECT's credentials were refused, when that is told at the client's first request
        #: (``handshake.refuse_at_first_request``); None otherwise. Nothing is served then.
        self.refused: str | None = None
        #: The worker this connection is, when it CONNECTed with a worker's own sealed identity
        #: (``AuthenticationProvider.worker_of``): only what workers ask of each other is served.
        self.worker: str | None = None

    def over_tls(self, peer_certificate: dict[str, Any] | None) -> None:
        """The connection came over TLS, with this verified client certificate (or none)."""
        self.tls = True
        self.peer_certificate = peer_certificate
