"""Durable partition logs in Kafka's on-disk layout: segments, index, recovery."""
