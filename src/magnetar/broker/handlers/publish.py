"""SEND: the checks a message passes before it is stored (checksum, metadata, size, batch), and
its hand-off to the topic; the receipt or error goes back in the order the sends came
(``broker/producer.py``). This is the hot path: one call of ``handle_send`` per message."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker import descriptors
from magnetar.broker.errors import REQUEST_ERRORS, BrokerError
from magnetar.protocol import ChecksumMismatch, Frame, ProtocolError, wire
from magnetar.protocol.batch import check_message
from magnetar.protocol.headers import metadata_span, parse_metadata, verify_checksum
from magnetar.protocol.text import undecodable_metadata

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.handlers.cnx import HandlerCnx
    from magnetar.broker.producer import PendingSend, Producer

log = logging.getLogger(__name__)

#: The ``reason`` of a send that storage refused or failed (a full disk, a failed fsync): it gets
#: no SEND_ERROR, its producer is closed (``Producer.not_stored`` says why).
STORAGE_REFUSED = "StorageRefused"


def handle_send(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.send
    producer = cnx.producers.get(cmd.producer_id)
    if producer is None:
        if cmd.producer_id in cnx.gone_producers:
            return  # sent before the client saw our CLOSE_PRODUCER: it resends after reconnecting
        raise ProtocolError(f"SEND for unknown producer id {cmd.producer_id}")
    payload = frame.payload
    if payload is None:
        raise ProtocolError("SEND without a message")
    pending = producer.expect(cmd.sequence_id, cmd.highest_sequence_id)
    try:
        metadata = _checked_metadata(cnx.config, cmd, payload)
    except ChecksumMismatch as exc:
        log.warning("%s: %s (producer %s, sequence %d)", cnx.remote, exc, producer.name, cmd.sequence_id)
        _refuse(cnx, producer, pending, wire.ChecksumError, str(exc))
        return
    except ProtocolError as exc:
        _refuse(cnx, producer, pending, wire.NotAllowedError, f"invalid message: {exc}")
        return
    except BrokerError as exc:
        _refuse(cnx, producer, pending, exc.code, str(exc))
        return
    if producer.refusing_sends:  # an earlier send was not stored: this producer is being closed
        _not_stored(cnx, producer, pending)
        return
    if producer.topic.terminated:
        _refuse(
            cnx, producer, pending, wire.TopicTerminatedError, f"Topic {producer.topic.name} is terminated"
        )
        return
    num_messages = cmd.num_messages if cmd.HasField("num_messages") else 1
    size = len(payload)
    mine = producer.traffic
    mine.messages_in += num_messages
    mine.bytes_in += size
    traffic = producer.topic.traffic
    traffic.messages_in += num_messages
    traffic.bytes_in += size
    cnx.send_pending(size)

    def stored(position, exc) -> None:
        cnx.send_done(size)
        if exc is not None:  # the managed ledger logged it (once per episode)
            _not_stored(cnx, producer, pending)
        else:
            producer.complete(pending, position, None)

    try:
        producer.topic.publish(producer, cmd, payload, stored, metadata)
    except Exception as exc:
        if descriptors.is_exhaustion(exc):  # the ledger's closed files could not reopen
            descriptors.EXHAUSTION.refused("write", f"{producer.topic.name}: {exc}")
        elif isinstance(exc, OSError):  # its closed files could not reopen (one gone ...): no bug
            log.error("%s: storing a message failed: %s", producer.topic.name, exc)
        elif not isinstance(exc, REQUEST_ERRORS):  # else storage refused the write (a full disk ...)
            log.exception("%s: storing a message failed", producer.topic.name)
        cnx.send_done(size)
        _not_stored(cnx, producer, pending)


def _refuse(cnx: HandlerCnx, producer: Producer, pending: PendingSend, code: int, message: str) -> None:
    """Answer the send with SEND_ERROR ``code``, counted by its name (``magnetar_send_refusals_total``)."""
    cnx.service.send_refusals[wire.ServerError.Name(wire.ServerError.ValueType(code))] += 1
    producer.complete(pending, None, (code, message))


def _not_stored(cnx: HandlerCnx, producer: Producer, pending: PendingSend) -> None:
    """Storage refused or failed the send: its producer is closed (``Producer.not_stored``), counted."""
    cnx.service.send_refusals[STORAGE_REFUSED] += 1
    producer.not_stored(pending)


def _checked_metadata(
    config: BrokerConfig, cmd: wire.CommandSend, payload: memoryview
) -> wire.MessageMetadata:
    """The message's metadata once the message passed its checks; ChecksumMismatch, ProtocolError
    (unreadable) or BrokerError (too large, a batch that does not add up) if not."""
    verify_checksum(payload)
    metadata, body = parse_metadata(payload)
    if (field := undecodable_metadata(metadata)) is not None:
        raise ProtocolError(f"message metadata {field} is not valid UTF-8")
    # The limit is on metadata + payload, as the client sizes chunks by it; chunks are
    # bounded by the frame limit alone (max_message_size + 10 KiB).
    size = len(payload) - metadata_span(payload)[0]  # metadata + payload, no re-serializing
    if size > config.max_message_size and not (cmd.is_chunk or metadata.HasField("chunk_id")):
        raise BrokerError(
            f"Exceed maximum message size: {size} > {config.max_message_size}", wire.NotAllowedError
        )
    # A batch a consumer cannot take apart would crash it (the C++ client reads past its buffer).
    if config.validate_batches_on_publish:
        check_message(metadata, body, config.max_messages_per_batch, config.max_message_size)
    return metadata
