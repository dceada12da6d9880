"""A request's error answer in the form its client waits for, and which requests are checked for
text that is not UTF-8 before their handler runs (``ServerCnx._handle``).

LOOKUP and PARTITIONED_METADATA are answered with their own response marked Failed, the schema
requests with their response's error code, everything else with ERROR: a client waiting for a
LOOKUP answer does not match an ERROR to it.
"""

from __future__ import annotations

from google.protobuf.message import Message

from magnetar.protocol import wire

T = wire.BaseCommand.Type

#: Requests whose text fields are checked before their handler runs (not SEND, ACK, FLOW: the hot
#: path, whose commands carry no names). Each has a request id to answer an error to.
TEXT_CHECKED = frozenset(
    {
        T.PARTITIONED_METADATA,
        T.LOOKUP,
        T.PRODUCER,
        T.SUBSCRIBE,
        T.GET_TOPICS_OF_NAMESPACE,
        T.GET_SCHEMA,
        T.GET_OR_CREATE_SCHEMA,
    }
)


#: Requests answered by a reply of their own with error_code and error_message.
_ERROR_CODE_REPLIES: dict[
    int, type[wire.CommandGetSchemaResponse | wire.CommandGetOrCreateSchemaResponse]
] = {
    T.GET_SCHEMA: wire.CommandGetSchemaResponse,
    T.GET_OR_CREATE_SCHEMA: wire.CommandGetOrCreateSchemaResponse,
}


def error_reply(cmd_type: int, request_id: int, code: int, message: str) -> Message:
    """The error answer to request ``cmd_type`` in the form its client waits for (``code``: a
    ServerError, as ``BrokerError.code`` holds it)."""
    error = wire.ServerError.ValueType(code)
    if cmd_type == T.LOOKUP:  # answered by a reply of their own that says Failed
        lookup = wire.CommandLookupTopicResponse
        return lookup(request_id=request_id, response=lookup.Failed, error=error, message=message)
    if cmd_type == T.PARTITIONED_METADATA:
        metadata = wire.CommandPartitionedTopicMetadataResponse
        return metadata(request_id=request_id, response=metadata.Failed, error=error, message=message)
    if (reply := _ERROR_CODE_REPLIES.get(cmd_type)) is not None:
        return reply(request_id=request_id, error_code=error, error_message=message)
    return wire.CommandError(request_id=request_id, error=error, message=message)
