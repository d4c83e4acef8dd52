"""The control loop (`seedance control`): the live metric stream -> anomaly detection and
rules (udfs/control/rules.py) -> decisions -> executors (a signed webhook, the warehouse) ->
verification through the same telemetry, every step recorded in the warehouse and on the
`control_actions` topic. See docs/control.md.

config.py    the validated control.yaml
state.py     the in-memory view: ROI changelog, recent GPU samples -> pool pressure
inputs.py    Kafka consumers (read_committed) feeding the state
executors.py the webhook (HMAC-signed, retried, idempotent) and warehouse executors
ledger.py    the CONTROL_* rows: warehouse upserts, reads, and the control_actions topic
service.py   `ControlService.step(now_ms)` and `approve`
metrics.py   the Prometheus gauges and counters, served over HTTP
"""
