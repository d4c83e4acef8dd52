"""Customer lifetime value from transactions: reading them (files or the warehouse's orders)
and the holdout check, around the models of udfs/ltv/model.py; `seedance ltv` runs them.
"""
