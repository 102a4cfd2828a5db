"""Malformed files in every format each source reads: valid rows kept, bad rows listed with where.

One table of cases per source (good rows, broken JSON, bytes that are not UTF-8, lone
surrogates, NUL bytes, nesting bombs, wrong types, null and missing fields, bad lengths,
conversations without a user turn, ...) is written in each layout a source accepts: JSON Lines,
a JSON list one element a line, pretty-printed or on one line, an object of records, and folders
of such files. Every build must keep exactly the good rows and list every other row beside the
card, in order, with its position and reason; under strict mode every bad row stops the build
with a SourceError naming it. CSV and Parquet have their own tables (their cells cannot hold
every JSON defect). No model is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lenbench.data.promptset import DROPPED_FILE, build_promptset, load_source, save_promptset
from lenbench.data.sources import SourceError

ALL_TRAIN = {"train": 1.0, "val": 0.0, "test": 0.0}
BOM = b"\xef\xbb\xbf"
# placeholders in a row's text, replaced in the bytes written (json.dumps cannot write these)
BYTES = {b"@FF@": b"caf\xff", b"@HI@": b"\\ud800", b"@LO@": b"\\udfff", b"@HX@": b"\\ud800\\u0041",
         b"@RS@": b"\xed\xa0\x80", b"@NUL@": b"\x00"}
NOT_STRICT = {"keep", "empty", "duplicate", "language", "moderation"}  # filters, not bad rows
FIRST = "Write a haiku about autumn leaves"
LONG = "word " * 50_000  # a 250 kB line


@dataclass
class Case:
    obj: Any            # the row, or None for raw text
    data: bytes         # the element as written on one line (may be malformed)
    expect: str         # "keep" or the drop reason
    text: str = ""      # the prompt kept


def _bytes(text: str) -> bytes:
    data = text.encode()
    for mark, value in BYTES.items():
        data = data.replace(mark, value)
    return data


def row(obj: Any, expect: str, text: str = "") -> Case:
    return Case(obj, _bytes(json.dumps(obj, ensure_ascii=False)), expect, text)


def raw(data: bytes, expect: str) -> Case:
    return Case(None, data, expect)


def generic(good) -> list[Case]:
    """Defects of the text itself, around rows made by the source's `good(prompt)`."""
    return [  # text that cannot be parsed is followed by a row that can, as in most files
        row(good(FIRST), "keep", FIRST),
        raw(json.dumps(good("cut off here"))[:-12].encode(), "malformed"),  # invalid JSON
        row(good("@FF@ au lait"), "non_utf8"),
        row(good("raw @NUL@ byte in a string"), "malformed"),
        row(good("lone high @HI@ half"), "non_utf8"),
        raw(b"\x00" * 8, "malformed"),
        row(good("lone low @LO@ half"), "non_utf8"),
        raw(b"[" * 100_000 + b"]" * 100_000, "malformed"),                # nesting bomb
        row(good("high half then a letter @HX@"), "non_utf8"),
        raw(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "malformed"),
        row(good("raw surrogate @RS@ bytes"), "non_utf8"),
        raw(b"1" * 5000, "malformed"),                                     # int() refuses it
        raw(b'"just a string"', "wrong_type"),
        raw(b"12345", "wrong_type"),
        raw(b"null", "wrong_type"),
        raw(b"[1, 2]", "wrong_type"),
        row(good(""), "empty"),
        row(good(" \t "), "empty"),
        row(good("  " + FIRST.upper() + " "), "duplicate"),
        row(good(LONG), "keep", LONG),
        row(good("The last good prompt"), "keep", "The last good prompt"),
    ]


def without(obj: dict, key: str) -> dict:
    return {k: v for k, v in obj.items() if k != key}


# ---------------------------------------------------------------------------- per-source rows

def jsonl_good(text: str) -> dict:
    return {"prompt": text, "length": 7}


def jsonl_cases() -> list[Case]:
    user = [{"role": "wizard", "content": "?"}, {"role": "user", "content": "Explain TCP"}]
    return generic(jsonl_good) + [
        row({"prompt": 42}, "non_text"),
        row({"prompt": ["a list"]}, "non_text"),
        row({"prompt": {"text": "a dict"}}, "non_text"),
        row({"prompt": True}, "non_text"),
        row({"messages": {"role": "user", "content": "not a list"}}, "wrong_type"),
        row({"messages": [{"role": "user", "content": ["a list"]}]}, "non_text"),
        row({"messages": [{"role": "user"}]}, "missing_field"),
        row({"messages": [None]}, "wrong_type"),
        row({"prompt": None}, "null_field"),
        row({"messages": None}, "null_field"),
        row({"text": "no prompt field"}, "missing_field"),
        row({}, "missing_field"),
        row({"messages": [{"role": "assistant", "content": "I speak first"}]}, "missing_field"),
        row({"messages": []}, "missing_field"),
        row({"messages": user}, "keep", "Explain TCP"),
        row({"prompt": "Huge length", "length": 10**30}, "wrong_type"),
        row({"prompt": "Huge float length", "length": 1e30}, "wrong_type"),
        row({"prompt": "Negative length", "length": -3}, "wrong_type"),
        row({"prompt": "Fractional length", "length": 2.5}, "wrong_type"),
        row({"prompt": "Boolean length", "length": True}, "wrong_type"),
        row({"prompt": "Text length", "length": "12"}, "wrong_type"),
        row({"prompt": "Empty length list", "length": []}, "wrong_type"),
        row({"prompt": "Nested length", "length": [[3]]}, "wrong_type"),
        row({"prompt": "Several lengths", "length": [4, 6]}, "keep", "Several lengths"),
        row({"prompt": "Null length is no length", "length": None}, "keep",
            "Null length is no length"),
        row({"prompt": "Bad family", "family": 3}, "wrong_type"),
        row({"prompt": "Family with bad bytes", "family": "@FF@"}, "non_utf8"),
        row({"prompt": "Family with a lone surrogate", "family": "x @HI@"}, "non_utf8"),
        row({"prompt": "Bad censored", "length": 3, "censored": "yes"}, "wrong_type"),
    ]


def alpaca_good(text: str) -> dict:
    return {"instruction": text, "input": "", "output": "ignored"}


def alpaca_cases() -> list[Case]:
    return generic(alpaca_good) + [
        row({"instruction": 42, "input": ""}, "non_text"),
        row({"instruction": ["a list"]}, "non_text"),
        row({"instruction": None, "input": "x"}, "null_field"),
        row({"input": "x", "output": "y"}, "missing_field"),
        row({"instruction": "Sort these numbers", "input": ["3", "1"]}, "non_text"),
        row({"instruction": "Translate to French", "input": "I like cheese"}, "keep",
            "Translate to French\n\nI like cheese"),
        row({"instruction": "A null input is no input", "input": None}, "keep",
            "A null input is no input"),
    ]


def h(text: Any) -> dict:
    return {"from": "human", "value": text}


def g(text: Any) -> dict:
    return {"from": "gpt", "value": text}


def sharegpt_good(text: str) -> dict:
    return {"id": "x", "conversations": [h(text), g("ok")]}


def sharegpt_cases() -> list[Case]:
    def conv(turns: Any) -> dict:
        return {"id": "y", "conversations": turns}

    return generic(sharegpt_good) + [
        row(conv(None), "null_field"),
        row({"id": "z"}, "missing_field"),
        row(conv({"from": "human", "value": "a dict"}), "wrong_type"),
        row(conv("hello"), "wrong_type"),
        row(conv([]), "no_prompt"),
        row(conv([g("I speak first"), h("Then the user asks")]), "keep", "Then the user asks"),
        row(conv([g("I speak alone")]), "no_prompt"),
        row(conv([{"from": "system", "value": "Be terse."}]), "no_prompt"),
        row(conv([{"from": "wizard", "value": "?"}, h("After an unknown role")]), "keep",
            "After an unknown role"),
        row(conv([{"from": "HUMAN", "value": "An upper-case role"}]), "keep",
            "An upper-case role"),
        row(conv([{"from": None, "value": "A null role"}]), "no_prompt"),
        row(conv([{"from": "human"}]), "missing_field"),
        row(conv([{"value": "no from"}]), "missing_field"),
        row(conv([h(["a list"])]), "non_text"),
        row(conv([h(5), g("ok")]), "non_text"),
        row(conv([h(None)]), "null_field"),
        row(conv(["a string turn"]), "wrong_type"),
    ]


def lmsys_good(text: str) -> dict:
    return {"conversation_id": "c", "model": "m", "language": "English", "redacted": False,
            "conversation": [{"role": "user", "content": text},
                             {"role": "assistant", "content": "ok"}],
            "openai_moderation": [{"flagged": False}, {"flagged": False}]}


def lmsys_cases() -> list[Case]:
    base = lmsys_good("A fine question about lmsys")
    assistant = [{"role": "assistant", "content": "alone"}]
    return generic(lmsys_good) + [
        row({**base, "conversation": None}, "null_field"),
        row(without(base, "conversation"), "missing_field"),
        row({**base, "conversation": {"role": "user", "content": "a dict"}}, "wrong_type"),
        row({**base, "conversation": [{"role": "user", "content": None}]}, "null_field"),
        row({**base, "conversation": assistant}, "no_prompt"),
        row({**base, "language": None}, "null_field"),
        row(without(base, "language"), "missing_field"),
        row({**base, "language": 5}, "wrong_type"),
        row({**base, "language": "Spanish"}, "language"),
        row({**base, "openai_moderation": None}, "null_field"),
        row(without(base, "openai_moderation"), "missing_field"),
        row({**base, "openai_moderation": "yes"}, "wrong_type"),
        row({**base, "openai_moderation": [{"flagged": True}]}, "moderation"),
        row({**base, "conversation": [{"role": "USER", "content": "Upper-case role"}]}, "keep",
            "Upper-case role"),
    ]


SOURCES = {"jsonl": (jsonl_cases, {}), "alpaca": (alpaca_cases, {}),
           "sharegpt": (sharegpt_cases, {}),
           "lmsys": (lmsys_cases, {"language": "English", "drop_flagged": True})}


# ---------------------------------------------------------------------------- layouts

def pretty(case: Case, nl: bytes, indent: bytes) -> bytes:
    """The element as json.dumps(indent=2) lays it out, nested one level down."""
    if case.obj is None:
        return case.data
    return _bytes(json.dumps(case.obj, ensure_ascii=False, indent=2)).replace(b"\n", nl + indent)


def assemble(pieces: list[bytes | tuple[int, bytes]], head: bytes = b""):
    """The file's bytes, and (line, byte) where each numbered piece starts."""
    out, at = bytearray(head), {}
    for piece in pieces:
        if isinstance(piece, tuple):
            at[piece[0]] = (out.count(b"\n") + 1, len(out))
            piece = piece[1]
        out += piece
    return bytes(out), [at[k] for k in sorted(at)]


def join(parts: list[tuple[int, bytes]], sep: bytes) -> list:
    pieces: list = []
    for k, part in enumerate(parts):
        pieces += ([sep] if k else []) + [part]
    return pieces


FILE_LAYOUTS = ("jsonl", "json_lines", "json_pretty", "json_one_line", "json_records")
LIST_LAYOUTS = ("json_lines", "json_pretty", "json_one_line", "json_records")
LAYOUTS = FILE_LAYOUTS + ("folder_lines", "folder_auto")


def write_file(path: Path, layout: str, cases: list[Case], windows: bool = False,
               first: int = 0) -> tuple[Path, list[str], list[int]]:
    """`cases` in one file; with where each lands ("name:line") and its byte offset."""
    nl = b"\r\n" if windows else b"\n"
    head = BOM if windows else b""
    numbered = [(first + k, c) for k, c in enumerate(cases)]
    if layout == "jsonl":
        pieces = []
        for k, c in numbered:
            pieces += [(k, c.data), nl] + ([nl, b"   \t" + nl] if k == first + 2 else [])
    elif layout == "json_lines":
        pieces = ([b"[" + nl] + join([(k, c.data) for k, c in numbered], b"," + nl)
                  + [nl + b"]" + nl])
    elif layout == "json_pretty":
        pieces = [b"[" + nl + b"  "] + join([(k, pretty(c, nl, b"  ")) for k, c in numbered],
                                            b"," + nl + b"  ") + [nl + b"]" + nl]
    elif layout == "json_one_line":
        pieces = [b"["] + join([(k, c.data) for k, c in numbered], b", ") + [b"]"]
    elif layout == "json_records":
        pieces = [b"{" + nl + b"  "] + join(
            [(k, b'"r%d": ' % k + pretty(c, nl, b"  ")) for k, c in numbered],
            b"," + nl + b"  ") + [nl + b"}" + nl]
    else:
        raise ValueError(layout)
    data, starts = assemble(pieces, head)
    path.write_bytes(data)
    return path, [f"{path.name}:{line}" for line, _ in starts], [byte for _, byte in starts]


def write(tmp_path: Path, layout: str, cases: list[Case],
          windows: bool = False) -> tuple[Path, list[str], list[int], dict]:
    """`cases` laid out as `layout`; the path to read, where each case is, and reader options."""
    if layout in FILE_LAYOUTS:
        suffix = ".jsonl" if layout == "jsonl" else ".json"
        return (*write_file(tmp_path / f"data{suffix}", layout, cases, windows), {})
    folder = tmp_path / "data"
    folder.mkdir()
    half = len(cases) // 2
    second, suffix = ("jsonl", "jsonl") if layout == "folder_lines" else ("json_lines", "json")
    _, where_a, bytes_a = write_file(folder / "a.jsonl", "jsonl", cases[:half], windows)
    _, where_b, bytes_b = write_file(folder / f"b.{suffix}", second, cases[half:], windows,
                                     first=half)
    options = {"reader": "lines"} if layout == "folder_lines" else \
        {"hf_cache_dir": str(tmp_path / "hf")}
    return folder, where_a + where_b, bytes_a + bytes_b, options


def build(tmp_path: Path, source: str, path: Path, **kwargs) -> tuple[pd.DataFrame, dict, list]:
    """Build, save, and read back the list of dropped rows written beside card.json."""
    df, card = build_promptset(load_source(source, path=str(path), **kwargs), ALL_TRAIN)
    out = tmp_path / "promptset"
    out.mkdir(exist_ok=True)
    save_promptset(out, df, card)
    listed = [json.loads(x) for x in (out / DROPPED_FILE).read_text().splitlines()]
    assert json.loads((out / "card.json").read_text())["dropped_rows_file"] == DROPPED_FILE
    assert card["n_read"] == card["n_kept"] + len(listed) == card["n_kept"] + \
        sum(card["dropped"].values())
    return df, card, listed


def check(df: pd.DataFrame, listed: list, cases: list[Case], where: list[str]) -> None:
    assert df["text"].tolist() == [c.text for c in cases if c.expect == "keep"]
    assert [(r["where"], r["reason"]) for r in listed] == \
        [(w, c.expect) for w, c in zip(where, cases) if c.expect != "keep"]
    assert all(r["message"] for r in listed)
    assert all(r["excerpt"] for r in listed if r["reason"] != "empty")  # to find it by eye


# ---------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_good_row_kept_every_bad_row_listed(tmp_path: Path, source: str,
                                                  layout: str) -> None:
    make, options = SOURCES[source]
    cases = make()
    path, where, offsets, reader = write(tmp_path, layout, cases)
    df, card, listed = build(tmp_path, source, path, **options, **reader)
    check(df, listed, cases, where)
    if layout == "folder_auto":  # datasets.load_dataset cannot parse these: our readers take over
        assert "datasets.load_dataset failed" in card["source"]["reader"]
    if layout in LIST_LAYOUTS:  # text that did not parse is also located by its byte offset
        spans = [(u["where"], u["byte"]) for u in card["source"]["unreadable"]]
        assert spans == [(w, b) for w, b, c in zip(where, offsets, cases)
                         if c.expect == "malformed"]
    assert card["source"]["read_to_end"] is True


@pytest.mark.parametrize("layout", FILE_LAYOUTS)
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_bom_and_crlf_change_nothing(tmp_path: Path, source: str, layout: str) -> None:
    make, options = SOURCES[source]
    cases = make()
    path, where, _, _ = write(tmp_path, layout, cases, windows=True)
    df, _, listed = build(tmp_path, source, path, **options)
    check(df, listed, cases, where)


@pytest.mark.parametrize("layout", FILE_LAYOUTS + ("folder_lines",))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_strict_stops_on_every_bad_row_with_its_position(tmp_path: Path, source: str,
                                                         layout: str) -> None:
    """Each bad row alone between two good ones: strict names it (a SourceError, never a raw
    json/pyarrow error); a filtered row (empty, duplicate, language...) does not stop it."""
    make, options = SOURCES[source]
    cases = make()
    good, last = cases[0], next(c for c in cases if c.text == "The last good prompt")
    for k, case in enumerate(cases):
        if case.expect == "keep":
            continue
        folder = tmp_path / str(k)
        folder.mkdir()
        path, where, _, reader = write(folder, layout, [good, case, last])
        loaded = load_source(source, path=str(path), strict=True, **options, **reader)
        if case.expect in NOT_STRICT:
            build_promptset(loaded, ALL_TRAIN)
            continue
        with pytest.raises(SourceError) as err:
            build_promptset(loaded, ALL_TRAIN)
        message = str(err.value)
        assert message.startswith(f"{where[1]}: "), (k, message)
        assert "dataset.strict=true" in message


# ---------------------------------------------------------------------------- truncated files


@pytest.mark.parametrize("layout", FILE_LAYOUTS)
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_file_cut_inside_its_last_row(tmp_path: Path, source: str, layout: str) -> None:
    _, options = SOURCES[source]
    texts = ["First complete prompt", "Second complete prompt", "The prompt that is cut"]
    cases = [row(_prompt(source, t), "keep", t) for t in texts]
    path, where, offsets, _ = write(tmp_path, layout, cases)
    data = path.read_bytes()
    cut = data.index(b"The prompt that") + 8  # inside the last row's prompt
    path.write_bytes(data[:cut])
    df, card, listed = build(tmp_path, source, path, **options)
    assert df["text"].tolist() == texts[:2]
    assert [(r["where"], r["reason"]) for r in listed] == [(where[2], "malformed")]
    if layout in LIST_LAYOUTS:
        assert card["source"]["unreadable"] == [
            {"where": where[2], "byte": offsets[2], "bytes": cut - offsets[2], "truncated": True}]
        assert f"the file ends inside the record at byte {offsets[2]:,}" in listed[0]["message"]
    with pytest.raises(SourceError, match=f"^{where[2]}: "):
        build_promptset(load_source(source, path=str(path), strict=True, **options), ALL_TRAIN)


def _prompt(source: str, text: str) -> dict:
    """The fields of a good row that carry its prompt."""
    return {"jsonl": jsonl_good, "alpaca": alpaca_good, "sharegpt": sharegpt_good,
            "lmsys": lmsys_good}[source](text)


@pytest.mark.parametrize("content", [b"", b"  \n\t\n\r\n", BOM, BOM + b"\n\n"])
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
def test_empty_and_blank_files_read_no_rows(tmp_path: Path, suffix: str, content: bytes) -> None:
    f = tmp_path / f"empty{suffix}"
    f.write_bytes(content)
    df, card, listed = build(tmp_path, "jsonl", f)
    assert len(df) == 0 and card["n_read"] == 0 and listed == []


BROKEN_FIRST = b'{\n  "a": {"prompt": "Broken},\n  "b": {"prompt": "Second"},\n  "c": 7\n}\n'


@pytest.mark.parametrize(("content", "kept", "drops"), [
    (b'"just a string"', [], [("one.json:1", "wrong_type")]),
    (b"42\n", [], [("one.json:1", "wrong_type")]),
    (b"null", [], [("one.json:1", "wrong_type")]),
    (b'\n\n{\n  "prompt": "One object over lines"\n}\n', ["One object over lines"], []),
    (b'{"prompt": "One object on one line"}', ["One object on one line"], []),
    (b'{"a": {"prompt": "By name"}, "b": {"prompt": "On one line"}}', ["By name", "On one line"],
     []),
    (BROKEN_FIRST, ["Second"], [("one.json:2", "malformed"), ("one.json:4", "wrong_type")]),
])
def test_a_json_file_that_is_one_value(tmp_path: Path, content: bytes, kept: list,
                                       drops: list) -> None:
    f = tmp_path / "one.json"
    f.write_bytes(content)
    df, _, listed = build(tmp_path, "jsonl", f)
    assert df["text"].tolist() == kept
    assert [(r["where"], r["reason"]) for r in listed] == drops


def test_reader_datasets_on_a_broken_local_file_falls_back(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one"}\n{bad\n{"prompt": "two"}\n')
    df, card, listed = build(tmp_path, "jsonl", f, reader="datasets",
                             hf_cache_dir=str(tmp_path / "hf"))
    assert df["text"].tolist() == ["one", "two"]
    assert [(r["where"], r["reason"]) for r in listed] == [("p.jsonl:2", "malformed")]
    assert listed[0]["excerpt"] == "{bad"
    assert "datasets.load_dataset failed" in card["source"]["reader"]


@pytest.mark.parametrize("indent", [None, 0, 2])
def test_a_raw_line_break_inside_a_string_is_one_bad_element(tmp_path: Path,
                                                              indent: int | None) -> None:
    rows = [{"prompt": "first"}, {"prompt": "BROKEN"}, {"prompt": "third"}]
    text = ("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n" if indent is None
            else json.dumps(rows, indent=indent))
    f = tmp_path / "nl.json"
    f.write_text(text.replace("BROKEN", "line one\nline two"))
    df, _, listed = build(tmp_path, "jsonl", f)
    assert df["text"].tolist() == ["first", "third"]
    line = text[:text.index("BROKEN")].count("\n") + 1 - (indent is not None)
    assert [(r["where"], r["reason"]) for r in listed] == [(f"nl.json:{line}", "malformed")]


def test_junk_after_the_list_and_a_trailing_comma(tmp_path: Path) -> None:
    f = tmp_path / "tail.json"
    f.write_text('[\n{"prompt": "one"},\n{"prompt": "two"},\n]\n{"prompt": "three"}\n')
    df, card, listed = build(tmp_path, "jsonl", f)
    assert df["text"].tolist() == ["one", "two"]  # a ',' before ']' loses nothing
    assert [(r["where"], r["reason"]) for r in listed] == [("tail.json:5", "malformed")]
    assert "text after the list is closed" in listed[0]["message"]
    assert card["source"]["unreadable"][0]["byte"] == f.read_bytes().index(b'{"prompt": "three')


# ---------------------------------------------------------------------------- CSV

CSV_JSONL = [  # (line as written, expect, prompt kept)
    (b"prompt,length,family", "header", ""),
    (b"Write a haiku about autumn,17,poetry", "keep", "Write a haiku about autumn"),
    (b'"Unterminated quote,4,x', "malformed", ""),
    (b"too,many,cells,here", "malformed", ""),
    (b"A short row", "keep", "A short row"),
    (b"caf\xff au lait,3,", "non_utf8", ""),
    (b",5,", "null_field", ""),
    (b"   ,5,", "empty", ""),
    (b"write a HAIKU about   autumn,3,", "duplicate", ""),
    (b"Bad length,abc,", "wrong_type", ""),
    (b"Negative length,-3,", "wrong_type", ""),
    (b"Huge length,1000000000000000000000000000000,", "wrong_type", ""),
    (b"Fractional length,2.5,", "wrong_type", ""),
    (b'"Quoted, with a comma and ""quotes""",9,', "keep", 'Quoted, with a comma and "quotes"'),
    (b'"A prompt over', "keep", "A prompt over\ntwo lines"),
    (b'two lines",8,', "continued", ""),
    (b"", "blank", ""),
    (b'"bad"quote,1,', "malformed", ""),
    (b"A NUL \x00 inside,7,", "keep", "A NUL \x00 inside"),
    (b"Long " * 40_000 + b",1,", "keep", "Long " * 40_000),  # over csv's default field limit
    (b"Explain TCP handshakes,240,", "keep", "Explain TCP handshakes"),
]


@pytest.mark.parametrize("windows", [False, True])
def test_csv_rows(tmp_path: Path, windows: bool) -> None:
    nl = b"\r\n" if windows else b"\n"
    f = tmp_path / "p.csv"
    f.write_bytes((BOM if windows else b"") + nl.join(line for line, _, _ in CSV_JSONL) + nl)
    df, card, listed = build(tmp_path, "jsonl", f)
    kept = [t.replace("\n", "\r\n") if windows else t for _, e, t in CSV_JSONL if e == "keep"]
    assert df["text"].tolist() == kept
    assert [(r["where"], r["reason"]) for r in listed] == [
        (f"p.csv:{k}", e) for k, (_, e, _) in enumerate(CSV_JSONL, 1)
        if e not in ("header", "keep", "continued", "blank")]
    assert json.loads(df["meta"][0])["length"] == 17 and df["family"][0] == "poetry"
    assert card["source"]["reader"].startswith("lenbench csv")
    with pytest.raises(SourceError, match=r"^p\.csv:3: not valid CSV"):
        build_promptset(load_source("jsonl", path=str(f), strict=True), ALL_TRAIN)


def test_csv_alpaca_and_a_missing_column(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("instruction,input,output\nGive three tips,,x\n,,\nTranslate,I like cheese,\n"
                 "Extra,cell,here,!\n")
    df, _, listed = build(tmp_path, "alpaca", f)
    assert df["text"].tolist() == ["Give three tips", "Translate\n\nI like cheese"]
    assert [(r["where"], r["reason"]) for r in listed] == [("a.csv:3", "null_field"),
                                                           ("a.csv:5", "malformed")]
    g = tmp_path / "b.csv"
    g.write_text("text,length\nno prompt column,3\n")
    _, _, listed = build(tmp_path, "jsonl", g)
    assert [(r["where"], r["reason"]) for r in listed] == [("b.csv:2", "missing_field")]
    for name, data, reason in [("utf16.csv", "prompt\nhello\n".encode("utf-16"), "non_utf8"),
                               ("quote.csv", b'"prompt,length\nhello,1\n', "malformed")]:
        (tmp_path / name).write_bytes(data)  # no header to name the cells: one counted row
        df, _, listed = build(tmp_path, "jsonl", tmp_path / name)
        assert len(df) == 0 and [(r["where"], r["reason"]) for r in listed] == \
            [(f"{name}:1", reason)]
        assert listed[0]["message"].startswith("the header line: ")


# ---------------------------------------------------------------------------- Parquet


def test_parquet_rows(tmp_path: Path) -> None:
    f = tmp_path / "p.parquet"
    prompts = ["Write a haiku", None, "", "   ", "write a HAIKU", "Negative length",
               "Huge length", "No length", "Explain TCP"]
    lengths = [17, 3, 3, 3, 3, -3, 2**40, None, 240]
    pq.write_table(pa.table({"prompt": prompts, "length": lengths}), f, row_group_size=4)
    df, _, listed = build(tmp_path, "jsonl", f)
    assert df["text"].tolist() == ["Write a haiku", "No length", "Explain TCP"]
    assert [(r["where"], r["reason"]) for r in listed] == [
        ("p.parquet[1]", "null_field"), ("p.parquet[2]", "empty"), ("p.parquet[3]", "empty"),
        ("p.parquet[4]", "duplicate"), ("p.parquet[5]", "wrong_type"),
        ("p.parquet[6]", "wrong_type")]
    lists = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"prompt": [["a", "b"], None],
                             "messages": [None, {"role": "user", "content": "x"}]}), lists)
    _, _, listed = build(tmp_path, "jsonl", lists)
    assert [(r["where"], r["reason"]) for r in listed] == [("lists.parquet[0]", "non_text"),
                                                           ("lists.parquet[1]", "wrong_type")]


def _sharegpt_table() -> pa.Table:
    return pa.table({"id": ["a", "b", "c"],
                     "conversations": [[h("Hello there"), g("Hi")], None, [g("alone")]]})


def test_parquet_sharegpt_and_lmsys(tmp_path: Path) -> None:
    f = tmp_path / "sg.parquet"
    pq.write_table(_sharegpt_table(), f)
    df, _, listed = build(tmp_path, "sharegpt", f)
    assert df["text"].tolist() == ["Hello there"]
    assert [(r["where"], r["reason"]) for r in listed] == [("sg.parquet[1]", "null_field"),
                                                           ("sg.parquet[2]", "no_prompt")]
    rows = [lmsys_good("Keep this one"), {**lmsys_good("null language"), "language": None},
            {**lmsys_good("x"), "conversation": None}]
    m = tmp_path / "lmsys.parquet"
    pd.DataFrame(rows).to_parquet(m, index=False)
    df, _, listed = build(tmp_path, "lmsys", m, language="English")
    assert df["text"].tolist() == ["Keep this one"]
    assert [(r["where"], r["reason"]) for r in listed] == [("lmsys.parquet[1]", "null_field"),
                                                           ("lmsys.parquet[2]", "null_field")]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "corrupt_row_group"])
def test_unreadable_parquet_is_a_counted_row(tmp_path: Path, damage: str) -> None:
    f = tmp_path / "p.parquet"
    pq.write_table(pa.table({"prompt": [f"prompt number {i}" for i in range(30)]}), f,
                   row_group_size=10, compression="none")
    data = f.read_bytes()
    if damage == "corrupt_row_group":  # the second row group's data page header is overwritten
        at = pq.ParquetFile(f).metadata.row_group(1).column(0).data_page_offset
        f.write_bytes(data[:at] + b"\xff" * 16 + data[at + 16:])
    else:
        f.write_bytes({"truncated": data[:-30], "garbage": b"not parquet at all",
                       "empty": b""}[damage])
    df, card, listed = build(tmp_path, "jsonl", f)
    if damage == "corrupt_row_group":
        assert df["text"].tolist() == [f"prompt number {i}" for i in (*range(10), *range(20, 30))]
        assert [(r["where"], r["reason"]) for r in listed] == [("p.parquet[10]", "malformed")]
        assert "rows 10 to 19 (row group 1) could not be read" in listed[0]["message"]
    else:
        assert len(df) == 0
        assert [(r["where"], r["reason"]) for r in listed] == [("p.parquet", "malformed")]
        assert listed[0]["message"].startswith("not a readable Parquet file")
        assert card["source"]["unreadable"][0]["byte"] == 0
    with pytest.raises(SourceError, match=r"^p\.parquet(\[10\])?: "):
        build_promptset(load_source("jsonl", path=str(f), strict=True), ALL_TRAIN)


# ---------------------------------------------------------------------------- folders


def test_folder_of_mixed_types_reads_every_file(tmp_path: Path) -> None:
    """datasets.load_dataset reads one file type of a folder: lenbench reads them all."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"prompt": "from jsonl"}\n{"prompt": "brok\n')
    pq.write_table(pa.table({"prompt": ["from parquet"]}), folder / "b.parquet")
    (folder / "c.parquet").write_bytes(b"cut off")
    (folder / "d.csv").write_text("prompt\nfrom csv\n\"bad\"quote\n")
    (folder / "README.md").write_text("# not data\n")
    df, card, listed = build(tmp_path, "jsonl", folder, hf_cache_dir=str(tmp_path / "hf"))
    assert df["text"].tolist() == ["from jsonl", "from parquet", "from csv"]
    assert [(r["where"], r["reason"]) for r in listed] == [
        ("a.jsonl:2", "malformed"), ("c.parquet", "malformed"), ("d.csv:3", "malformed")]
    assert "mixes file types" in card["source"]["reader"]


def test_folder_read_by_datasets_counts_a_row_it_cannot_decode(tmp_path: Path) -> None:
    """datasets stops iterating at a text value that is not UTF-8: that row alone is lost."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "p.jsonl").write_bytes(b'{"prompt": "first"}\n{"prompt": "caf\xff"}\n'
                                     b'{"prompt": "third"}\n')
    df, card, listed = build(tmp_path, "jsonl", folder, hf_cache_dir=str(tmp_path / "hf"))
    assert card["source"]["reader"] == "datasets"
    assert df["text"].tolist() == ["first", "third"]
    assert [(r["where"], r["reason"]) for r in listed] == [("d[train][1]", "non_utf8")]


def test_folder_lines_keeps_null_and_missing_apart(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "p.jsonl").write_text('{"prompt": "ok"}\n{"prompt": null}\n{"length": 3}\n')
    _, card, listed = build(tmp_path, "jsonl", folder, reader="lines")
    assert [(r["where"], r["reason"]) for r in listed] == [("p.jsonl:2", "null_field"),
                                                           ("p.jsonl:3", "missing_field")]
    assert card["source"]["files"] == [str(folder / "p.jsonl")]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match="holds no data files"):
        load_source("jsonl", path=str(empty), reader="lines")
