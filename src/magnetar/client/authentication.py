"""Client credentials, named as the official client's: ``AuthenticationToken(token)`` where
``token`` is the token text or a function returning a (fresh) one.

CONNECT carries ``auth_method_name`` and ``auth_data``; when the broker asks again
(AUTH_CHALLENGE, its token check found the token expired) the connection answers with
``auth_data()`` once more, so a supplier function keeps a long-lived connection authenticated.
"""

from __future__ import annotations

from collections.abc import Callable


class Authentication:
    """No credentials (the official client's ``AuthenticationDisabled``: method ``none``)."""

    auth_method_name = "none"

    def auth_data(self) -> bytes:
        return b""


class AuthenticationToken(Authentication):
    """A JWT token, or a function called for one at each CONNECT and AUTH_CHALLENGE. Whitespace
    around it is dropped, as Pulsar's clients drop it from a token file (``open(f).read()`` keeps
    the newline)."""

    auth_method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise TypeError("token must be a string or a function returning one")
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        if isinstance(token, bytes):
            return token.strip()
        if not isinstance(token, str):
            raise TypeError(f"the token supplier returned {type(token).__name__}, not a string")
        return token.strip().encode()
