"""What every reader yields and every source consumes: `Record`s, the errors, and `convert`.

Readers turn files into `Record`s; `convert` turns records into prompts or counted `Rejected`s.
Both sides share these types, so they live apart from any one reader.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenbench.data.sources.rows import RawPrompt, Rejected

# warnings keep the logger name they had before the split, which users may filter on
log = logging.getLogger("lenbench.data.sources.reading")

# Reasons that mean broken input (rejected under strict); other drops are deliberate filters.
BAD_REASONS = ("malformed", "non_utf8", "missing_field", "null_field", "wrong_type", "non_text",
               "no_prompt")


MISSING = object()  # `row.get(key, MISSING)`: tells an absent field from a null one


class SourceError(ValueError):
    """A data source cannot be read, or (under strict) holds a bad row; the message says where."""


class BadRow(Exception):
    """Raised by a source's row converter; becomes a counted `Rejected` (or, if strict, an
    error)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Record:
    """One row as read: `row` is the parsed object, or None with `error` = (reason, message)."""

    where: str
    row: Any = None
    error: tuple[str, str] | None = None
    span: dict | None = None  # text that could not be parsed: {"byte", "bytes", "truncated"}
    text: str = ""  # the start of text that did not parse, for the list of dropped rows


def _shown(text: str | bytes) -> str:
    """The start of raw text as printable UTF-8 (bytes that are not UTF-8 escaped)."""
    if isinstance(text, str):  # decoded with surrogateescape: back to the bytes read
        text = text.encode("utf-8", "surrogateescape")
    return text[:400].decode("utf-8", "backslashreplace")


class SourceStream:
    """An iterable of prompts that also describes what it read (`info`, copied into the card)."""

    def __init__(self, items: Callable[[], Iterator[RawPrompt | Rejected]], info: dict):
        self._items = items
        self.info = info

    def __iter__(self) -> Iterator[RawPrompt | Rejected]:
        return self._items()


def _unreadable(path: Path, exc: Exception, what: str, n_read: int = 0) -> Record:
    """One 'malformed' record for a file that cannot be read (cut off, or another format)."""
    size = path.stat().st_size
    lost = f"reading stopped after row {n_read - 1:,}" if n_read else \
        f"none of its {size:,} bytes could be read"
    why = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return Record(path.name, error=("malformed", f"not a readable {what} file ({why}); {lost}"),
                  span={"byte": 0, "bytes": size, "truncated": False})


def _value_error(exc: Exception) -> tuple[str, str]:
    """The reason and message for a row whose values could not be converted."""
    if isinstance(exc, UnicodeDecodeError):
        return "non_utf8", ("bytes that are not UTF-8 in a text value "
                            f"({exc.object[exc.start:exc.end]!r})")
    return "malformed", f"this row could not be read ({type(exc).__name__}: {exc})"


def check_text(value: Any) -> None:
    """Reject text that cannot be written as UTF-8: bytes that were not UTF-8 (decoded as
    surrogates) and lone surrogates from JSON escapes such as "\\ud800"."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        try:
            shown = repr(bad.encode("utf-8", "surrogateescape"))
            what = "bytes that are not UTF-8"
        except UnicodeEncodeError:  # a surrogate no byte decodes to: it came from an escape
            shown = bad.encode("unicode_escape").decode("ascii")
            what = "a lone surrogate, which is not a character"
        raise BadRow("non_utf8", f"{what} ({shown})") from None


def _excerpt(row: Any) -> str:
    """The row as JSON (ASCII, so any bytes survive), for the list of dropped rows."""
    if row is None:
        return ""
    try:
        return json.dumps(row, ensure_ascii=True, default=str)[:400]
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(row)[:400]
        except (ValueError, RecursionError):  # nested too deeply even for repr
            return f"({type(row).__name__} nested too deeply to show)"


def convert(records: Callable[[], Iterator[Record]],
            to_prompts: Callable[[dict], Iterable[RawPrompt | Rejected]],
            strict: bool) -> Callable[[], Iterator[RawPrompt | Rejected]]:
    """Turn records into prompts; bad rows become counted `Rejected`s, or errors under strict.

    Text that could not be parsed at all (a record with a `span`) is also logged at once: unlike
    a bad row it may hide any number of rows, and a truncated file should not pass unnoticed.
    """

    def reject(where: str, reason: str, message: str, row: Any = None,
               text: str = "") -> Rejected:
        if strict:
            raise SourceError(f"{where}: {message} (dataset.strict=true rejects bad rows; fix "
                              "the row, or set dataset.strict=false to count and skip them)")
        return Rejected(reason, where, message, excerpt=_excerpt(row) or text)

    def items() -> Iterator[RawPrompt | Rejected]:
        for rec in records():
            if rec.error is not None:
                rejected = reject(rec.where, *rec.error, text=rec.text)
                if rec.span is not None:
                    log.warning("%s: %s (counted in the PromptSet card)", rec.where, rec.error[1])
                yield rejected
                continue
            if not isinstance(rec.row, dict):
                yield reject(rec.where, "wrong_type",
                             f"expected a JSON object, got {type(rec.row).__name__}", rec.row,
                             text="null" if rec.row is None else "")
                continue
            try:
                out = list(to_prompts(rec.row))
                for item in out:
                    if isinstance(item, RawPrompt):
                        check_text([item.text, item.family, item.meta])
            except BadRow as exc:
                yield reject(rec.where, exc.reason, exc.message, rec.row)
                continue
            except Exception as exc:  # noqa: BLE001 (a row shape no check foresaw: count it)
                yield reject(rec.where, "malformed", f"could not read this row "
                                                     f"({type(exc).__name__}: {exc})", rec.row)
                continue
            for item in out:
                if isinstance(item, Rejected):
                    if strict and item.bad:
                        reject(rec.where + item.where, item.reason, item.message)
                    item.excerpt = item.excerpt or _excerpt(rec.row)
                item.where = rec.where + item.where  # converters may add a suffix: " (turn 3)"
                yield item

    return items
