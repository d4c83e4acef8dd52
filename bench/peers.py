"""The peer attribution packages are optional installs: say how to get them."""

from __future__ import annotations

import importlib.util
import sys

PEERS = (("mta", "mta"), ("ChannelAttribution", "channelattribution"))


def require_peers() -> None:
    missing = [name for module, name in PEERS if importlib.util.find_spec(module) is None]
    if missing:
        sys.exit(f"peer package(s) {', '.join(missing)} not installed: run "
                 "`.venv/bin/pip install -e '.[dev,bench]'` first")
