"""The local services for development and tests: a Kafka broker from the official jars and a
PostgreSQL server.
"""
