"""Kafka from Python: topics, producers, reading back, and the clients' security settings."""
