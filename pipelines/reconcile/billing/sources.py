"""Billing inputs from files (CSV, JSON, JSON lines, Parquet) and from Kafka messages.

A file's format is named (`google_ads:report.json`) or told from its first row. A Kafka
message is one JSON envelope `{"format", "rows", "reported_at"?, "source"?}` whose rows are
in that format's native shape. Every row keeps its location (file:line, a JSON path, or
topic[partition]@offset) for error messages and for the audit column of the results.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.reconcile.billing import focus, generic, google_ads, meta
from pipelines.reconcile.billing.records import (
    BillingBatch,
    BillingError,
    Invalid,
    Problems,
    combine_ad_rows,
    iso_utc,
    timestamp,
)
from pipelines.sources.text_files import TextFileError, read_csv_rows, read_text_strictly

FORMATS = ("google_ads", "meta", "generic", "focus")
Located = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class ParseOptions:
    default_currency: str = ""  # for reports that do not name their account's currency
    meta_purchase_actions: tuple[str, ...] = meta.DEFAULT_PURCHASE_ACTIONS
    meta_attribution_window: str = ""  # what the Insights request asked for, for the record


def split_spec(spec: str) -> tuple[str, Path]:
    """'google_ads:path' -> ('google_ads', path); a bare path -> ('', path)."""
    head, sep, tail = spec.partition(":")
    if sep and head in FORMATS:
        return head, Path(tail)
    return "", Path(spec)


def read_file(spec: str | Path, options: ParseOptions = ParseOptions(),
              reported_at: str = "") -> BillingBatch:
    """Parse one billing file; `reported_at` defaults to the file's modification time
    (what orders two restatements of the same day when they come as files)."""
    fmt, path = split_spec(str(spec))
    if not path.is_file():
        head, sep, tail = str(spec).partition(":")
        if not fmt and sep and head and "/" not in head and Path(tail).is_file():
            # 'bogusformat:file.csv': a format prefix this reader does not know, not a path
            raise BillingError(str(spec), [f"unknown billing format {head!r}: expected one "
                                           f"of {', '.join(sorted(FORMATS))}, then ':' and "
                                           "the file"])
        raise BillingError(str(path), ["no such file"])
    reported_at = reported_at or iso_utc(datetime.fromtimestamp(path.stat().st_mtime, UTC))
    suffix = path.suffix.lower()
    columns: list[str] | None = None
    if suffix in (".parquet", ".pq"):
        columns, records = _parquet(path)
    elif suffix == ".csv":
        columns, records = _csv(path)
    elif suffix in (".json", ".jsonl", ".ndjson"):
        records = _json(path, lines=suffix != ".json")
    else:
        raise BillingError(str(path), ["unknown file type: expected .csv, .json, .jsonl, "
                                       ".ndjson or .parquet"])
    if records and records[0][1].get("format") in FORMATS and "rows" in records[0][1]:
        # Kafka envelopes saved to a file (one per line, or a list)
        return merge(str(path), [parse_envelope(envelope, where, options, reported_at)
                                 for where, envelope in records])
    fmt = fmt or sniff(records, columns, str(path))
    return parse_rows(fmt, records, str(path), options, reported_at,
                      columns=columns if suffix == ".csv" else None,
                      focus_columns=columns)


def merge(source: str, batches: Sequence[BillingBatch]) -> BillingBatch:
    merged = BillingBatch(source, "+".join(sorted({b.format for b in batches})) or "none")
    for batch in batches:
        merged.ads.extend(batch.ads)
        merged.cloud.extend(batch.cloud)
        merged.periods |= batch.periods
        merged.skipped += batch.skipped
        merged.reported_at = max(merged.reported_at, batch.reported_at)
    return merged


def parse_rows(fmt: str, records: Sequence[Located], source: str, options: ParseOptions,
               reported_at: str, columns: list[str] | None = None,
               focus_columns: list[str] | None = None) -> BillingBatch:
    """`columns`: a CSV header (where every column must be named); `focus_columns` also
    takes a Parquet schema."""
    problems = Problems(source)
    if fmt == "focus":
        batch = focus.parse(records, problems, columns=focus_columns, source=source,
                            reported_at=reported_at)
    else:
        batch = BillingBatch(source, fmt, reported_at=reported_at)
        if fmt == "google_ads":
            batch.ads = google_ads.parse(records, problems, columns=columns,
                                         default_currency=options.default_currency,
                                         reported_at=reported_at)
        elif fmt == "meta":
            batch.ads = meta.parse(records, problems,
                                   purchase_actions=options.meta_purchase_actions,
                                   default_currency=options.default_currency,
                                   attribution_window=options.meta_attribution_window,
                                   reported_at=reported_at)
        elif fmt == "generic":
            batch.ads = generic.parse(records, problems, columns=columns,
                                      reported_at=reported_at)
        else:
            raise BillingError(source, [f"unknown format {fmt!r}: expected one of "
                                        f"{', '.join(FORMATS)}"])
    batch.ads = combine_ad_rows(batch.ads, problems)
    problems.raise_if_any()
    return batch


def sniff(records: Sequence[Located], columns: list[str] | None, source: str) -> str:
    names = set(columns or (records[0][1] if records else ()))
    flat = {n.split(".")[0] for n in names}
    if "EffectiveCost" in names:
        return "focus"
    if "segments" in flat or "metrics" in flat:
        return "google_ads"
    if "date_start" in names:
        return "meta"
    if {"platform", "campaign_id"} <= names:
        return "generic"
    shown = ", ".join(sorted(names)[:12]) or "no rows"
    raise BillingError(source, [f"cannot tell the format (columns: {shown}); name it as "
                                f"FORMAT:{source} with FORMAT one of {', '.join(FORMATS)}"])


def parse_envelope(envelope: object, where: str, options: ParseOptions,
                   reported_at: str = "") -> BillingBatch:
    """One Kafka message (already decoded): rows of one format, one restatement."""
    if not isinstance(envelope, dict):
        raise BillingError(where, ["expected a JSON object {format, rows, reported_at?}"])
    fmt, rows = envelope.get("format"), envelope.get("rows")
    if fmt not in FORMATS:
        raise BillingError(where, [f"format: must be one of {', '.join(FORMATS)}, got {fmt!r}"])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise BillingError(where, ["rows: must be a list of objects"])
    if envelope.get("reported_at"):
        try:
            reported_at = iso_utc(timestamp(envelope["reported_at"]))
        except Invalid as error:
            raise BillingError(where, [f"reported_at: {error}"]) from None
    # the message's own location keeps chunks of one export apart (they add up) while a
    # re-read of the same message replaces itself; the sender's label is kept beside it
    source = f"{where} ({envelope['source']})" if envelope.get("source") else where
    records = [(f"{where}: rows[{i}]", row) for i, row in enumerate(rows)]
    return parse_rows(str(fmt), records, source, options, reported_at)


def parse_message(value: bytes, where: str, options: ParseOptions,
                  timestamp_ms: int) -> BillingBatch:
    """A Kafka record: its envelope's reported_at, else the record's timestamp."""
    try:
        envelope = json.loads(value)
    except (ValueError, UnicodeDecodeError) as error:
        raise BillingError(where, [f"not JSON: {error}"]) from None
    fallback = iso_utc(datetime.fromtimestamp(timestamp_ms / 1000, UTC))
    return parse_envelope(envelope, where, options, fallback)


# --- readers -------------------------------------------------------------------------

def _text(path: Path) -> str:
    try:
        return read_text_strictly(path)
    except TextFileError as error:
        where, _, problem = str(error).partition(": ")
        raise BillingError(where, [problem]) from None


def _csv(path: Path) -> tuple[list[str], list[Located]]:
    """A row with more or fewer fields than the header is refused, naming file:line."""
    try:
        header, rows = read_csv_rows(path)
    except TextFileError as error:
        where, _, problem = str(error).partition(": ")
        raise BillingError(where, [problem]) from None
    records: list[Located] = [
        (f"{path}:{line}", {k: v for k, v in zip(header, fields, strict=True) if k})
        for line, fields in rows]
    return header, records


def _json(path: Path, lines: bool) -> list[Located]:
    text = _text(path)
    if lines:
        out: list[Located] = []
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as error:
                raise BillingError(f"{path}:{number}", [f"not JSON: {error}"]) from None
            out.extend(_rows_of(item, f"{path}:{number}"))
        return out
    try:
        document = json.loads(text)
    except ValueError as error:
        raise BillingError(str(path), [f"not JSON: {error}"]) from None
    return list(_rows_of(document, f"{path}:$"))


def _rows_of(item: object, where: str) -> Iterator[Located]:
    """Rows inside the usual API wrappers: Google's {results: [...]} (search) or a list of
    them (searchStream), Meta's {data: [...]}, or a bare list of rows."""
    if isinstance(item, list):
        for i, inner in enumerate(item):
            yield from _rows_of(inner, f"{where}[{i}]")
    elif isinstance(item, dict) and isinstance(item.get("results"), list):
        for i, row in enumerate(item["results"]):
            yield f"{where}.results[{i}]", row
    elif isinstance(item, dict) and isinstance(item.get("data"), list):
        for i, row in enumerate(item["data"]):
            yield f"{where}.data[{i}]", row
    elif isinstance(item, dict):
        yield where, item
    else:
        raise BillingError(where, [f"expected a JSON object, got {item!r}"])


def _parquet(path: Path) -> tuple[list[str], list[Located]]:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise BillingError(str(path), [f"not a Parquet file: {error}"]) from None
    records: list[Located] = []
    for batch in handle.iter_batches(batch_size=65_536):
        for row in batch.to_pylist():
            records.append((f"{path}: row {len(records) + 1}", row))
    return list(handle.schema_arrow.names), records
