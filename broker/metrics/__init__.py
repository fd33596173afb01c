"""Prometheus metrics and the operator's HTTP endpoints, and the consumer-group state they read."""
