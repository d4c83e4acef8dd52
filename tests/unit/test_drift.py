"""Drift arithmetic, currencies, totals and alert decisions (udfs/reconcile/drift.py,
udfs/periods.py)."""

import math

import pytest

from udfs.periods import days_between, local_day, split_by_day, utc_bounds_ms
from udfs.reconcile.drift import (
    BELOW_MIN_VOLUME,
    BREACH,
    NO_REPORT,
    OK,
    AlertState,
    Amount,
    Comparison,
    CurrencyError,
    Key,
    RateTable,
    Rule,
    Transition,
    compare,
    decide,
    drift,
    state_of,
    top_contributors,
    total,
)

DAY = "2025-03-01"
RULE = Rule(threshold=0.05, min_volume=10)


def key(metric="spend", entity="c1", day=DAY):
    return Key("campaign", "google_ads", "123", entity, day, metric)


def usd(*values):
    return [Amount(v, "USD") for v in values]


# --- drift ---------------------------------------------------------------------------

def test_drift_is_relative_to_theirs():
    assert drift(107.0, 100.0) == pytest.approx(0.07)
    assert drift(93.0, 100.0) == pytest.approx(-0.07)
    # under-reported by 7 %: they say 93 where we count 100 -> we are 7.5 % above them
    assert drift(100.0, 93.0) == pytest.approx(7 / 93)


def test_drift_with_zero_on_one_side_or_both():
    assert drift(0.0, 0.0) == 0.0
    assert drift(5.0, 0.0) == math.inf
    assert drift(-5.0, 0.0) == -math.inf
    assert drift(0.0, 40.0) == -1.0


def test_drift_against_a_negative_bill_keeps_the_sign_meaning_we_count_more():
    assert drift(-8.0, -10.0) == pytest.approx(0.2)


def test_threshold_is_strict_and_float_noise_does_not_alarm():
    assert compare(key(), usd(105.0), usd(100.0), RULE).status == OK
    assert compare(key(), usd(1.05 * 100), usd(100.0), RULE).status == OK
    assert compare(key(), usd(105.01), usd(100.0), RULE).status == BREACH
    assert compare(key(), usd(94.9), usd(100.0), RULE).status == BREACH


def test_minimum_volume_keeps_tiny_numbers_quiet():
    small = compare(key(), usd(3.0), usd(1.0), RULE)  # +200 %, but only 3 USD
    assert small.status == BELOW_MIN_VOLUME and small.drift == pytest.approx(2.0)
    # the volume is the larger side: 12 spent by us against 0 reported is a breach
    assert compare(key(), usd(12.0), usd(0.0), RULE).status == BREACH


def test_zero_on_their_side_is_infinite_drift_and_a_breach_above_the_volume():
    c = compare(key(), usd(50.0), usd(0.0), RULE)
    assert c.drift == math.inf and c.status == BREACH
    assert (c.ours, c.theirs, c.difference) == (50.0, 0.0, 50.0)


def test_row_missing_on_their_side_counts_as_zero_but_stays_visible():
    c = compare(key(), usd(50.0), [], RULE)
    assert c.theirs is None and c.ours == 50.0
    assert c.drift == math.inf and c.status == BREACH
    assert c.currency == "USD"


def test_row_missing_on_our_side_is_minus_one_hundred_percent():
    c = compare(key("conversions"), [], [Amount(20.0)], RULE)
    assert c.ours is None and c.theirs == 20.0
    assert c.drift == -1.0 and c.status == BREACH
    assert c.currency == ""


def test_both_sides_zero_is_no_drift():
    c = compare(key(), usd(0.0), usd(0.0), Rule(0.05, 0.0))
    assert c.drift == 0.0 and c.status == OK


def test_uncovered_key_is_not_compared():
    c = compare(key(), usd(500.0), [], RULE, covered=False)
    assert c.status == NO_REPORT


def test_several_rows_on_one_side_are_added_exactly():
    c = compare(key(), usd(0.1, 0.2, 0.3), usd(0.6), Rule(0.0, 0.0))
    assert c.ours == 0.6 and c.drift == 0.0


# --- currencies ----------------------------------------------------------------------

def test_mismatched_currencies_are_an_error_naming_the_key():
    with pytest.raises(CurrencyError, match=r"google_ads/123/c1 2025-03-01 spend: .*EUR.*USD"):
        compare(key(), [Amount(100.0, "EUR")], usd(108.0), RULE)


def test_mismatched_currencies_convert_with_a_rate_table_into_their_currency():
    rates = RateTable("USD", {"EUR": 1.08})
    c = compare(key(), [Amount(100.0, "EUR")], usd(108.0), RULE, rates)
    assert c.currency == "USD" and c.ours == pytest.approx(108.0) and c.status == OK


def test_daily_rates_win_over_the_flat_rate_and_a_missing_rate_is_named():
    rates = RateTable("USD", {"EUR": 1.0}, {(DAY, "EUR"): 1.10})
    assert compare(key(), [Amount(100.0, "EUR")], usd(110.0), RULE, rates).drift \
        == pytest.approx(0.0)
    with pytest.raises(CurrencyError, match="no exchange rate for GBP on 2025-03-01"):
        compare(key(), [Amount(100.0, "GBP")], usd(110.0), RULE, rates)


def test_cross_rate_between_two_non_base_currencies():
    rates = RateTable("USD", {"EUR": 1.10, "GBP": 1.32})
    c = compare(key(), [Amount(120.0, "EUR")], [Amount(100.0, "GBP")], RULE, rates)
    assert c.currency == "GBP" and c.ours == pytest.approx(100.0)


def test_counts_never_need_a_rate():
    c = compare(key("conversions"), [Amount(10.0, "EUR")], [Amount(10.0, "USD")], RULE)
    assert c.status == OK and c.currency == ""


# --- contributors and totals ---------------------------------------------------------

def test_top_contributors_rank_by_absolute_difference():
    rows = top_contributors({"a": 10.0, "b": 50.0, "c": 1.0}, {"a": 30.0, "b": 50.0}, n=2)
    assert [r.name for r in rows] == ["a", "c"]
    assert rows[0] == ("a", 10.0, 30.0)
    # one-sided breakdown (our orders; the platform has none): theirs stays None
    assert top_contributors({"o1": 3.0, "o2": 9.0}, {}, n=5)[0] == ("o2", 9.0, None)


def test_compare_lists_parts_of_our_side():
    ours = [Amount(1.0, "", "order-1"), Amount(1.0, "", "order-2"), Amount(0.5, "", "order-1")]
    c = compare(key("conversions"), ours, [Amount(2.0)], RULE, top_n=1)
    assert c.contributors == (("order-1", 1.5, None),)


def comparison(entity, ours, theirs, currency="USD", status=OK, metric="spend"):
    return Comparison(key(metric, entity), currency, ours, theirs, 0.0, status, RULE)


def test_total_adds_covered_keys_and_names_the_largest_differences():
    rows = [comparison("c1", 100.0, 100.0), comparison("c2", 50.0, None),
            comparison("c3", None, 20.0), comparison("c4", 900.0, None, status=NO_REPORT)]
    t = total(DAY, "spend", rows, RULE)
    assert t.key == Key("total", "*", "*", "*", DAY, "spend")
    assert (t.ours, t.theirs, t.currency) == (150.0, 120.0, "USD")
    assert t.drift == pytest.approx(0.25) and t.status == BREACH
    assert [c.name for c in t.contributors][:2] == ["google_ads/123/c2", "google_ads/123/c3"]


def test_total_over_several_currencies_needs_a_reporting_currency_and_rates():
    rows = [comparison("c1", 100.0, 100.0), comparison("c2", 100.0, 100.0, currency="EUR")]
    with pytest.raises(CurrencyError, match="set currency.reporting"):
        total(DAY, "spend", rows, RULE)
    with pytest.raises(CurrencyError, match="EUR"):
        total(DAY, "spend", rows, RULE, RateTable(), currency="USD")
    t = total(DAY, "spend", rows, RULE, RateTable("USD", {"EUR": 1.1}), currency="USD")
    assert t.ours == pytest.approx(210.0) and t.currency == "USD"


def test_total_of_nothing_covered_is_no_report():
    assert total(DAY, "spend", [comparison("c1", 5.0, None, status=NO_REPORT)],
                 RULE).status == NO_REPORT


# --- alert decisions -----------------------------------------------------------------

def breach():
    return compare(key(), usd(120.0), usd(100.0), RULE)


def fine():
    return compare(key(), usd(101.0), usd(100.0), RULE)


def test_a_breach_opens_once_per_key_and_day():
    assert decide(None, breach()) == Transition("open", 1)
    assert decide(AlertState("open", 1), breach()) is None


def test_back_under_the_threshold_resolves_and_a_new_breach_reopens():
    assert decide(AlertState("open", 1), fine()) == Transition("resolve", 1)
    assert decide(AlertState("resolved", 1), fine()) is None
    assert decide(AlertState("resolved", 1), breach()) == Transition("open", 2)
    assert decide(None, fine()) is None


def test_a_vanished_key_resolves_but_missing_coverage_changes_nothing():
    assert decide(AlertState("open", 1), None) == Transition("resolve", 1)
    uncovered = compare(key(), usd(120.0), [], RULE, covered=False)
    assert decide(AlertState("open", 1), uncovered) is None
    assert decide(None, uncovered) is None


def test_below_minimum_volume_resolves_an_open_alert():
    small = compare(key(), usd(3.0), usd(1.0), RULE)
    assert decide(AlertState("open", 1), small) == Transition("resolve", 1)


def test_state_from_stored_events():
    assert state_of([]) is None
    assert state_of([("open", 1)]) == ("open", 1)
    assert state_of([("open", 1), ("resolve", 1)]) == ("resolved", 1)
    assert state_of([("resolve", 1), ("open", 2), ("open", 1)]) == ("open", 2)


def test_rules_reject_nonsense():
    with pytest.raises(ValueError, match="threshold"):
        Rule(-0.1)
    with pytest.raises(ValueError, match="min_volume"):
        Rule(0.05, float("nan"))


# --- days ----------------------------------------------------------------------------

def test_local_day_follows_the_account_time_zone():
    ts = 1_740_790_800_000  # 2025-03-01T01:00:00Z
    assert local_day(ts) == "2025-03-01"
    assert local_day(ts, "America/New_York") == "2025-02-28"
    assert local_day(ts, "Asia/Tokyo") == "2025-03-01"
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        local_day(ts, "Mars/Olympus")


def test_split_by_day_shares_a_period_crossing_midnight_by_time():
    start = 1_740_787_200_000 - 6 * 3_600_000  # 2025-02-28T18:00Z
    parts = split_by_day(start, start + 24 * 3_600_000, 24.0)
    assert parts == [("2025-02-28", 6.0), ("2025-03-01", 18.0)]
    assert split_by_day(start, start, 5.0) == [("2025-02-28", 5.0)]


def test_day_ranges():
    assert days_between("2025-02-27", "2025-03-01") == ["2025-02-27", "2025-02-28",
                                                        "2025-03-01"]
    with pytest.raises(ValueError, match="ends"):
        days_between("2025-03-02", "2025-03-01")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        days_between("2025-3-1", "2025-03-01")
    start, end = utc_bounds_ms(DAY, DAY, slack_days=1)
    assert end - start == 3 * 86_400_000
