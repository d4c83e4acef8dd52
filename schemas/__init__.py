"""Data contracts of the pipeline: record types, telemetry semantics, SQL DDL."""
