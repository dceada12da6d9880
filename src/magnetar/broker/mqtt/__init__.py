"""MQTT 3.1.1 and 5.0 on the broker, into the same topics as the Pulsar protocol (docs/mqtt.md).

- ``server``: the port, the connections, the sessions by client id, topics loaded later
- ``connection``: one client's connection (CONNECT, keepalive, DISCONNECT, refusals)
- ``inbound``: PUBLISH into a topic (QoS 0, 1, 2) and PUBREL
- ``subscriptions``: SUBSCRIBE, UNSUBSCRIBE, wildcard filters as consumers
- ``outbound``: what subscribers are sent, and its QoS 1 and 2 flows
- ``messages``: MQTT messages as Pulsar messages and back
- ``session``, ``qos2_store``: what is kept of a client id, in memory and on disk
"""
