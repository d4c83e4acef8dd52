"""The warehouse the dashboards read: its tables, what loads them from Kafka, and the run
accounting read back.
"""
