"""The local services for development and tests: a Kafka broker from the official jars, a
PostgreSQL server and a standalone Spark cluster from the pyspark package.
"""
