"""Schemas per topic: the durable, versioned registry and Pulsar's compatibility rules."""
