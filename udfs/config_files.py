"""The text of a configuration file a domain reads (channel rules, an orders mapping), or
the domain's own error naming the file: missing, not UTF-8, or unreadable."""

from __future__ import annotations

from pathlib import Path


def read_config_text(path: Path, error: type[ValueError], what: str) -> str:
    """`path`'s text; `error` (the caller's exception class) says why not, `what` naming
    the kind of file ("channel rules")."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} file not found: {path}") from None
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not a text file (byte {failure.start} is not UTF-8)") from None
    except OSError as failure:  # a folder, no permission
        raise error(f"{path}: cannot read it: {failure.strerror}") from None
