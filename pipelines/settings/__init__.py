"""Settings: the job configs read from YAML, secrets kept out of them, and where state and jars
live.
"""
