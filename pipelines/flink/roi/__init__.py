"""The ROI job: credits, ad spend and GPU compute cost joined per day into ROI rows, with
lifecycle and LTV segments per order (pipelines/flink/roi/job.py wires them)."""
