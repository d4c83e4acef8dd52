"""Engine glue: Kafka, Flink, the local stack, sinks. Logic lives in udfs/."""
