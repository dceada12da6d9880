"""MQTT 3.1.1 and 5.0 on the broker, into the same topics as the Pulsar protocol (docs/mqtt.md).

- ``server``: the port, the connections, topics loaded later
- ``connection``: one client's connection (CONNECT, keepalive, DISCONNECT, refusals)
- ``inbound``: PUBLISH into a topic (QoS 0, 1, 2) and PUBREL
- ``subscriptions``: SUBSCRIBE, UNSUBSCRIBE, filters (wildcards, ``$share``) as consumers
- ``outbound``: what subscribers are sent, and its QoS 1 and 2 flows
- ``messages``: MQTT messages (and their MQTT 5 properties) as Pulsar messages and back
- ``session``, ``sessions``, ``session_store``: what is kept of a client id, in memory and on disk
- ``qos2_store``, ``retained``, ``records``: the QoS 2 records, retained messages, and how
  records reach the metadata store
- ``will``: Last Will messages
"""
