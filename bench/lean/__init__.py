"""A broadcast load generator on our own sans-IO protocol layer (issue 21, item 1).

The official client holds a few thousand consumers per process; this one holds tens of
thousands: each consumer is a raw connection on asyncio that speaks CONNECT, SUBSCRIBE, FLOW
and ACK itself, and keeps only counters and a fixed-bucket histogram, never a sample per
delivery. ``python -m bench.lean --help`` runs it; ``coordinator.py`` says what is measured.
"""
