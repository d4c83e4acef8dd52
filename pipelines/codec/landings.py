"""Touches from ordinary HTTP server spans: what an auto-instrumented web service already
sends becomes a touchpoint when the request is a landing (its URL has UTM parameters or
an ad platform's click id, or it came from another site), for the user the span names
(`enduser.id` or `user.id`), in the channel the channel rules give
(udfs/traffic/channel_rules.py). A span that says `marketing.channel` keeps it; a
request without campaign parameters or an external referrer (a direct visit, a click
inside the site) is no touch.

The rules are the shipped ones (jobs/config/channel_rules.yaml: web analytics' default
channel grouping) unless a job sets its own (`journey.channel_rules`): the decoder's
operator does, when it opens (pipelines/flink/attribution/decode.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schemas.telemetry import CAMPAIGN, CHANNEL, USER_ID, USER_ID_LEGACY
from udfs.traffic import (
    HTTP_TARGET,
    HTTP_URL,
    LANDING_KEYS,
    LANDING_MARKS,
    REFERER,
    URL_FULL,
    URL_QUERY,
    ChannelRules,
    Classification,
    host_of,
    landing_url,
    load_channel_rules,
    traffic_source,
)

# web analytics' default channel grouping: the rules unless a job names its own
SHIPPED_CHANNEL_RULES = Path(__file__).resolve().parents[2] / "jobs" / "config" / \
    "channel_rules.yaml"
SERVER_ADDRESS = "server.address"  # the host the request was sent to (its own site)
HTTP_HOST = "http.host"  # before the 1.21 conventions
# what a landing is read from: the span's own attributes (and its resource's user)
LANDING_READ = (*LANDING_KEYS, SERVER_ADDRESS, HTTP_HOST, USER_ID, USER_ID_LEGACY)

COOKIE = "http.request.header.cookie"  # the Cookie request header, where it is captured

_rules: ChannelRules | None = None
_user_from = ""  # journey.landing_user: an attribute, or "cookie:<name>" ("": none)


def use_channel_rules(rules: ChannelRules | None, user_from: str = "") -> None:
    """The rules every later decoding in this process applies (None: the shipped ones),
    and where a landing's user is when the span has no enduser.id / user.id."""
    global _rules, _user_from
    _rules, _user_from = rules, user_from


def landing_read() -> tuple[str, ...]:
    """The attributes a landing is read from, the configured user's included."""
    if not _user_from:
        return LANDING_READ
    return (*LANDING_READ, COOKIE if _user_from.startswith("cookie:") else _user_from)


def configured_user(attrs: Mapping[str, Any]) -> str:
    """The user `journey.landing_user` names: an attribute's text, or a cookie's value."""
    if not _user_from.startswith("cookie:"):
        return text_of(attrs.get(_user_from)) if _user_from else ""
    name = _user_from.removeprefix("cookie:")
    headers = attrs.get(COOKIE)
    for header in headers if isinstance(headers, list | tuple) else [text_of(headers)]:
        for pair in str(header).split(";"):
            key, _, value = pair.strip().partition("=")
            if key == name and value.strip('"'):
                return value.strip('"')
    return ""


def channel_rules() -> ChannelRules:
    global _rules
    if _rules is None:
        _rules = load_channel_rules(SHIPPED_CHANNEL_RULES)
    return _rules


def text_of(value: Any) -> str:
    """An attribute's text: a string, or the first of a list of strings (request headers
    are lists), as either decoder gives them."""
    if isinstance(value, dict):  # an AnyValue array, as protobuf's and JSON's decoders keep it
        value = [item.get("stringValue", item.get("string_value", ""))
                 for item in value.get("values") or [] if isinstance(item, dict)]
    if isinstance(value, list | tuple):
        value = value[0] if value else ""
    return value if isinstance(value, str) else ""


def has_landing_key(has: Any) -> bool:
    return any(has(key) for key in LANDING_KEYS)


def landing_candidate(attrs: Mapping[str, Any]) -> bool:
    """Whether a span may be a landing, by the test the protobuf scanner makes too
    (pipelines/codec/otlp_scan.c `landing_candidate`): a referrer attribute, or a URL that
    is a string holding a UTM parameter or a click id (any case)."""
    if REFERER in attrs:
        return True
    for key in (URL_FULL, URL_QUERY, HTTP_URL, HTTP_TARGET):
        url = attrs.get(key)
        if isinstance(url, str) and any(mark in url.lower() for mark in LANDING_MARKS):
            return True
    return False


def landing(attrs: Mapping[str, Any]) -> tuple[dict[str, str], Classification] | None:
    """The touch attributes of a landing span (channel, campaign when there is one, user)
    and the rule that named the channel; None when it is no landing (a direct visit, a
    click inside the site) or names no user (`enduser.id`, `user.id`, or where
    `journey.landing_user` says)."""
    if not landing_candidate(attrs):
        return None
    texts = {key: text_of(attrs.get(key)) for key in LANDING_READ}
    own = frozenset(host for host in (texts[SERVER_ADDRESS].lower(), texts[HTTP_HOST].lower(),
                                      host_of(texts[URL_FULL] or texts[HTTP_URL])) if host)
    url = landing_url(texts)
    traffic = traffic_source(url, texts[REFERER], own_hosts=frozenset(
        host.split(":")[0] for host in own))
    user = texts[USER_ID] or texts[USER_ID_LEGACY] or configured_user(attrs)
    if not traffic.is_landing or not user:
        return None
    classified = channel_rules().classify(traffic)
    touch = {CHANNEL: classified.channel, USER_ID: user}
    if traffic.campaign:
        touch[CAMPAIGN] = traffic.campaign
    return touch, classified
