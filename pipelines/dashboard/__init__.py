"""The finance dashboard: ROI, attribution models, lifecycle allocation, reconciliation drift
and alerts, read from the warehouse tables and served as plain HTML with inline SVG charts
(no build step, no JavaScript, nothing fetched from the internet)."""
