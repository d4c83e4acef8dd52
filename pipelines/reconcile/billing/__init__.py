"""Billing inputs for the daily reconciliation: ad platform reports and FOCUS cloud bills,
parsed into one row shape each and validated with located errors."""

from pipelines.reconcile.billing.records import (
    AdReportRow,
    BillingBatch,
    BillingError,
    CloudCostRow,
)
from pipelines.reconcile.billing.sources import (
    FORMATS,
    ParseOptions,
    parse_envelope,
    parse_message,
    read_file,
)

__all__ = ["FORMATS", "AdReportRow", "BillingBatch", "BillingError", "CloudCostRow",
           "ParseOptions", "parse_envelope", "parse_message", "read_file"]
