"""Text files the command-line tools read (spend CSVs, billing exports, journey files, GPU
recordings), read strictly: UTF-8 (a byte-order mark allowed) and no NUL character, or an
error that names the file, the line and the column of the first offending byte."""

from __future__ import annotations

from pathlib import Path


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
