"""Geo-replication: a replicator per topic (partition) and remote cluster copies what is stored
here to the remote, as Pulsar's replicators do.

The broker keeps the model (clusters, replication clusters, overrides) and one durable cursor
``pulsar.repl.{remote}`` per topic and remote (magnetar.broker.replication); this layer, above
both the broker and the client, reads that cursor and produces to the remote with Magnetar's own
client (``Producer.send_stored``). ``ReplicationManager`` is started by the process that runs the
broker (cli/standalone.py).

- entry_copy.py: what one stored entry becomes on the remote (pure).
- remote.py: a remote cluster's client and admin client, from its ClusterData.
- replicator_state.py: the replicator's durable state (epoch, refused entries).
- replicator.py: one topic's copy to one remote.
- manager.py: which replicators run, started and stopped as topics and policies change.
"""
