"""The blocking consumer and reader: messages taken on the caller's thread, acks posted."""

from __future__ import annotations

import logging
from collections.abc import Callable

from magnetar.client.consumer import Consumer as AioConsumer
from magnetar.client.message import Message, MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer
from magnetar.client.reader import Reader as AioReader
from magnetar.client.sync.facade import Facade
from magnetar.client.sync.loop import ClientLoop

log = logging.getLogger(__name__)

#: ``listener(consumer, message)``, as the official client's ``message_listener``.
MessageListener = Callable[["Consumer", Message], None]


class Consumer(Facade[AioConsumer | MultiTopicsConsumer]):
    """``receive`` takes a message already queued without waiting for the loop (only when the
    queue is empty does it wait there), and acknowledgements are posted to the loop in order."""

    def __init__(self, client_loop: ClientLoop, inner: AioConsumer | MultiTopicsConsumer) -> None:
        super().__init__(client_loop, inner)
        #: A consumer of one topic (or a reader) takes and acknowledges without waiting for the
        #: loop; one of several topics does not, and each of its calls waits for the loop.
        self._single = inner if isinstance(inner, AioConsumer) else None

    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        return self._inner.consumer_name()

    def has_reached_end_of_topic(self) -> bool:
        """The topic is terminated and everything on it acknowledged: nothing more will come."""
        return self._inner.has_reached_end_of_topic()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``magnetar.client.errors.Timeout`` after ``timeout_millis``."""
        msg = self._take_queued()
        return msg if msg is not None else self._run(self._inner.receive(timeout_millis))

    def _take_queued(self) -> Message | None:
        single = self._single
        if single is None:
            return None
        self._loop.check_thread()
        msg = single.poll_queued()
        if msg is not None:
            self._loop.post(single._message_processed, msg)  # permits, ack timeout
        return msg

    def acknowledge(self, message: Message | MessageId) -> None:
        if self._single is None:
            self._run(self._inner.acknowledge(message))
            return
        self._loop.post(self._single.acknowledge_nowait, _checked_id(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        if self._single is None:
            self._run(self._inner.acknowledge_cumulative(message))
            return
        self._single.check_cumulative_allowed()
        self._loop.post(self._single.acknowledge_cumulative_nowait, _checked_id(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._loop.post(self._inner.negative_acknowledge, _checked_id(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._run(self._inner.redeliver_unacknowledged_messages())

    def seek(self, position: MessageId | int) -> None:
        self._run(self._inner.seek(position))

    def get_last_message_id(self) -> MessageId:
        return self._run(self._inner.get_last_message_id())

    def unsubscribe(self) -> None:
        self._run(self._inner.unsubscribe())

    def _set_listener(self, listener: MessageListener) -> None:
        executor = self._loop.listeners

        def deliver(msg: Message) -> None:
            executor.submit(self._call_listener, listener, msg)

        async def install() -> None:
            self._inner.set_listener(deliver)

        self._run(install())

    def _call_listener(self, listener: MessageListener, msg: Message) -> None:
        try:
            listener(self, msg)
        except Exception:
            log.exception("message listener failed")


class Reader(Consumer):
    def __init__(self, client_loop: ClientLoop, inner: AioReader) -> None:
        super().__init__(client_loop, inner)
        self._reader = inner

    def read_next(self, timeout_millis: int | None = None) -> Message:
        msg = self._take_queued()
        return msg if msg is not None else self._run(self._reader.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._reader.has_message_available())


def _checked_id(message: Message | MessageId) -> Message | MessageId:
    """A posted call cannot raise to its caller: reject what is not a message here."""
    if not isinstance(message, (Message, MessageId)):
        raise TypeError(f"expected a Message or MessageId, not {type(message).__name__}")
    return message
