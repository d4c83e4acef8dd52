"""The daily reconciliation against billing: the billing parsers, the Beam job, its store and
the alerts it raises.
"""
