"""Pure, engine-free logic shared by the Flink jobs, the Spark backfill and the batch CLI.

One package per domain (journeys, attribution, roi, ltv, experiments, control, reconcile),
each importable from outside only through its face (its __init__); the shared vocabulary
(periods, lifecycle, ratios) and settings.py, which composes the domains, stay on top.
docs/architecture.md has the rules."""

from udfs.pickle_paths import install as _install_pinned_paths

_install_pinned_paths()
