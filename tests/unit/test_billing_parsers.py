"""Billing parsers on fixture files: Google Ads, Meta Insights, generic CSV, FOCUS 1.2/1.3
(CSV and Parquet), Kafka envelopes, and the located errors of bad input."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipelines.reconcile.billing import (
    BillingError,
    ParseOptions,
    parse_envelope,
    parse_message,
    read_file,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "billing"
AT = "2025-03-04T06:00:00.000000Z"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- Google Ads ----------------------------------------------------------------------

def test_google_ads_search_stream_json():
    batch = read_file(FIXTURES / "google_ads_stream.json", reported_at=AT)
    assert batch.format == "google_ads"
    first, second = batch.ads
    assert (first.platform, first.account, first.campaign, first.day) == \
        ("google_ads", "1234567890", "111", "2025-03-01")
    assert first.spend == pytest.approx(125.43)  # cost_micros / 1e6
    assert (first.conversions, first.revenue, first.currency) == (12.5, 640.25, "USD")
    assert first.time_zone == "America/New_York" and first.date_basis == "interaction"
    assert first.reported_at == AT
    assert first.source.endswith("google_ads_stream.json:$[0].results[0]")
    # proto3 JSON leaves zero metrics out: absent means 0, not an error
    assert (second.spend, second.conversions, second.revenue) == (9.99, 0.0, 0.0)


def test_google_ads_csv_with_gaql_headers_and_dashed_customer_id():
    batch = read_file(FIXTURES / "google_ads.csv", reported_at=AT)
    assert [(r.account, r.day, r.spend, r.currency, r.time_zone) for r in batch.ads] == [
        ("1234567890", "2025-03-01", 125.43, "EUR", "Europe/Berlin"),
        ("1234567890", "2025-03-02", 98.0, "EUR", "Europe/Berlin")]
    assert batch.ads[0].source.endswith("google_ads.csv:2")


def test_google_ads_prefers_conversion_date_metrics_for_the_whole_file(tmp_path):
    rows = [{"customer": {"id": "1", "currencyCode": "USD"}, "campaign": {"id": "9"},
             "segments": {"date": "2025-03-01"},
             "metrics": {"costMicros": "1000000", "conversions": 5, "conversionsValue": 50,
                         "conversionsByConversionDate": 4,
                         "conversionsValueByConversionDate": 40}},
            {"customer": {"id": "1", "currencyCode": "USD"}, "campaign": {"id": "10"},
             "segments": {"date": "2025-03-01"},
             "metrics": {"costMicros": "1000000", "conversions": 2}}]
    batch = read_file(write(tmp_path, "g.json", json.dumps({"results": rows})))
    assert [(r.conversions, r.revenue, r.date_basis) for r in batch.ads] == [
        (4.0, 40.0, "conversion"), (0.0, 0.0, "conversion")]


def test_google_ads_errors_are_located_and_all_reported(tmp_path):
    path = write(tmp_path, "g.csv",
                 "customer.id,campaign.id,segments.date,metrics.cost_micros,"
                 "metrics.conversions,metrics.conversions_value\n"
                 "1,9,2025-03-01,1.5,1,1\n"
                 "1,9,03/01/2025,100,x,1\n")
    with pytest.raises(BillingError) as caught:
        read_file(path)
    text = str(caught.value)
    assert "g.csv:2: metrics.cost_micros: not a whole number: '1.5'" in text
    assert "g.csv:2: customer.currency_code: missing: select customer.currency_code" in text
    assert "g.csv:3: segments.date: not a YYYY-MM-DD date: '03/01/2025'" in text
    assert "g.csv:3: metrics.conversions: not a number: 'x'" in text
    # a default currency fills in for reports that do not select it
    path = write(tmp_path, "ok.csv", "customer.id,campaign.id,segments.date,"
                 "metrics.cost_micros,metrics.conversions,metrics.conversions_value\n"
                 "1,9,2025-03-01,100,1,1\n")
    assert read_file(path, ParseOptions(default_currency="gbp")).ads[0].currency == "GBP"


def test_google_ads_csv_missing_column_is_named(tmp_path):
    path = write(tmp_path, "g.csv", "customer.id,campaign.id,segments.date,metrics.cost_micros\n"
                                    "1,9,2025-03-01,100\n")
    with pytest.raises(BillingError, match=r"g.csv:1: header: missing column\(s\) "
                                           r"metrics.conversions, metrics.conversions_value"):
        read_file(f"google_ads:{path}")


# --- Meta ----------------------------------------------------------------------------

def test_meta_counts_one_purchase_alias_only():
    batch = read_file(FIXTURES / "meta_insights.json", reported_at=AT)
    first, second = batch.ads
    assert (first.platform, first.account, first.campaign, first.day, first.currency) == \
        ("meta", "987654321", "23850000000000001", "2025-03-01", "USD")
    assert first.spend == 250.40
    assert first.conversions == 7.0  # not 21: three aliases of the same purchases
    assert first.revenue == 431.50
    assert (second.conversions, second.revenue) == (0.0, 0.0)  # no purchase at all


def test_meta_alias_preference_is_configurable(tmp_path):
    row = {"account_id": "act_5", "account_currency": "EUR", "campaign_id": "c",
           "spend": "1.00", "date_start": "2025-03-01", "date_stop": "2025-03-01",
           "actions": [{"action_type": "purchase", "value": "3"},
                       {"action_type": "offsite_conversion.fb_pixel_purchase", "value": "2"}]}
    path = write(tmp_path, "m.json", json.dumps({"data": [row]}))
    assert read_file(path).ads[0].conversions == 3.0
    pixel_first = ParseOptions(meta_purchase_actions=("offsite_conversion.fb_pixel_purchase",))
    only = read_file(path, pixel_first).ads[0]
    assert (only.conversions, only.account) == (2.0, "5")


def test_meta_errors_are_located(tmp_path):
    rows = [{"account_id": "5", "account_currency": "USD", "campaign_id": "c", "spend": "1,5",
             "date_start": "2025-03-01", "date_stop": "2025-03-07"},
            {"account_id": "5", "campaign_id": "c", "spend": "2", "date_start": "2025-03-01",
             "date_stop": "2025-03-01", "actions": [{"action_type": "purchase", "value": "?"}]}]
    path = write(tmp_path, "m.jsonl", "\n".join(json.dumps(r) for r in rows))
    with pytest.raises(BillingError) as caught:
        read_file(f"meta:{path}")
    text = str(caught.value)
    assert "m.jsonl:1: spend: not a number: '1,5'" in text
    assert "m.jsonl:1: date_start: 2025-03-01..2025-03-07 is not one day: request " \
           "time_increment=1" in text
    assert "m.jsonl:2: actions: purchase: not a number: '?'" in text
    assert "m.jsonl:2: account_currency: missing" in text


# --- generic -------------------------------------------------------------------------

def test_generic_csv_keeps_unreported_metrics_apart_from_zero():
    batch = read_file(FIXTURES / "generic.csv", reported_at=AT)
    first, second = batch.ads
    assert (first.platform, first.campaign, first.spend, first.conversions, first.revenue) == \
        ("tiktok", "tt-55", 310.0, 9.0, 512.40)
    assert (first.attribution_window, first.date_basis) == ("7d_click", "conversion")
    assert (second.spend, second.conversions, second.revenue) == (45.10, None, None)


def test_generic_csv_header_and_values_checked(tmp_path):
    with pytest.raises(BillingError, match=r"header: missing column\(s\) spend"):
        read_file(write(tmp_path, "g.csv", "platform,account_id,currency,campaign_id,date,"
                                           "conversions,conversion_value\n"))
    path = write(tmp_path, "h.csv", "platform,account_id,currency,campaign_id,date,spend,"
                                    "conversions,conversion_value\n"
                                    "x,1,dollars,c,2025-03-01,-4,1,1\n")
    with pytest.raises(BillingError) as caught:
        read_file(path)
    assert "h.csv:2: currency: not an ISO 4217 currency code: 'dollars'" in str(caught.value)
    assert "h.csv:2: spend: negative: '-4'" in str(caught.value)


# --- FOCUS ---------------------------------------------------------------------------

def cost_by(batch):
    out = {}
    for row in batch.cloud:
        key = (row.resource_id, row.day, row.charge_category)
        out[key] = round(out.get(key, 0.0) + row.cost, 9)
    return out


def test_focus_1_2_csv_effective_cost_per_resource_and_day_with_corrections():
    batch = read_file(FIXTURES / "focus_1_2.csv", reported_at=AT)
    assert batch.format == "focus"
    assert cost_by(batch) == {
        ("vm-gpu-a", "2025-03-01", "Usage"): pytest.approx(21.60 - 1.20),
        # 18:00 to 06:00 crosses midnight: half of the 12 hours on each day
        ("vm-gpu-b", "2025-03-01", "Usage"): pytest.approx(2.70),
        ("vm-gpu-b", "2025-03-02", "Usage"): pytest.approx(2.70)}
    a = next(r for r in batch.cloud if r.resource_id == "vm-gpu-a")
    assert (a.correction_cost, a.lines, a.currency, a.provider) == \
        (pytest.approx(-1.20), 2, "USD", "ExampleCloud")
    assert batch.skipped == 1  # the tax line has no ResourceId
    assert batch.periods == {("acct-1", "2025-03-01T00:00:00.000000Z")}


def test_focus_1_3_parquet_with_timestamp_columns(tmp_path):
    table = pacsv.read_csv(FIXTURES / "focus_1_3.csv")
    # real exports type the periods as timestamps; the CSV reader already did
    assert pa.types.is_timestamp(table.schema.field("ChargePeriodStart").type)
    path = tmp_path / "focus.parquet"
    pq.write_table(table, path)
    batch = read_file(path, reported_at=AT)
    (row,) = batch.cloud
    assert (row.resource_id, row.day, row.currency, row.provider) == \
        ("node-7/gpu-0", "2025-03-01", "EUR", "NeoGPU")
    assert row.cost == pytest.approx(3.60) and row.lines == 2


def test_focus_errors_are_located(tmp_path):
    header = ("BillingAccountId,BillingCurrency,BillingPeriodStart,ChargePeriodStart,"
              "ChargePeriodEnd,ChargeCategory,ChargeClass,EffectiveCost,ResourceId\n")
    path = write(tmp_path, "f.csv", header +
                 "a,USD,2025-03-01,2025-03-01T05:00:00Z,2025-03-01T04:00:00Z,Usage,,1,r\n"
                 "a,USD,2025-03-01,2025-03-01T05:00:00Z,2025-03-01T06:00:00Z,Refund,Oops,x,r\n")
    with pytest.raises(BillingError) as caught:
        read_file(path)
    text = str(caught.value)
    assert "f.csv:2: ChargePeriodEnd: 2025-03-01T04:00:00+00:00 is not after" in text
    assert "f.csv:3: ChargeCategory: must be one of Usage, Purchase, Tax, Credit, " \
           "Adjustment, got 'Refund'" in text
    assert "f.csv:3: ChargeClass: must be empty or Correction, got 'Oops'" in text
    assert "f.csv:3: EffectiveCost: not a number: 'x'" in text
    partial = write(tmp_path, "g.csv", "BillingAccountId,ChargePeriodStart\n")
    with pytest.raises(BillingError, match=r"missing FOCUS column\(s\) .*EffectiveCost"):
        read_file(f"focus:{partial}")


# --- files and envelopes -------------------------------------------------------------

def test_unknown_format_and_missing_file_say_what_to_do(tmp_path):
    with pytest.raises(BillingError, match="cannot tell the format .* name it as FORMAT:"):
        read_file(write(tmp_path, "x.csv", "a,b\n1,2\n"))
    with pytest.raises(BillingError, match="no such file"):
        read_file(tmp_path / "nope.csv")
    with pytest.raises(BillingError, match="unknown file type"):
        read_file(write(tmp_path, "x.xlsx", ""))
    with pytest.raises(BillingError, match="not JSON"):
        read_file(write(tmp_path, "x.json", "{"))


def test_many_problems_are_capped_in_the_message(tmp_path):
    lines = "".join(f"x,1,USD,c,2025-03-0{i % 9 + 1},nan,1,1\n" for i in range(30))
    path = write(tmp_path, "g.csv", "platform,account_id,currency,campaign_id,date,spend,"
                                    "conversions,conversion_value\n" + lines)
    with pytest.raises(BillingError, match="(?s)30 problem.*and 10 more") as caught:
        read_file(path)
    assert len(caught.value.problems) == 30


def test_kafka_envelope_uses_its_reported_at_or_the_record_time():
    rows = [{"platform": "x", "account_id": "1", "currency": "USD", "campaign_id": "c",
             "date": "2025-03-01", "spend": 5, "conversions": 1, "conversion_value": 2}]
    message = json.dumps({"format": "generic", "rows": rows,
                          "reported_at": "2025-03-04T07:00:00+01:00"}).encode()
    batch = parse_message(message, "billing[0]@12", ParseOptions(), 1_741_000_000_000)
    assert batch.ads[0].reported_at == "2025-03-04T06:00:00.000000Z"
    assert batch.ads[0].source == "billing[0]@12: rows[0]"
    without = json.dumps({"format": "generic", "rows": rows}).encode()
    assert parse_message(without, "b", ParseOptions(), 1_741_000_000_000).ads[0].reported_at \
        == "2025-03-03T11:06:40.000000Z"


def test_kafka_envelope_errors():
    with pytest.raises(BillingError, match=r"(?s)billing\[0\]@3: .*not JSON"):
        parse_message(b"\xff", "billing[0]@3", ParseOptions(), 0)
    with pytest.raises(BillingError, match="format: must be one of"):
        parse_envelope({"format": "csv", "rows": []}, "b", ParseOptions())
    with pytest.raises(BillingError, match=r"b: rows\[0\]: EffectiveCost: missing"):
        parse_envelope({"format": "focus", "rows": [{"BillingAccountId": "a"}]}, "b",
                       ParseOptions())


def test_envelopes_saved_as_json_lines_are_read_as_such(tmp_path):
    rows = [{"platform": "x", "account_id": "1", "currency": "USD", "campaign_id": "c",
             "date": "2025-03-01", "spend": 5, "conversions": 1, "conversion_value": 2}]
    text = "\n".join(json.dumps({"format": "generic", "rows": rows}) for _ in range(2))
    assert len(read_file(write(tmp_path, "e.jsonl", text)).ads) == 2


def test_segment_rows_of_one_campaign_day_add_up(tmp_path):
    rows = [{"customer": {"id": "1", "currencyCode": "USD"}, "campaign": {"id": "9"},
             "segments": {"date": "2025-03-01", "device": device},
             "metrics": {"costMicros": str(micros), "conversions": conversions}}
            for device, micros, conversions in (("MOBILE", 1_500_000, 2), ("DESKTOP", 500_000, 1))]
    (row,) = read_file(write(tmp_path, "g.json", json.dumps({"results": rows}))).ads
    assert (row.spend, row.conversions, row.revenue) == (2.0, 3.0, 0.0)
    assert row.source.endswith("(+1 rows)")


def test_billing_files_that_are_not_utf8_text_are_located(tmp_path):
    latin = tmp_path / "g.csv"
    latin.write_bytes(b"customer.id,campaign.id,segments.date,metrics.cost_micros\n"
                      b"1,caf\xe9,2025-03-01,100\n")
    with pytest.raises(BillingError, match=r"(?s)g.csv:2.*byte 0xe9 at column 6 is not UTF-8"):
        read_file(f"google_ads:{latin}")
    nul = tmp_path / "m.json"
    nul.write_bytes(b'{"data": []}\n\x00')
    with pytest.raises(BillingError, match=r"(?s)m.json:2.*NUL character"):
        read_file(f"meta:{nul}")


def test_billing_csv_rows_with_a_wrong_field_count_are_refused(tmp_path):
    header = "platform,account_id,currency,campaign_id,date,spend,conversions,conversion_value\n"
    good = "x,1,USD,c,2025-03-01,5,1,2\n"
    # an extra field was dropped silently (csv.DictReader files it under None)
    path = write(tmp_path, "g.csv", header + good + "x,1,USD,c,2025-03-02,5,1,2,9\n")
    with pytest.raises(BillingError, match=r"(?s)g.csv:3: .*9 fields, the header has 8"):
        read_file(path)
    path = write(tmp_path, "g.csv", header + "x,1,USD,c,2025-03-02,5,1,2,9\n" + good)
    with pytest.raises(BillingError, match=r"(?s)g.csv:2: .*9 fields, the header has 8"):
        read_file(path)
    path = write(tmp_path, "g.csv", header + good + "x,1,USD,c,2025-03-02,5\n")
    with pytest.raises(BillingError, match=r"(?s)g.csv:3: .*6 fields, the header has 8"):
        read_file(path)
    with pytest.raises(BillingError, match=r"(?s)g.csv: .*empty file"):
        read_file(write(tmp_path, "g.csv", ""))


def test_an_unknown_format_prefix_is_named_as_such(tmp_path: Path) -> None:
    from pipelines.reconcile.billing.sources import read_file

    report = tmp_path / "report.csv"
    report.write_text("date,campaign,cost\n2026-10-01,x,1\n")
    with pytest.raises(BillingError, match="unknown billing format 'bogusformat': expected "
                                           "one of .*google_ads"):
        read_file(f"bogusformat:{report}")
    with pytest.raises(BillingError, match="no such file"):
        read_file(f"google_ads:{tmp_path / 'missing.csv'}")
