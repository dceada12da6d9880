"""The admin client's errors: ``AdminError`` for a refused request, a subclass by HTTP status."""

from __future__ import annotations


class AdminError(Exception):
    """The broker refused an admin request: ``status`` is the HTTP status, ``reason`` its text."""

    def __init__(self, status: int, reason: str, url: str = "") -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason
        self.url = url


class NotFoundError(AdminError):
    pass


class ConflictError(AdminError):
    pass


class UnauthorizedError(AdminError):
    """401: no credentials, or credentials the broker refused."""


class ForbiddenError(AdminError):
    """403: the credentials are good, but their role may not do this (authorization)."""


_ERRORS = {401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError, 409: ConflictError}


def refusal(status: int, reason: str, url: str = "") -> AdminError:
    """The error for an HTTP refusal: the ``AdminError`` subclass for its status."""
    return _ERRORS.get(status, AdminError)(status, reason, url)
