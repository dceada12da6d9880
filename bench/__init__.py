"""Side-by-side benchmarks: Magnetar and the peer broker, driven by the official ``pulsar-client``.

``python -m bench`` starts each broker itself on 127.0.0.1, runs the scenarios interleaved, and writes a JSON
file and a markdown report. The modules, one job each:

- ``procs``: broker subprocesses, their listening port, CPU seconds and peak RSS from ``/proc``;
- ``brokers``: how to start Magnetar (fsync on and off) and ``pulsar-lite``;
- ``workload``: producers, consumers and the correctness tally (duplicates, missing, out of order);
- ``scenarios``: the scenario table and the two modes (concurrent, backlog drain);
- ``stats``: medians, spreads and percentiles;
- ``report``: the JSON file and the markdown tables;
- ``hotspots``: py-spy's collapsed stacks turned into a table of hotspots.
"""
