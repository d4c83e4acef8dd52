"""Inputs: the sample telemetry generator and exporter, GPU samplers, ad spend files and the
strict reading of CLI input files.
"""
