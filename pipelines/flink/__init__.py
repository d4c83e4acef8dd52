"""The Flink jobs: the attribution job (one module per operator), the GPU cost and ROI jobs,
their Kafka sources and sinks, and the local and standalone clusters they run on.
"""
