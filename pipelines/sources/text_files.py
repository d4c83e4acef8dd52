"""Text files the command-line tools read (spend CSVs, billing exports, journey files, GPU
recordings), read strictly: UTF-8 (a byte-order mark allowed) and no NUL character, or an
error that names the file, the line and the column of the first offending byte. A CSV file
(`read_csv`, `read_csv_rows`) also needs a header and as many fields in every record as the
header has; an error names the file, the line and the field count."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


class TextFileError(ValueError):
    """A file that is not clean UTF-8 text; the message names file:line."""


def read_text_strictly(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TextFileError(f"{path}: file not found") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        at = error.start
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1) + 1
        raise TextFileError(f"{path}:{line}: byte {data[at]:#04x} at column {column} is not "
                            "UTF-8; save the file as UTF-8") from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        column = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise TextFileError(f"{path}:{line}: a NUL character at column {column} (a binary "
                            "file, or a UTF-16 export?); save the file as UTF-8 text")
    return text


class BadRow(NamedTuple):
    """A CSV record whose field count differs from the header's."""

    line: int  # the record's first line
    fields: int
    expected: int
    text: str  # the record as written

    @property
    def problem(self) -> str:
        hint = " (a quote left open?)" if "\n" in self.text else ""
        return f"{self.fields} fields, the header has {self.expected}{hint}"


@dataclass(frozen=True)
class CsvTable:
    """A CSV file read strictly: every column as text (`table` columns are positional, the
    names are in `header`), the first line of each record, and the rows set aside."""

    path: Path
    header: list[str]
    table: pa.Table
    lines: np.ndarray
    bad_rows: list[BadRow]

    def rows(self) -> list[tuple[int, list[str]]]:
        """(first line, fields) per record, in file order; for small files."""
        columns = [column.to_pylist() for column in self.table.columns]
        return list(zip(self.lines.tolist(), map(list, zip(*columns, strict=True)),
                        strict=True)) if columns else []


def read_csv(path: Path, expected: Sequence[str] = (),
             keep_bad_rows: bool = False) -> CsvTable:
    """A CSV file, strictly: clean UTF-8 text (`read_text_strictly`), a header line, and
    every record with as many fields as the header. A record with more or fewer fields
    raises TextFileError naming file, line and field count, or with `keep_bad_rows` is left
    out of the table and listed in `bad_rows`. Blank lines are ignored; a record over several
    lines (a quoted newline) is named by its first line. `expected` (the columns a caller
    wants) only words the error for an empty file."""
    import pyarrow as pa  # here: the other readers of this module do without it
    import pyarrow.csv as pacsv

    path = Path(path)
    text = read_text_strictly(path)
    if not text.strip():
        wanted = f" with columns {', '.join(expected)}" if expected else ""
        raise TextFileError(f"{path}: empty file, expected a header line{wanted}")
    if not text.endswith("\n"):
        text += "\n"  # a header without a line end would be "an empty CSV file" to Arrow
    data = text.encode()
    width = _header_width(path, text)
    bad: list[tuple[int | None, int, str]] = []

    def invalid(row: pacsv.InvalidRow) -> str:
        bad.append((row.number, row.actual_columns, row.text))
        return "skip"

    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            # serially, so that each invalid row comes with its number
            read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False,
                                           block_size=max(1 << 20, min(len(data), 1 << 26))),
            parse_options=pacsv.ParseOptions(newlines_in_values=True,
                                             invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(
                column_types={f"f{i}": pa.string() for i in range(width)},
                strings_can_be_null=False))
    except (pa.ArrowInvalid, csv.Error) as error:
        raise TextFileError(f"{path}: not valid CSV: {error}") from None
    if table.num_columns != width or any(n is None for n, _, _ in bad):
        raise TextFileError(f"{path}: not valid CSV: the header could not be read")
    starts = _record_lines(path, text, data, table.num_rows + len(bad))
    bad_index = np.array([n - 1 for n, _, _ in bad], dtype=np.int64)  # numbered from 1
    keep = np.ones(len(starts), bool)
    keep[bad_index] = False
    bad_rows = [BadRow(int(starts[i]), fields, width, row_text)
                for i, (fields, row_text) in zip(bad_index.tolist(),
                                                 ((f, t) for _, f, t in bad), strict=True)]
    if bad_rows and not keep_bad_rows:
        first, more = bad_rows[0], len(bad_rows) - 1
        raise TextFileError(f"{path}:{first.line}: {first.problem}"
                            + (f" (and {more} more rows with a wrong field count)"
                               if more else ""))
    header = [str(value) for value in table.slice(0, 1).to_pylist()[0].values()] \
        if table.num_rows else []
    return CsvTable(path, header, table.slice(1), starts[keep][1:], bad_rows)


def read_csv_rows(path: Path, expected: Sequence[str] = ()
                  ) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(first line, fields), ...]) of a CSV file read strictly (`read_csv`)."""
    csv_table = read_csv(path, expected)
    return csv_table.header, csv_table.rows()


def _header_width(path: Path, text: str) -> int:
    try:
        for row in csv.reader(io.StringIO(text, newline="")):
            if row:
                return len(row)
    except csv.Error as error:
        raise TextFileError(f"{path}:1: not valid CSV: {error}") from None
    raise TextFileError(f"{path}: empty file, expected a header line")


def _record_lines(path: Path, text: str, data: bytes, records: int) -> np.ndarray:
    """The first line of each record (the header included), as Arrow counts records:
    a blank line is none. Vectorised where every record is one line (no quoted newline)."""
    if text.count("\r") == text.count("\r\n"):  # no lone CR ending a line
        raw = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(raw == 10)  # the text ends with a newline
        starts = np.concatenate(([0], ends[:-1] + 1))
        length = ends - starts
        length[(length > 0) & (raw[np.maximum(ends - 1, 0)] == 13)] -= 1
        lines = np.flatnonzero(length > 0) + 1
        if len(lines) == records:
            return lines
    # some record spans lines: count them as Python's csv module reads them
    reader = csv.reader(io.StringIO(text, newline=""))
    found, line = [], 1
    try:
        for row in reader:
            if row:
                found.append(line)
            line = reader.line_num + 1
    except csv.Error as error:
        raise TextFileError(f"{path}:{line}: not valid CSV: {error}") from None
    if len(found) != records:
        raise TextFileError(f"{path}: not valid CSV: {records} records, but {len(found)} "
                            "by another reading (a stray quote?)")
    return np.asarray(found, dtype=np.int64)
