"""Settings: the job configs read from YAML (with the sections and environment overrides they
share), secrets kept out of them, and where state and jars live.
"""
