"""The sample shop's touches as ordinary HTTP server spans, the way auto-instrumentation
records a landing request (schemas/TELEMETRY.md, section 0): no `marketing.*` attribute,
the channel carried by the landing URL's UTM parameters or the referrer instead. Under
the shipped channel rules (jobs/config/channel_rules.yaml) each gives back the channel
and campaign of the touch, so both forms of a sample are credited alike."""

from __future__ import annotations

from urllib.parse import urlencode

from schemas import telemetry as attr

SHOP_HOST = "shop.example.com"
# the generator's channels (pipelines/sources/generator.py CHANNELS) as a click brings them
UTM: dict[str, tuple[str, str]] = {  # channel -> (utm_source, utm_medium)
    "paid_search": ("google", "cpc"),
    "paid_social": ("facebook", "paid_social"),
    "display": ("dv360", "display"),
    "email": ("newsletter", "email"),
    "affiliate": ("partner", "affiliate"),
}
REFERRERS = {"organic_search": "https://www.google.com/"}  # channel -> a referring page

TOUCH_FORMS = ("attributes", "http")


def landing_attributes(user_id: str, channel: str, campaign: str) -> dict[str, object]:
    """A landing request's server span attributes for a touch of `channel`."""
    attributes: dict[str, object] = {
        attr.USER_ID_LEGACY: user_id, "http.request.method": "GET", "url.path": "/landing",
        "url.scheme": "https", "server.address": SHOP_HOST}
    if channel in UTM:
        source, medium = UTM[channel]
        query = {"utm_source": source, "utm_medium": medium}
        if campaign:
            query["utm_campaign"] = campaign
        attributes["url.query"] = urlencode(query)
    elif channel in REFERRERS and not campaign:
        attributes["http.request.header.referer"] = (REFERRERS[channel],)
    else:
        raise ValueError(f"no landing form for channel {channel!r} with campaign "
                         f"{campaign!r}")
    return attributes
