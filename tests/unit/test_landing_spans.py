"""Ordinary HTTP server spans, as auto-instrumentation writes them, become touches when the
request is a landing: the same on the C scanner's path and the Python decoder's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from pipelines.codec.landings import use_channel_rules
from schemas.events import EventColumns, records_of
from schemas.records import Touchpoint
from tests.otlp_payloads import T0, both, plain
from tests.spans import make_spans
from udfs.traffic import parse_channel_rules

SHOP = "https://shop.example.com"


def decoded(*spans: dict[str, object]) -> tuple[list[object], int, list[str]]:
    """(the records, the spans ignored, the dead letters' details) of one message of
    these spans, after checking that both decoders agree on it."""
    payload = encode_spans(make_spans([(f"GET /{n}", attrs, T0 + n * 1_000_000)
                                       for n, attrs in enumerate(spans)])).SerializeToString()
    fast, slow = both(payload)
    assert plain(fast) == plain(slow)
    return (records_of(EventColumns(fast.touches, fast.orders)), fast.ignored,
            [letter.detail for letter in fast.dead_letters])


@pytest.fixture(autouse=True)
def shipped_rules() -> Iterator[None]:
    use_channel_rules(None)
    yield
    use_channel_rules(None)


def test_a_landing_with_utm_parameters_is_a_touch_of_its_user() -> None:
    records, ignored, dead = decoded({
        "url.full": f"{SHOP}/p/1?utm_source=google&utm_medium=cpc&utm_campaign=brand",
        "enduser.id": "u-1", "http.request.method": "GET"})
    assert records == [Touchpoint("u-1", T0 // 1_000_000, "paid_search", "brand",
                                  records[0].trace_id, records[0].span_id)]
    assert (ignored, dead) == (0, [])


def test_the_referrer_and_click_ids_name_the_channel_and_clicks_inside_the_site_do_not_count(
        ) -> None:
    records, ignored, _ = decoded(
        {"url.path": "/", "url.query": "fbclid=Iw1", "server.address": "shop.example.com",
         "user.id": "u-1"},
        {"url.path": "/blog", "server.address": "shop.example.com", "user.id": "u-2",
         "http.request.header.referer": ("https://www.google.co.uk/",)},
        {"url.path": "/cart", "server.address": "shop.example.com", "user.id": "u-1",
         "http.request.header.referer": (f"{SHOP}/p/1",)},  # a click inside the site
        {"url.full": f"{SHOP}/p/3?utm_source=google&utm_medium=cpc", "user.id": "u-1",
         "http.request.header.referer": (f"{SHOP}/",)},  # an internal link with UTM
        {"url.full": f"{SHOP}/", "user.id": "u-3"},  # a direct visit
        {"url.full": f"{SHOP}/?utm_source=news&utm_medium=email"},  # no user: no touch
        {"http.route": "/health"})  # plain tracing
    assert [(r.user_id, r.channel) for r in records] == [("u-1", "paid_social"),
                                                         ("u-2", "organic_search")]
    assert ignored == 5


def test_a_span_that_names_its_channel_keeps_it() -> None:
    records, _, _ = decoded({"url.full": f"{SHOP}/?utm_source=google&utm_medium=cpc",
                             "marketing.channel": "affiliate", "user.id": "u-1"})
    assert [r.channel for r in records] == ["affiliate"]


def test_a_landing_whose_campaign_breaks_the_contract_is_a_dead_letter() -> None:
    records, _, dead = decoded({"url.full": f"{SHOP}/?utm_source=x&utm_medium=cpc&"
                                            f"utm_campaign={'c' * 300}", "user.id": "u-1"})
    assert records == [] and len(dead) == 1 and "marketing.campaign" in dead[0]


def test_a_teams_own_rules_decide() -> None:
    use_channel_rules(parse_channel_rules("""
rules:
  - channel: brand_search
    all: [{field: campaign, matches: '^brand'}]
fallback: other
"""))
    records, _, _ = decoded(
        {"url.full": f"{SHOP}/?utm_source=google&utm_medium=cpc&utm_campaign=brand_x",
         "user.id": "u-1"},
        {"url.full": f"{SHOP}/?gclid=1", "user.id": "u-2"})
    assert [r.channel for r in records] == ["brand_search", "other"]


@pytest.mark.parametrize(("user_from", "attrs"), [
    ("http.request.header.x-user-id", {"http.request.header.x-user-id": ("u-7",)}),
    ("cookie:uid", {"http.request.header.cookie": ("theme=dark; uid=u-7; lang=en",)}),
    ("session.user", {"session.user": "u-7"}),
])
def test_a_landing_without_enduser_id_takes_its_user_where_the_config_says(
        user_from: str, attrs: dict[str, object]) -> None:
    landing = {"url.full": f"{SHOP}/?utm_source=google&utm_medium=cpc", **attrs}
    records, ignored, _ = decoded(landing)
    assert (records, ignored) == ([], 1)  # no user where it looks by default
    use_channel_rules(None, user_from)
    records, _, _ = decoded(landing, {"url.full": f"{SHOP}/?gclid=1", "enduser.id": "u-8",
                                      **attrs})
    assert [(r.user_id, r.channel) for r in records] == [("u-7", "paid_search"),
                                                         ("u-8", "paid_search")]


def test_a_landing_user_setting_that_names_nothing_is_refused() -> None:
    from udfs.journeys import JourneyConfig

    for wrong in ("cookie:", " uid", "a b"):
        with pytest.raises(ValueError, match="landing_user must be an attribute name or "
                                             "cookie:<name>"):
            JourneyConfig(landing_user=wrong)
