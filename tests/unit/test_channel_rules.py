"""Channels from ordinary web traffic: the landing URL's UTM parameters, an ad platform's
click id or the referrer, through the shipped rule file (web analytics' default channel
grouping), and rule files that cannot be used named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from udfs.traffic import ChannelRulesError, load_channel_rules, parse_channel_rules, traffic_source

SHIPPED = Path(__file__).resolve().parents[2] / "jobs" / "config" / "channel_rules.yaml"
SHOP = "https://shop.example.com"

# landing URL, referrer -> channel, the rule's evidence, campaign
CASES = [
    (f"{SHOP}/?utm_source=google&utm_medium=cpc&utm_campaign=brand", "",
     "paid_search", "utm", "brand"),
    (f"{SHOP}/p/1?gclid=Cj0KCQ", "https://www.google.com/", "paid_search", "click_id:gclid", ""),
    (f"{SHOP}/?gbraid=0AAAA", "", "paid_search", "click_id:gbraid", ""),
    (f"{SHOP}/?msclkid=abc", "https://www.bing.com/", "paid_search", "click_id:msclkid", ""),
    (f"{SHOP}/?fbclid=IwAR0", "https://l.facebook.com/", "paid_social", "click_id:fbclid", ""),
    (f"{SHOP}/?ttclid=E.C.P", "", "paid_social", "click_id:ttclid", ""),
    (f"{SHOP}/?utm_source=facebook&utm_medium=paid_social&utm_campaign=spring", "",
     "paid_social", "utm", "spring"),
    (f"{SHOP}/?utm_source=youtube&utm_medium=cpv", "", "paid_video", "utm", ""),
    (f"{SHOP}/?utm_source=criteo&utm_medium=display", "", "display", "utm", ""),
    (f"{SHOP}/?utm_source=partner&utm_medium=cpc", "", "paid_other", "utm", ""),
    (f"{SHOP}/?utm_source=amazon&utm_medium=cpc", "", "paid_shopping", "utm", ""),
    (f"{SHOP}/?utm_source=google&utm_medium=cpc&utm_campaign=summer_shopping", "",
     "paid_shopping", "utm", "summer_shopping"),
    (f"{SHOP}/?utm_source=google&utm_medium=cpc&utm_campaign=pmax_cross-network", "",
     "cross_network", "utm", "pmax_cross-network"),
    (f"{SHOP}/?utm_source=newsletter&utm_medium=email&utm_campaign=weekly", "",
     "email", "utm", "weekly"),
    (f"{SHOP}/?utm_source=partnerx&utm_medium=affiliate", "", "affiliate", "utm", ""),
    (f"{SHOP}/?utm_source=twilio&utm_medium=sms", "", "sms", "utm", ""),
    (f"{SHOP}/?utm_source=app&utm_medium=push", "", "mobile_push", "utm", ""),
    (f"{SHOP}/?UTM_SOURCE=Google&UTM_MEDIUM=CPC", "", "paid_search", "utm", ""),
    (f"{SHOP}/blog", "https://www.google.co.uk/", "organic_search", "referrer", ""),
    (f"{SHOP}/blog", "https://duckduckgo.com/", "organic_search", "referrer", ""),
    (f"{SHOP}/", "https://t.co/xyz", "organic_social", "referrer", ""),
    (f"{SHOP}/", "https://www.linkedin.com/feed/", "organic_social", "referrer", ""),
    (f"{SHOP}/", "https://www.youtube.com/watch?v=1", "organic_video", "referrer", ""),
    (f"{SHOP}/", "https://news.ycombinator.com/item?id=1", "referral", "referrer", ""),
    (f"{SHOP}/cart", f"{SHOP}/p/1", "direct", "internal", ""),  # a click inside the site
    (f"{SHOP}/", "https://blog.shop.example.com/x", "direct", "internal", ""),
    # campaign parameters on an internal link (or passed on by a redirect): no new visit
    (f"{SHOP}/p/1?utm_source=google&utm_medium=cpc", f"{SHOP}/", "direct", "internal", ""),
    (f"{SHOP}/", "", "direct", "direct", ""),
    (f"{SHOP}/?utm_source=mystery", "", "unassigned", "utm", ""),
]


@pytest.mark.parametrize(("url", "referrer", "channel", "evidence", "campaign"), CASES)
def test_the_shipped_rules_name_the_channel_of_a_landing_request(
        url: str, referrer: str, channel: str, evidence: str, campaign: str) -> None:
    rules = load_channel_rules(SHIPPED)
    traffic = traffic_source(url, referrer, own_hosts=frozenset({"shop.example.com"}))
    assert traffic.evidence == evidence and traffic.campaign == campaign
    assert rules.classify(traffic).channel == channel


def test_utm_parameters_win_over_a_click_id_and_the_referrer() -> None:
    traffic = traffic_source(f"{SHOP}/?gclid=x&utm_source=newsletter&utm_medium=email",
                             "https://www.google.com/")
    assert (traffic.source, traffic.medium, traffic.evidence) == ("newsletter", "email", "utm")


def test_a_bare_query_string_is_read_like_a_url() -> None:
    traffic = traffic_source("utm_source=bing&utm_medium=cpc&utm_campaign=b")
    assert (traffic.source, traffic.medium, traffic.campaign) == ("bing", "cpc", "b")


def test_the_first_rule_that_matches_wins_and_names_itself() -> None:
    rules = parse_channel_rules("""
rules:
  - channel: brand
    name: brand-campaigns
    all: [{field: campaign, matches: '^brand'}]
  - channel: paid_search
    all: [{field: medium, equals: [cpc]}]
fallback: other
""", "mine.yaml")
    brand = rules.classify(
        traffic_source(f"{SHOP}/?utm_source=g&utm_medium=cpc&utm_campaign=Brand_x"))
    assert (brand.channel, brand.rule) == ("brand", "brand-campaigns")
    generic = rules.classify(traffic_source(f"{SHOP}/?utm_source=g&utm_medium=cpc"))
    assert (generic.channel, generic.rule) == ("paid_search", "paid_search")
    nothing = rules.classify(traffic_source(f"{SHOP}/", "https://example.org/"))
    assert (nothing.channel, nothing.rule) == ("other", "fallback")


@pytest.mark.parametrize(("text", "message"), [
    ("rules: []\n", "mine.yaml, line 1: rules: a list of at least one rule"),
    ("rules:\n  - channel: x\n    all:\n      - {field: sorce, equals: [a]}\n",
     "mine.yaml, line 4: rules[0].all[0].field: 'sorce' is not one of source, medium, "
     "campaign, evidence"),
    ("rules:\n  - channel: x\n    any:\n      - {field: medium, matches: '('}\n",
     "mine.yaml, line 4: rules[0].any[0].matches: not a regular expression"),
    ("rules:\n  - channel: x\n    all:\n      - {field: source, in_list: search}\n",
     "mine.yaml, line 4: rules[0].all[0].in_list: no list named 'search' under `lists`"),
    ("rules:\n  - channel: x\n", "mine.yaml, line 2: rules[0]: needs conditions under"),
    ("rules:\n  - all: [{field: medium, equals: [a]}]\n",
     "mine.yaml, line 2: rules[0].channel: missing"),
    ("rules:\n  - channel: x\n    al: [{field: medium, equals: [a]}]\n",
     "mine.yaml, line 3: rules[0].al: not a key of a rule"),
    ("rules:\n  - channel: x\n    all: [{field: medium, equals: [a], contains: [b]}]\n",
     "mine.yaml, line 3: rules[0].all[0]: needs exactly one test"),
    ("rules: [\n", "mine.yaml: not valid YAML"),
])
def test_a_rule_file_that_cannot_be_used_is_named_by_line_and_field(text: str,
                                                                   message: str) -> None:
    with pytest.raises(ChannelRulesError) as raised:
        parse_channel_rules(text, "mine.yaml")
    assert str(raised.value).startswith(message), str(raised.value)


def test_a_missing_rule_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ChannelRulesError, match="channel rules file not found: .*none.yaml"):
        load_channel_rules(tmp_path / "none.yaml")


def test_a_job_config_names_its_rule_file_relative_to_itself(tmp_path: Path) -> None:
    """`journey.channel_rules` is read relative to the config file, checked when the
    config loads (a broken file fails before any job starts, naming both files), and its
    text travels with the job."""
    import yaml

    from pipelines.settings.job_config import ConfigError, channel_rules_text, load_config

    (tmp_path / "rules").mkdir()
    rules = tmp_path / "rules" / "mine.yaml"
    rules.write_text("rules:\n  - channel: x\n    all: [{field: medium, equals: [cpc]}]\n")
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump({"journey": {"channel_rules": "rules/mine.yaml"}}))
    config = load_config(config_file)
    assert config.journey.channel_rules == str(rules.resolve())
    assert channel_rules_text(config) == (rules.read_text(), str(rules.resolve()))
    assert channel_rules_text(load_config())[1].endswith("jobs/config/channel_rules.yaml")

    rules.write_text("rules:\n  - channel: x\n    all: [{field: medum, equals: [cpc]}]\n")
    with pytest.raises(ConfigError) as raised:
        load_config(config_file)
    assert str(raised.value).startswith(
        f"{config_file}: journey.channel_rules: {rules}, line 3: rules[0].all[0].field: "
        "'medum' is not one of")
