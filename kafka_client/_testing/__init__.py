"""Helpers for tests and the demo: start and stop local Kafka-compatible brokers."""
