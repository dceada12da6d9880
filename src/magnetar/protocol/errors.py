"""Errors raised by the protocol layer."""


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid Pulsar frame or command.

    The connection cannot continue after this: the byte stream has lost its framing
    or the peer broke the protocol's rules.
    """


class ChecksumMismatch(ProtocolError):
    """A message's CRC32C did not match its metadata and payload.

    Unlike other protocol errors this one is local to one message: the framing is
    intact, so the connection can carry on after rejecting the message.
    """
