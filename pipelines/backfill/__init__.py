"""The backfill: the raw archive, the engine-free computation on pandas frames, and the Spark
and single-process engines that run it.
"""
