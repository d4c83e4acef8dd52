"""Wire formats: OTLP traces and metrics in, the framed records the JVM source hands over, and
the result messages out.
"""
