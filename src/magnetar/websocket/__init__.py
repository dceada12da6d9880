"""Messages over HTTP on the broker's HTTP port: Pulsar's WebSocket API (``/ws/v2/...``) and its
REST produce API (PIP-64, ``POST /topics/...``), served by the broker's own ``ServerCnx`` through
an in-process transport (``local_transport.py``), or with workers by the Pulsar port of the worker
owning the topic (``sessions.py``), so every check of the Pulsar port applies as it is. See
docs/websocket.md."""
