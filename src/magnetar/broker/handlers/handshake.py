"""CONNECT and the connection's credentials (authentication.py; Pulsar's ``ServerCnx.doAuthentication``):
checked at CONNECT, challenged again once they expire (AUTH_CHALLENGE, answered by AUTH_RESPONSE),
and the keepalive's PING/PONG."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar import __version__
from magnetar.broker.authentication import AuthenticationFailed, AuthenticationProvider
from magnetar.broker.request_errors import error_reply
from magnetar.protocol import Frame, ProtocolError, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import FRAME_OVERHEAD

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx

log = logging.getLogger(__name__)
T = wire.BaseCommand.Type

#: Highest protocol version we speak; we answer min(client's, ours).
PROTOCOL_VERSION = 21
#: AUTH_CHALLENGE's data asking a client for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"refresh"
#: Pulsar answers a refused CONNECT with request id -1 (as an unsigned 64-bit field).
AUTH_ERROR_REQUEST_ID = (1 << 64) - 1
#: How the C++ library under the official Python, C++ and Node.js clients names itself in CONNECT.
#: It takes any answer to CONNECT but CONNECTED for a lost connection and retries until its operation
#: times out (``ClientConnection::handleIncomingCommand``), so Pulsar's refusal reaches its user as
#: ``Timeout``; an AuthenticationError answering one of its requests fails that request at once.
CPP_CLIENT_VERSION = "Pulsar-CPP-"
#: A connection refused that way is closed if no request comes within this many seconds.
REFUSED_REQUEST_WAIT_S = 10.0


def negotiated_version(client_version: int) -> int:
    """The protocol version CONNECTED answers: min(client's, ours), as Pulsar's broker does, and
    never below 0 (Pulsar's lowest, v0; a negative version names no protocol)."""
    return max(0, min(client_version, PROTOCOL_VERSION))


def handle_connect(cnx: HandlerCnx, frame: Frame) -> None:
    if cnx.connected:  # (a refused connection's frames never come here: ``answer_refused``)
        raise ProtocolError("CONNECT received twice")
    cmd: wire.CommandConnect = frame.command.connect
    cnx.protocol_version = negotiated_version(cmd.protocol_version)
    cnx.client_version = cmd.client_version
    if cnx.service.authentication is not None and not _authenticate_connect(cnx, cmd):
        return
    config = cnx.config
    cnx.wants_entry_metadata = (
        config.expose_entry_metadata_to_client
        and cmd.HasField("feature_flags")
        and cmd.feature_flags.supports_broker_entry_metadata
    )
    cnx.connected = True
    reply = wire.CommandConnected(
        server_version=f"Magnetar {__version__}",
        protocol_version=cnx.protocol_version,
        max_message_size=config.max_message_size,
    )
    reply.feature_flags.supports_broker_entry_metadata = True
    cnx.send_command(wrap(reply))
    cnx.decoder.max_frame_size = config.max_message_size + FRAME_OVERHEAD


def _authenticate_connect(cnx: HandlerCnx, cmd: wire.CommandConnect) -> bool:
    """Check CONNECT's credentials; a refusal is answered (AuthenticationError) and closes."""
    method = cmd.auth_method_name if cmd.HasField("auth_method_name") else "none"
    cnx.auth.attempted_method = method
    cnx.auth.supports_refresh = cmd.HasField("feature_flags") and cmd.feature_flags.supports_auth_refresh
    try:
        role, provider = _authenticate(cnx, method, cmd.auth_data)
    except AuthenticationFailed as exc:
        if _is_cpp_client(cmd.client_version):
            refuse_at_first_request(cnx, str(exc))
        else:
            authentication_failed(cnx, str(exc))
        return False
    cnx.auth.role, cnx.auth.method = role, method
    cnx.auth.expires_at = provider.expires_at(cmd.auth_data)
    cnx.auth.worker = provider.worker_of(cmd.auth_data)
    cnx.service.authentication_successes[method] += 1
    log.info("%s: authenticated as %r with %s", cnx.remote, role, method)
    return True


def _authenticate(
    cnx: HandlerCnx, method: str | bytes, auth_data: bytes
) -> tuple[str, AuthenticationProvider]:
    if isinstance(method, bytes):
        raise AuthenticationFailed("auth_method_name is not valid UTF-8")
    assert cnx.service.authentication is not None
    return cnx.service.authentication.authenticate(method, auth_data, cnx.auth.peer_certificate)


def authentication_failed(cnx: HandlerCnx, message: str) -> None:
    log.info("%s: authentication refused, closing: %s", cnx.remote, message)
    cnx.service.authentication_failures[_method_label(cnx)] += 1
    error = wire.CommandError(
        request_id=AUTH_ERROR_REQUEST_ID, error=wire.AuthenticationError, message=message
    )
    cnx.send_command(wrap(error))
    cnx.close()
    # Frames that came in the same read (a PRODUCER pipelined behind a refused AUTH_RESPONSE)
    # are not handled: this connection is done before the transport reports it lost.
    cnx.closed = True


def _is_cpp_client(client_version: object) -> bool:
    """``object``: a version that is not UTF-8 comes as bytes (``protocol/text.py``)."""
    return isinstance(client_version, str) and client_version.startswith(CPP_CLIENT_VERSION)


def refuse_at_first_request(cnx: HandlerCnx, message: str) -> None:
    """Refuse CONNECT's credentials so that the C++ client reports AuthenticationError (see
    ``CPP_CLIENT_VERSION``): CONNECTED, then its first request answered with AuthenticationError and
    the connection closed (``answer_refused``). The connection stays unauthenticated throughout:
    ``connected`` stays False, so no handler ever runs for it."""
    log.info("%s: authentication refused, told at its first request: %s", cnx.remote, message)
    cnx.service.authentication_failures[_method_label(cnx)] += 1
    cnx.auth.refused = message
    reply = wire.CommandConnected(
        server_version=f"Magnetar {__version__}", protocol_version=cnx.protocol_version
    )
    cnx.send_command(wrap(reply))
    asyncio.get_running_loop().call_later(REFUSED_REQUEST_WAIT_S, cnx.close)


def answer_refused(cnx: HandlerCnx, frame: Frame) -> None:
    """A command on a connection whose credentials were refused (``refuse_at_first_request``): a
    request is answered with AuthenticationError in the form its client waits for, anything else
    with a connection-wide ERROR; then the connection is closed. A PING is answered."""
    message = cnx.auth.refused or "authentication refused"
    if frame.command.type == T.PING:
        cnx.send_command(wrap(wire.CommandPong()))
        return
    body = frame.body()
    if body is not None and "request_id" in body.DESCRIPTOR.fields_by_name:
        cnx.send_command(
            wrap(error_reply(frame.command.type, body.request_id, wire.AuthenticationError, message))
        )
    else:
        error = wire.CommandError(
            request_id=AUTH_ERROR_REQUEST_ID, error=wire.AuthenticationError, message=message
        )
        cnx.send_command(wrap(error))
    cnx.close()
    cnx.closed = True


def _method_label(cnx: HandlerCnx) -> str:
    """The auth method for the metrics' label: an enabled one, else "other" (no label per
    name a client made up)."""
    assert cnx.service.authentication is not None
    method = cnx.auth.attempted_method
    return method if method in cnx.service.authentication.providers else "other"


def check_credentials(cnx: HandlerCnx, now: float) -> None:
    """Challenge expired credentials for fresh ones; a challenge not answered since the last
    check closes the connection (``ServerCnx.check_credentials``)."""
    if cnx.closed or cnx.auth.role is None or cnx.auth.expires_at is None:
        return
    if cnx.auth.challenge_pending:
        if cnx.holds.held:  # not read now (flow control): its answer may be waiting unread
            return
        authentication_failed(cnx, "timed out waiting for refreshed credentials (AUTH_RESPONSE)")
        return
    if cnx.auth.expires_at > now:
        return
    if not cnx.auth.supports_refresh:
        authentication_failed(cnx, "the credentials expired and the client cannot refresh them")
        return
    cnx.auth.challenge_pending = True
    challenge = wire.CommandAuthChallenge(
        server_version=f"Magnetar {__version__}", protocol_version=cnx.protocol_version
    )
    challenge.challenge.auth_method_name = cnx.auth.method or ""
    challenge.challenge.auth_data = REFRESH_AUTH_DATA
    cnx.send_command(wrap(challenge))


def handle_auth_response(cnx: HandlerCnx, frame: Frame) -> None:
    cmd: wire.CommandAuthResponse = frame.command.auth_response
    if cnx.auth.role is None:
        raise ProtocolError("AUTH_RESPONSE while authentication is off")
    if not cmd.HasField("response"):
        authentication_failed(cnx, "AUTH_RESPONSE carries no credentials")
        return
    method = cmd.response.auth_method_name if cmd.response.HasField("auth_method_name") else ""
    cnx.auth.attempted_method = method
    try:
        if method != cnx.auth.method:
            raise AuthenticationFailed(
                f"AUTH_RESPONSE for method {method!r}, connected with {cnx.auth.method!r}"
            )
        role, provider = _authenticate(cnx, method, cmd.response.auth_data)
    except AuthenticationFailed as exc:
        authentication_failed(cnx, str(exc))
        return
    if role != cnx.auth.role:  # as Pulsar: the principal cannot change on a refresh
        authentication_failed(cnx, f"refreshed credentials are for role {role!r}, not {cnx.auth.role!r}")
        return
    cnx.auth.expires_at = provider.expires_at(cmd.response.auth_data)
    cnx.auth.challenge_pending = False
    cnx.service.authentication_successes[method] += 1
    log.debug("%s: refreshed credentials of %r", cnx.remote, role)


def handle_ping(cnx: HandlerCnx, frame: Frame) -> None:
    cnx.send_command(wrap(wire.CommandPong()))


def handle_pong(cnx: HandlerCnx, frame: Frame) -> None:
    pass
