"""Marketing channels from ordinary web traffic: a landing request's source, medium and
campaign (landing.py), and the rules that name its channel (channel_rules.py)."""

from udfs.traffic.channel_rules import (
    ChannelRules,
    ChannelRulesError,
    Classification,
    load_channel_rules,
    parse_channel_rules,
)
from udfs.traffic.landing import (
    CLICK_IDS,
    HTTP_TARGET,
    HTTP_URL,
    LANDING_KEYS,
    LANDING_MARKS,
    REFERER,
    URL_FULL,
    URL_QUERY,
    TrafficSource,
    host_of,
    landing_url,
    traffic_source,
)

__all__ = [
    "CLICK_IDS",
    "HTTP_TARGET",
    "HTTP_URL",
    "LANDING_KEYS",
    "LANDING_MARKS",
    "REFERER",
    "URL_FULL",
    "URL_QUERY",
    "ChannelRules",
    "ChannelRulesError",
    "Classification",
    "TrafficSource",
    "host_of",
    "landing_url",
    "load_channel_rules",
    "parse_channel_rules",
    "traffic_source",
]
