"""The blocking API (``magnetar.client.Client``): the asyncio client run on a background
event-loop thread (client.py), a facade per asyncio handler (producer.py, consumer.py,
column_reader.py, table_view.py) sharing the loop (loop.py)."""

from magnetar.client.sync.client import Client
from magnetar.client.sync.column_reader import ColumnReader
from magnetar.client.sync.consumer import Consumer, Reader
from magnetar.client.sync.producer import Producer
from magnetar.client.sync.result import Result
from magnetar.client.sync.table_view import TableView

__all__ = ["Client", "ColumnReader", "Consumer", "Producer", "Reader", "Result", "TableView"]
