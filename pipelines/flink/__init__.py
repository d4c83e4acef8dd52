"""The Flink jobs: their registry (jobs.py: names, builders, topics, uids), the attribution
job (one module per operator), the GPU cost, ROI and experiments jobs, their Kafka sources
and sinks, and the local and standalone clusters they run on.
"""
