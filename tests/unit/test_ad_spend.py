"""Ad spend records: validation with located errors, the topic message, the CLI path."""

from __future__ import annotations

import json

import pytest

from jobs.cli import main
from pipelines.sources.ad_spend import SpendError, SpendRecord, parse_message, read_csv, validate

GOOD = {"platform": "Google_Ads", "account": "123", "campaign": "gs-brand",
        "day": "2026-10-03", "amount": "12.50", "currency": "usd"}


def test_a_valid_record_is_normalised():
    record = validate(GOOD)
    assert record == SpendRecord("google_ads", "123", "gs-brand", "2026-10-03", 12.5, "USD")
    assert record.day_start_ms == 1_790_985_600_000
    assert parse_message(record.to_json().encode()) == record


@pytest.mark.parametrize(("change", "message"), [
    ({"amount": "abc"}, "field 'amount' is not a number: 'abc'"),
    ({"amount": "-1"}, "field 'amount' is negative"),
    ({"amount": "nan"}, "field 'amount' is not a number"),
    ({"day": "2026-02-30"}, "field 'day' is not a YYYY-MM-DD date"),
    ({"currency": "dollars"}, "field 'currency' is not an ISO 4217 code"),
    ({"campaign": ""}, "field 'campaign' is missing"),
])
def test_each_problem_names_its_field(change, message):
    with pytest.raises(SpendError, match=message):
        validate({**GOOD, **change})


def test_messages_that_are_not_records():
    with pytest.raises(SpendError, match="not JSON"):
        parse_message(b"{broken")
    with pytest.raises(SpendError, match="not a JSON object"):
        parse_message(json.dumps([GOOD]).encode())


def test_csv_errors_name_file_line_and_field(tmp_path, capsys):
    path = tmp_path / "spend.csv"
    path.write_text("platform,account,campaign,day,amount,currency\n"
                    "meta,act_1,meta-retargeting,2026-10-01,10,USD\n"
                    "meta,act_1,meta-retargeting,2026-10-02,ten,USD\n")
    with pytest.raises(SpendError, match=r"spend.csv:3: field 'amount' is not a number"):
        read_csv(path)
    # the CLI stops before contacting any broker, and says where
    assert main(["spend", "publish", str(path), "--bootstrap", "127.0.0.1:9"]) == 2
    assert "spend.csv:3: field 'amount'" in capsys.readouterr().err
    path.write_text("platform,campaign,day,amount\n")
    with pytest.raises(SpendError, match=r"spend.csv:1: missing column\(s\) account, currency"):
        read_csv(path)


HEADER = b"platform,account,campaign,day,amount,currency\n"


@pytest.mark.parametrize("body, message", [
    # not UTF-8 (a Latin-1 export): the file, the line and the column
    (HEADER + b"meta,act_1,caf\xe9,2026-10-01,10,USD\n",
     r"spend.csv:2: byte 0xe9 at column 15 is not UTF-8"),
    # a NUL byte (a binary file, a UTF-16 export)
    (HEADER + b"meta,act_1,c\x00,2026-10-01,10,USD\n", r"spend.csv:2: a NUL character"),
    # one field too many: it would shift every later field by one
    (HEADER + b"meta,act_1,c,x,2026-10-01,10,USD\n", r"spend.csv:2: 7 fields, the header has 6"),
    (HEADER + b"meta,act_1,c,2026-10-01,10\n", r"spend.csv:2: 5 fields, the header has 6"),
    # on a later row too, after a good one; and a file with nothing in it is named
    (HEADER + b"meta,act_1,c,2026-10-01,10,USD\nmeta,act_1,c,x,2026-10-02,10,USD\n",
     r"spend.csv:3: 7 fields, the header has 6"),
    (b"", r"spend.csv: empty file, expected a header line with columns platform, account"),
    # a record over several lines (a quoted newline) is named by its first line, and a line
    # break is no part of a campaign name (the decoders' rule for text)
    (HEADER + b'meta,act_1,c,2026-10-01,10,USD\nmeta,act_1,"two\nlines",2026-10-01,10,USD\n',
     r"spend.csv:3: field 'campaign' holds the control character U\+000A at 3"),
    (HEADER + b'meta,act_1,"two\nlines",2026-10-01,lots,USD\n', r"spend.csv:2: field 'amount'"),
])
def test_csv_input_is_read_strictly(tmp_path, body, message):
    path = tmp_path / "spend.csv"
    path.write_bytes(body)
    with pytest.raises(SpendError, match=message):
        read_csv(path)


def test_a_byte_order_mark_is_allowed(tmp_path):
    path = tmp_path / "spend.csv"
    path.write_bytes(b"\xef\xbb\xbf" + HEADER + b"meta,act_1,c,2026-10-01,10,USD\n")
    assert [r.campaign for r in read_csv(path)] == ["c"]


def test_amounts_beyond_any_sum_and_nul_characters_are_refused():
    with pytest.raises(SpendError, match=r"field 'amount' is beyond the maximum of 1e\+12"):
        validate({**GOOD, "amount": 1e308})
    with pytest.raises(SpendError, match="field 'campaign' holds the control character U\\+0000"):
        validate({**GOOD, "campaign": "c\x00"})


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("campaign", "spring\x1bsale", "holds the control character U+001B at 6"),
    ("account", "ac\u0085t", "holds the control character U+0085 at 2"),
    ("platform", "x" * 300, "is longer than 256 characters"),
])
def test_text_fields_follow_the_decoders_rule(field, value, reason):
    """What every sink stores as text: the span decoders' rule (schemas.telemetry)."""
    with pytest.raises(SpendError) as raised:
        validate({**GOOD, field: value})
    assert str(raised.value) == f"field '{field}' {reason}"


def test_publishing_commands_use_the_config_s_kafka_security(tmp_path):
    """`seedance spend publish`, `generate` and `probe` connect with the job config's
    `kafka.properties` (SASL, TLS), in kafka-python's names, and its address."""
    import argparse

    import yaml

    from jobs.commands.inputs import kafka_of

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"kafka": {"bootstrap": "broker:9093", "properties": {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="ingest" password="pw";'}}}))
    path.chmod(0o600)  # it holds a secret
    bootstrap, client = kafka_of(argparse.Namespace(config=str(path), bootstrap=None))
    assert bootstrap == "broker:9093"
    assert client["security_protocol"] == "SASL_SSL"
    assert client["sasl_mechanism"] == "SCRAM-SHA-512"
    assert client["sasl_plain_username"] == "ingest"
