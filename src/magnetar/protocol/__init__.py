"""Sans-IO implementation of the Pulsar binary protocol.

Bytes go in, commands come out; commands go in, bytes come out. Nothing here opens
a socket or touches an event loop, so the broker, the client and the tests all
drive the same code (the h11 way).
"""

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol.frames import Frame, FrameDecoder, encode_frame

__all__ = ["ChecksumMismatch", "Frame", "FrameDecoder", "ProtocolError", "encode_frame", "wire"]
