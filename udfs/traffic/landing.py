"""Where a visit came from, read off its landing request: the source, medium and campaign
a channel rule looks at (udfs/traffic/channel_rules.py).

What an auto-instrumented web server already records on its server span is enough: the
requested URL (`url.full`, or `url.path` + `url.query`; `http.url` / `http.target` in the
older conventions) and, where the Collector or the instrumentation is told to capture the
header, the referrer (`http.request.header.referer`). The order of evidence is the one web
analytics use: UTM parameters, then an ad platform's click id (auto-tagging), then the
referring site; a request with none of them is a direct visit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

DIRECT_SOURCE = "(direct)"
NO_MEDIUM = "(none)"

# Click ids an ad platform appends to the landing URL when it auto-tags its clicks: the
# source and medium a click with one of them came from (the UTM parameters win when both
# are present, as they do in web analytics).
CLICK_IDS: dict[str, tuple[str, str]] = {
    "gclid": ("google", "cpc"),
    "gbraid": ("google", "cpc"),
    "wbraid": ("google", "cpc"),
    "dclid": ("google", "display"),
    "msclkid": ("bing", "cpc"),
    "fbclid": ("facebook", "paid"),
    "ttclid": ("tiktok", "paid"),
    "li_fat_id": ("linkedin", "paid"),
    "twclid": ("twitter", "paid"),
    "rdt_cid": ("reddit", "paid"),
    "epik": ("pinterest", "paid"),
    "sccid": ("snapchat", "paid"),
    "yclid": ("yandex", "cpc"),
}


@dataclass(frozen=True)
class TrafficSource:
    """A visit's source (a site or platform name, lower case), medium, campaign, and what
    decided them (`evidence`: "utm", "click_id:<name>", "referrer", "direct", or
    "internal": a click inside the site)."""

    source: str
    medium: str
    campaign: str
    evidence: str

    @property
    def is_landing(self) -> bool:
        """Campaign parameters, a click id or another site: not a direct visit, not a click
        inside one."""
        return self.evidence not in ("direct", "internal")


def query_of(url: str) -> dict[str, str]:
    """A URL's (or a bare query string's) parameters, the first value of each, names in
    lower case."""
    query = urlsplit(url).query if ("?" in url or "://" in url) else url
    return {name.lower(): values[0].strip() for name, values in
            parse_qs(query, keep_blank_values=True).items() if values}


def host_of(url: str) -> str:
    """The host of an absolute URL, lower case and without a leading "www." ("" if the
    text is not an absolute URL)."""
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return ""
    return host[4:] if host.startswith("www.") else host


def traffic_source(url: str, referrer: str = "", own_hosts: frozenset[str] = frozenset()
                   ) -> TrafficSource:
    """The source of a visit that landed on `url` from `referrer` ("" when not recorded).
    A referrer on the site itself (the landing URL's host, or one of `own_hosts`) is a
    click inside a visit: no landing, whatever the URL carries (campaign parameters kept
    on internal links, a redirect that passes them on), evidence "internal"."""
    params = query_of(url)
    campaign = params.get("utm_campaign", "")
    referring = host_of(referrer)
    if referring and _same_site(referring, {host_of(url), *own_hosts}):
        return TrafficSource(DIRECT_SOURCE, NO_MEDIUM, campaign, "internal")
    if params.get("utm_source") or params.get("utm_medium"):
        return TrafficSource(params.get("utm_source", "").lower() or "(not set)",
                             params.get("utm_medium", "").lower() or "(not set)",
                             campaign, "utm")
    for name, (source, medium) in CLICK_IDS.items():
        if params.get(name):
            return TrafficSource(source, medium, campaign, f"click_id:{name}")
    if referring:
        return TrafficSource(referring, "referral", campaign, "referrer")
    return TrafficSource(DIRECT_SOURCE, NO_MEDIUM, campaign, "direct")


def _same_site(host: str, own: set[str]) -> bool:
    return any(host == mine or host.endswith("." + mine) for mine in own if mine)


# The span attributes a landing is read from (OpenTelemetry's HTTP conventions, current
# and older): the URL as a whole, or its path and query apart; the referrer header where
# the instrumentation records it (a list of values, as every request header).
URL_FULL = "url.full"
URL_QUERY = "url.query"
HTTP_URL = "http.url"  # before the 1.21 conventions
HTTP_TARGET = "http.target"  # before the 1.21 conventions: path and query
REFERER = "http.request.header.referer"
LANDING_KEYS = (URL_FULL, URL_QUERY, HTTP_URL, HTTP_TARGET, REFERER)

# What a URL must hold for its span to be looked at as a landing (any case): a UTM
# parameter or a click id. The protobuf scanner (pipelines/codec/otlp_scan.c) makes the
# same test, so both decoders pass the same spans on; a span with a referrer is always
# looked at (pipelines/codec/landings.py).
LANDING_MARKS = ("utm_", *(f"{name}=" for name in CLICK_IDS))


def landing_url(texts: Mapping[str, str]) -> str:
    """The requested URL, from whichever of the conventions' attributes a span has (their
    texts by key)."""
    for key in (URL_FULL, HTTP_URL):
        if texts.get(key):
            return texts[key]
    query = texts.get(URL_QUERY, "")
    return "?" + query if query else texts.get(HTTP_TARGET, "")
