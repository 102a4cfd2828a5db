"""Real prompt sources on local files in the public formats, bad rows included.

Each fixture holds good rows and one of every kind of bad row; the tests check the exact prompts
kept and the exact drop counts by reason in the card, and that strict mode names file and line.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, make_dataclass, replace
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from lenbench.configs import group_config, load_preset, preset_config
from lenbench.data.promptset import (
    SOURCES,
    RawPrompt,
    build_promptset,
    load_source,
    source_fingerprint,
    source_from_config,
)
from lenbench.data.sources import SourceError

CONF = Path(__file__).resolve().parent.parent / "conf" / "dataset"
ALL_TRAIN = {"train": 1.0, "val": 0.0, "test": 0.0}
BAD_BYTES = "@@NOT_UTF8@@"  # replaced by b"\xff" when the fixture is written


def write_json_list(path: Path, rows: list) -> Path:
    """A JSON list with element k (1-based) on line k + 1, so line numbers are predictable."""
    body = "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]\n"
    path.write_bytes(body.encode().replace(BAD_BYTES.encode(), b"caf\xff"))
    return path


def write_lines(path: Path, lines: list) -> Path:
    raw = [line if isinstance(line, bytes) else
           (line if isinstance(line, str) else json.dumps(line)).encode() for line in lines]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return path


def build(source: str, **kwargs) -> tuple[pd.DataFrame, dict]:
    return build_promptset(load_source(source, **kwargs), ALL_TRAIN)


def texts(df: pd.DataFrame) -> list[str]:
    return df["text"].tolist()


def assert_accounted(card: dict) -> None:
    """Never a silent loss: every row read is kept or dropped for a counted reason."""
    assert card["n_read"] == card["n_kept"] + sum(card["dropped"].values())


# ---------------------------------------------------------------------------- ShareGPT

def h(text):
    return {"from": "human", "value": text}


def g(text):
    return {"from": "gpt", "value": text}


SHAREGPT_ROWS = [
    {"id": "s1", "conversations": [h("What is the capital of France?"), g("Paris.")]},
    {"id": "s2", "conversations": [{"from": "system", "value": "You are a poet."},
                                   h("Write a poem about the sea"), g("Waves..."),
                                   h("Make it shorter"), g("Sea.")]},
    {"id": "s3", "conversations": [h("   "), g("?")]},                       # empty
    {"id": "s4", "conversations": [h(123), g("?")]},                         # non_text (line 5)
    {"id": "s5"},                                                            # missing_field
    {"id": "s6", "conversations": "hello"},                                  # wrong_type
    {"id": "s7", "conversations": [g("I speak first and alone")]},          # no_prompt
    {"id": "s8", "conversations": [h("What is the capital of France?"), g("Paris")]},  # dup
    {"id": "s9", "conversations": [h("  what is the CAPITAL of   france? "), g("Paris")]},  # dup
    {"id": "s10", "conversations": [{"from": "human"}]},                    # missing_field
    {"id": "s11", "conversations": [{"from": "user", "value": "Explain recursion briefly"},
                                    {"from": "assistant", "value": "It calls itself."}]},
    {"id": "s12", "conversations": [h(f"{BAD_BYTES} au lait, please"), g("ok")]},  # non_utf8
]
SHAREGPT_DROPPED = {"duplicate": 2, "empty": 1, "missing_field": 2, "no_prompt": 1,
                    "non_text": 1, "non_utf8": 1, "wrong_type": 1}


def test_sharegpt_first_turn(tmp_path: Path) -> None:
    f = write_json_list(tmp_path / "sharegpt.json", SHAREGPT_ROWS)
    df, card = build("sharegpt", path=str(f))
    assert texts(df) == ["What is the capital of France?", "Write a poem about the sea",
                         "Explain recursion briefly"]
    assert card["dropped"] == SHAREGPT_DROPPED
    assert card["n_read"] == 12 and card["n_kept"] == 3
    assert_accounted(card)
    ex = card["examples"]
    assert ex["non_text"] == ["sharegpt.json:5: conversations[0].value is not text (int)"]
    assert ex["missing_field"] == ["sharegpt.json:6: missing field 'conversations'",
                                   "sharegpt.json:11: conversations[0] has no 'value'"]
    assert ex["wrong_type"][0].startswith("sharegpt.json:7: 'conversations' must be a list")
    assert ex["non_utf8"][0].startswith("sharegpt.json:13: bytes that are not UTF-8")
    assert ex["duplicate"] == ["sharegpt.json:9: duplicate of sharegpt.json:2",
                               "sharegpt.json:10: duplicate of sharegpt.json:2"]
    assert card["source"]["format"] == "sharegpt" and card["source"]["path"] == str(f)
    meta = json.loads(df["meta"][1])
    assert meta == {"id": "s2", "turn": 1,
                    "context": [{"role": "system", "content": "You are a poet."}]}


def test_sharegpt_all_turns_keep_context(tmp_path: Path) -> None:
    f = write_json_list(tmp_path / "sharegpt.json", SHAREGPT_ROWS)
    df, card = build("sharegpt", path=str(f), turns="all")
    assert texts(df) == ["What is the capital of France?", "Write a poem about the sea",
                         "Make it shorter", "Explain recursion briefly"]
    assert card["dropped"] == SHAREGPT_DROPPED
    assert_accounted(card)
    meta = json.loads(df["meta"][2])
    assert meta["turn"] == 3 and [m["role"] for m in meta["context"]] == \
        ["system", "user", "assistant"]
    assert meta["context"][1]["content"] == "Write a poem about the sea"


def test_sharegpt_strict_names_file_and_line(tmp_path: Path) -> None:
    f = write_json_list(tmp_path / "sharegpt.json", SHAREGPT_ROWS)
    with pytest.raises(SourceError, match=r"sharegpt\.json:5: conversations\[0\]\.value is not "
                                          r"text .*dataset\.strict"):
        build("sharegpt", path=str(f), strict=True)


def test_sharegpt_truncated_file_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "cut.json"
    f.write_text('[\n{"id": "a", "conversations": [{"from": "human", "value": "Hi there"}]},\n'
                 '{"id": "b", "conversations": [{"from": "hum\n')
    df, card = build("sharegpt", path=str(f))
    assert texts(df) == ["Hi there"]
    assert card["dropped"] == {"malformed": 1}
    assert card["examples"]["malformed"][0].startswith("cut.json:3: not valid JSON")
    assert "could not be read" in card["examples"]["malformed"][0]


def test_sharegpt_folder_goes_through_datasets(tmp_path: Path) -> None:
    """A folder is read by datasets.load_dataset, the hub code path (rows located by index)."""
    folder = tmp_path / "sg"
    folder.mkdir()
    write_json_list(folder / "part.json", [SHAREGPT_ROWS[i] for i in (0, 1, 3, 4, 7, 10)])
    df, card = build("sharegpt", path=str(folder), hf_cache_dir=str(tmp_path / "hf"))
    assert card["source"]["reader"] == "datasets"
    assert texts(df) == ["What is the capital of France?", "Write a poem about the sea",
                         "Explain recursion briefly"]
    # datasets gives every row the union of the columns, so an absent field reads as null
    assert card["dropped"] == {"duplicate": 1, "null_field": 1, "non_text": 1}
    assert card["examples"]["non_text"] == [
        "sg[train][2]: conversations[0].value is not text (int)"]


# ---------------------------------------------------------------------------- Alpaca

ALPACA_ROWS = [
    {"instruction": "Give three tips for staying healthy.", "input": "", "output": "1. Eat..."},
    {"instruction": "Translate the sentence to French.", "input": "I like cheese.",
     "output": "J'aime le fromage."},
    {"instruction": "", "input": "", "output": ""},                               # empty
    {"input": "x", "output": "y"},                                                # missing
    {"instruction": 42, "input": "", "output": ""},                               # non_text
    {"instruction": "Sort these numbers.", "input": ["3", "1"], "output": ""},    # non_text
    {"instruction": "give THREE tips for staying   healthy.", "input": "  ", "output": "."},
    {"instruction": "Summarise this text.", "input": "   \n", "output": ""},
    {"instruction": "Translate the sentence to French.", "input": "I like cheese.",
     "output": "Autre."},                                                         # exact dup
]
ALPACA_TEXTS = ["Give three tips for staying healthy.",
                "Translate the sentence to French.\n\nI like cheese.", "Summarise this text."]
ALPACA_DROPPED = {"duplicate": 2, "empty": 1, "missing_field": 1, "non_text": 2}


@pytest.mark.parametrize("reader", ["auto", "datasets"])
def test_alpaca(tmp_path: Path, reader: str) -> None:
    f = write_json_list(tmp_path / "alpaca.json", ALPACA_ROWS)
    df, card = build("alpaca", path=str(f), reader=reader, hf_cache_dir=str(tmp_path / "hf"))
    assert texts(df) == ALPACA_TEXTS
    # datasets gives every row the union of the columns, so an absent field reads as null
    absent = "missing_field" if reader == "auto" else "null_field"
    expected = {k if k != "missing_field" else absent: v for k, v in ALPACA_DROPPED.items()}
    assert card["dropped"] == expected
    assert card["n_read"] == 9
    where = "alpaca.json:6" if reader == "auto" else "alpaca.json[4]"
    assert card["examples"]["non_text"][0] == f"{where}: 'instruction' is not text (int)"
    assert card["examples"][absent][0].endswith(
        "missing field 'instruction'" if reader == "auto" else "field 'instruction' is null")


# ---------------------------------------------------------------------------- LMSYS-Chat-1M

def lmsys_row(i: int, turns: list[tuple[str, str | None]], language: str = "English",
              flagged: bool = False) -> dict:
    return {"conversation_id": f"c{i}", "model": "vicuna-13b",
            "conversation": [{"content": c, "role": r} for r, c in turns],
            "turn": sum(r == "user" for r, _ in turns), "language": language,
            "openai_moderation": [{"categories": {"harassment": flagged}, "flagged": flagged}
                                  for _ in turns],
            "redacted": False}


LMSYS_ROWS = [
    lmsys_row(1, [("user", "How do I sort a list in Python?"), ("assistant", "Use sorted().")]),
    lmsys_row(2, [("user", "¿Cómo ordeno una lista en Python?"), ("assistant", "Con sorted().")],
              language="Spanish"),                                                 # language
    lmsys_row(3, [("user", "Say something hateful"), ("assistant", "No.")], flagged=True),
    lmsys_row(4, [("user", ""), ("assistant", "?")]),                              # empty
    lmsys_row(5, [("user", None), ("assistant", "?")]),                            # null
    lmsys_row(6, [("user", "How do I sort a list in Python?"), ("assistant", "sorted")]),  # dup
    lmsys_row(7, [("user", "Tell me a joke"), ("assistant", "Knock knock."),
                  ("user", "Another one"), ("assistant", "Why did...")]),
    lmsys_row(8, [("user", "tell me a  JOKE "), ("assistant", "Ha.")]),             # dup
]


@pytest.fixture
def lmsys_parquet(tmp_path: Path) -> Path:
    f = tmp_path / "lmsys.parquet"
    pd.DataFrame(LMSYS_ROWS).to_parquet(f, index=False)
    return f


def test_lmsys_filters(tmp_path: Path, lmsys_parquet: Path) -> None:
    df, card = build("lmsys", path=str(lmsys_parquet), language="English", drop_flagged=True,
                     hf_cache_dir=str(tmp_path / "hf"))
    assert texts(df) == ["How do I sort a list in Python?", "Tell me a joke"]
    assert card["dropped"] == {"duplicate": 2, "empty": 1, "language": 1, "null_field": 1,
                               "moderation": 1}
    assert_accounted(card)
    assert card["examples"]["language"] == [
        "lmsys.parquet[1]: language 'Spanish' not in ['English']"]
    assert card["examples"]["null_field"] == [
        "lmsys.parquet[4]: conversation[0].content is null"]
    assert json.loads(df["meta"][0]) == {"conversation_id": "c1", "language": "English",
                                         "model": "vicuna-13b", "redacted": False, "turn": 0}


def test_lmsys_without_filters_and_all_turns(tmp_path: Path, lmsys_parquet: Path) -> None:
    df, card = build("lmsys", path=str(lmsys_parquet), hf_cache_dir=str(tmp_path / "hf"))
    assert texts(df) == ["How do I sort a list in Python?", "¿Cómo ordeno una lista en Python?",
                         "Say something hateful", "Tell me a joke"]
    assert card["dropped"] == {"duplicate": 2, "empty": 1, "null_field": 1}
    df, card = build("lmsys", path=str(lmsys_parquet), language=["English"], drop_flagged=True,
                     turns="all", hf_cache_dir=str(tmp_path / "hf"))
    assert texts(df) == ["How do I sort a list in Python?", "Tell me a joke", "Another one"]
    assert json.loads(df["meta"][2])["context"][1] == {"role": "assistant",
                                                       "content": "Knock knock."}


def test_lmsys_strict(tmp_path: Path, lmsys_parquet: Path) -> None:
    with pytest.raises(SourceError, match=r"lmsys\.parquet\[4\]: conversation\[0\]\.content"):
        build("lmsys", path=str(lmsys_parquet), strict=True, hf_cache_dir=str(tmp_path / "hf"))


# ---------------------------------------------------------------------------- JSON Lines

JSONL_LINES = [
    {"id": "p1", "prompt": "Write a haiku about autumn", "length": 17},
    {"prompt": "Explain TCP handshakes", "output_tokens": 240},
    {"messages": [{"role": "system", "content": "Be terse."},
                  {"role": "user", "content": "List prime numbers below 20"}], "length": 30},
    {"prompt": "", "length": 5},                                      # 4 empty
    {"prompt": 17, "length": 3},                                      # 5 non_text
    {"text": "no prompt here", "length": 3},                          # 6 missing_field
    '{"prompt": "broken',                                             # 7 malformed
    b'{"prompt": "caf\xff au lait", "length": 4}',                    # 8 non_utf8
    "",                                                               # 9 blank: not a row
    {"prompt": "Write a haiku about autumn", "length": 20},           # 10 duplicate
    {"prompt": "write a  HAIKU about Autumn ", "length": 21},         # 11 duplicate
    {"prompt": "Name a colour", "length": "ten"},                     # 12 wrong_type
    {"messages": "hello", "length": 2},                               # 13 wrong_type
    [1, 2],                                                           # 14 wrong_type
    {"prompt": "Count to three", "length": [4, 6, 5], "family": "counting"},
    {"prompt": "Say hi", "length": -1},                               # 16 wrong_type
    {"prompt": "Describe the moon", "length": 12.0},
]
JSONL_TEXTS = ["Write a haiku about autumn", "Explain TCP handshakes",
               "List prime numbers below 20", "Count to three", "Describe the moon"]
JSONL_DROPPED = {"duplicate": 2, "empty": 1, "malformed": 1, "missing_field": 1, "non_text": 1,
                 "non_utf8": 1, "wrong_type": 4}


def test_jsonl_bad_rows_counted_with_lines(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "prompts.jsonl", JSONL_LINES)
    df, card = build("jsonl", path=str(f))
    assert texts(df) == JSONL_TEXTS
    assert card["dropped"] == JSONL_DROPPED
    assert card["n_read"] == 16
    assert_accounted(card)
    ex = card["examples"]
    assert ex["missing_field"] == ["prompts.jsonl:6: missing field 'prompt' (or 'messages')"]
    assert ex["malformed"][0].startswith("prompts.jsonl:7: not valid JSON")
    assert ex["non_utf8"][0].startswith("prompts.jsonl:8: bytes that are not UTF-8")
    assert ex["duplicate"] == ["prompts.jsonl:10: duplicate of prompts.jsonl:1",
                               "prompts.jsonl:11: duplicate of prompts.jsonl:1"]
    assert [e.split(":")[1] for e in ex["wrong_type"]] == ["12", "13", "14", "16"]
    metas = [json.loads(m) for m in df["meta"]]
    assert [m.get("length") for m in metas] == [17, 240, 30, [4, 6, 5], 12]
    assert metas[0]["id"] == "p1"
    assert metas[2]["context"] == [{"role": "system", "content": "Be terse."}]
    assert df["family"].tolist() == ["", "", "", "counting", ""]


def test_jsonl_strict(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "prompts.jsonl", JSONL_LINES)
    with pytest.raises(SourceError, match=r"prompts\.jsonl:5: 'prompt' is not text"):
        build("jsonl", path=str(f), strict=True)
    clean = write_lines(tmp_path / "clean.jsonl", JSONL_LINES[:3])
    df, card = build("jsonl", path=str(clean), strict=True)
    assert len(df) == 3 and card["dropped"] == {}


def test_jsonl_folder_falls_back_when_datasets_fails(tmp_path: Path) -> None:
    """load_dataset cannot parse a malformed line; the line reader takes over and says so."""
    folder = tmp_path / "mine"
    folder.mkdir()
    write_lines(folder / "prompts.jsonl", JSONL_LINES)
    df, card = build("jsonl", path=str(folder), hf_cache_dir=str(tmp_path / "hf"))
    assert texts(df) == JSONL_TEXTS and card["dropped"] == JSONL_DROPPED
    assert "datasets.load_dataset failed" in card["source"]["reader"]
    assert card["source"]["files"] == [str(folder / "prompts.jsonl")]


def test_jsonl_bom_and_crlf(tmp_path: Path) -> None:
    """Files saved by Windows editors (byte-order mark, CRLF) read like any other."""
    f = tmp_path / "win.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"prompt": "first line"}\r\n{"prompt": "second line"}\r\n')
    df, card = build("jsonl", path=str(f))
    assert texts(df) == ["first line", "second line"] and card["dropped"] == {}
    g = write_json_list(tmp_path / "bom.json", ALPACA_ROWS[:2])
    g.write_bytes(b"\xef\xbb\xbf" + g.read_bytes())
    assert texts(build("alpaca", path=str(g))[0]) == ALPACA_TEXTS[:2]


def test_jsonl_custom_length_field(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "t.jsonl", [{"prompt": "a b", "tokens": 9, "length": 1}])
    df, _ = build("jsonl", path=str(f), length_field="tokens")
    assert json.loads(df["meta"][0])["length"] == 9


def test_unreadable_sources_say_why(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="needs a file: set dataset.path"):
        build("jsonl")
    with pytest.raises(SourceError, match="does not exist"):
        build("jsonl", path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(SourceError, match=r"offline, gated or a typo\? set dataset.path"):
        build("alpaca", hub_id="no-such-org/no-such-data", hf_cache_dir=str(tmp_path / "hf"))


# ---------------------------------------------------------------------------- configs

BUILD_KEYS = {"name", "source", "split", "split_salt", "min_words", "max_words", "limit", "seed",
              "n_prompts", "source_args"}


@pytest.mark.parametrize("name", ["sharegpt", "alpaca", "lmsys", "jsonl"])
def test_dataset_yaml_keys_reach_the_source(name: str) -> None:
    """Every key in a dataset YAML is a source argument or a build_promptset one (no typos)."""
    import inspect

    load_source("toyworld", n_prompts=1, seed=0)  # registers the built-in sources
    cfg = load_preset("dataset", name)
    params = set(inspect.signature(SOURCES[cfg["source"]]).parameters)
    from lenbench.pipeline import LABEL_IMPORT_KEYS

    assert set(cfg.keys()) - BUILD_KEYS - set(LABEL_IMPORT_KEYS) <= params
    assert cfg["name"] == name and abs(sum(cfg["split"].values()) - 1.0) < 1e-9


def test_source_from_config(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "prompts.jsonl", JSONL_LINES)
    ds = group_config("dataset", {**load_preset("dataset", "jsonl"), "path": str(f)})
    df, card = build_promptset(source_from_config(ds), ds.split, salt=ds.split_salt,
                               min_words=ds.min_words, max_words=ds.max_words, limit=ds.limit)
    assert sorted(texts(df)) == sorted(JSONL_TEXTS) and card["dropped"] == JSONL_DROPPED
    assert sum(card["splits"].values()) == 5
    # toyworld keeps working through the same entry point
    toy = source_from_config(group_config("dataset", {"source": "toyworld", "n_prompts": 3,
                                                      "seed": 0}))
    assert all(isinstance(p, RawPrompt) for p in itertools.islice(toy, 3))
    with pytest.raises(KeyError, match="available"):
        source_from_config(group_config("dataset", {"name": "x", "source": "nope"}))


def test_limit_stops_reading(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "p.jsonl", [{"prompt": f"prompt number {i}"} for i in range(50)])
    df, card = build_promptset(load_source("jsonl", path=str(f)), ALL_TRAIN, limit=7)
    assert len(df) == 7 and card["n_read"] == 7


def test_fingerprint_follows_the_file(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "p.jsonl", [{"prompt": "one two"}])
    def file(path):
        return group_config("dataset", {"name": "f", "source": "jsonl", "path": path})

    first = source_fingerprint(file(str(f)))
    assert first and first == source_fingerprint(file(str(f)))
    write_lines(f, [{"prompt": "one two"}, {"prompt": "three four"}])
    second = source_fingerprint(file(str(f)))
    assert second != first
    st = f.stat()  # a local file edited in place keeps its size: its mtime still tells
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert source_fingerprint(file(str(f))) != second
    assert source_fingerprint(replace(file(None), hub_id="x/y")) is None


@pytest.mark.parametrize("name", ["sharegpt", "jsonl"])
def test_hydra_dataset_override(tmp_path: Path, name: str) -> None:
    """`lenbench dataset=<name> dataset.path=<file>` composes into a config the source reads."""
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR

    f = (write_json_list(tmp_path / "sharegpt.json", SHAREGPT_ROWS) if name == "sharegpt"
         else write_lines(tmp_path / "prompts.jsonl", JSONL_LINES))
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"dataset={name}", f"dataset.path={f}",
                                           "dataset.limit=2"])
    ds = group_config("dataset", OmegaConf.to_container(cfg.dataset, resolve=True))
    df, card = build_promptset(source_from_config(ds), ds.split, limit=ds.limit)
    assert len(df) == 2 and card["source"]["path"] == str(f)


# --------------------------------------------------------------------------- rows that once crashed


def test_lone_surrogate_is_a_counted_bad_row(tmp_path: Path) -> None:
    """A JSON escape of half a surrogate pair decodes to a str that UTF-8 cannot hold."""
    f = write_lines(tmp_path / "p.jsonl", [{"prompt": "fine prompt", "length": 3},
                                           '{"prompt": "broken \\ud800 text", "length": 4}',
                                           '{"prompt": "low half \\udc41 too", "length": 4}',
                                           {"prompt": "another fine prompt", "length": 5}])
    df, card = build("jsonl", path=str(f))
    assert texts(df) == ["fine prompt", "another fine prompt"]
    assert card["dropped"] == {"non_utf8": 2}
    assert card["examples"]["non_utf8"][0].startswith("p.jsonl:2: a lone surrogate")
    with pytest.raises(SourceError, match=r"p\.jsonl:2: a lone surrogate"):
        build_promptset(load_source("jsonl", path=str(f), strict=True), ALL_TRAIN)


def test_an_unforeseen_row_shape_is_counted_not_fatal(tmp_path: Path) -> None:
    """A converter bug on one row costs that row, named, never the whole build."""
    def fragile(path: str, strict: bool = False):
        from lenbench.data.sources.reading import SourceStream, convert, open_records

        info: dict = {}
        records = open_records("fragile", path=path, hub_id=None, data_files=None,
                               hf_split="train", config_name=None, revision=None, reader="auto",
                               streaming=False, hf_cache_dir=None, info=info)
        return SourceStream(convert(records, lambda row: [RawPrompt(row["text"].strip())],
                                    strict), info)

    f = write_lines(tmp_path / "p.jsonl", [{"text": "one"}, {"text": 2}, {"text": "three"}])
    df, card = build_promptset(fragile(str(f)), ALL_TRAIN)
    assert texts(df) == ["one", "three"]
    assert card["dropped"] == {"malformed": 1}
    assert "p.jsonl:2: could not read this row (AttributeError" in card["examples"]["malformed"][0]
    with pytest.raises(SourceError, match=r"p\.jsonl:2: could not read this row"):
        build_promptset(fragile(str(f), strict=True), ALL_TRAIN)


def test_null_and_missing_are_kept_apart(tmp_path: Path) -> None:
    f = write_lines(tmp_path / "p.jsonl", [{"prompt": None, "length": 3}, {"length": 3},
                                           {"prompt": "ok", "length": 2}])
    _, card = build("jsonl", path=str(f))
    assert card["dropped"] == {"missing_field": 1, "null_field": 1}
    assert card["examples"]["null_field"] == ["p.jsonl:1: field 'prompt' (or 'messages') is null"]


def test_strict_stops_on_a_conversation_without_a_user_turn(tmp_path: Path) -> None:
    rows = [{"id": "a", "conversations": [{"from": "human", "value": "Hello there"},
                                          {"from": "gpt", "value": "Hi"}]},
            {"id": "b", "conversations": [{"from": "gpt", "value": "I speak first and alone"}]}]
    f = write_json_list(tmp_path / "sg.json", rows)
    _, card = build("sharegpt", path=str(f))
    assert card["dropped"] == {"no_prompt": 1}
    with pytest.raises(SourceError, match=r"sg\.json:3: 'conversations' has no user turn"):
        build_promptset(load_source("sharegpt", path=str(f), strict=True), ALL_TRAIN)


def test_every_dropped_row_is_listed_beside_the_card(tmp_path: Path) -> None:
    """The card shows a few examples per reason; the list beside it has every row."""
    from lenbench.data.promptset import DROPPED_FILE, load_promptset, save_promptset

    lines = [{"prompt": "keep me", "length": 1}] + [{"prompt": 7, "length": 1}] * 12
    f = write_lines(tmp_path / "p.jsonl", lines)
    df, card = build("jsonl", path=str(f))
    assert card["dropped"] == {"non_text": 12}
    assert len(card["examples"]["non_text"]) == 5
    out = tmp_path / "set"
    out.mkdir()
    save_promptset(out, df, card)
    listed = [json.loads(x) for x in (out / DROPPED_FILE).read_text().splitlines()]
    assert [r["where"] for r in listed] == [f"p.jsonl:{k}" for k in range(2, 14)]
    assert {r["reason"] for r in listed} == {"non_text"}
    assert listed[0]["excerpt"] == '{"prompt": 7, "length": 1}'
    _, loaded = load_promptset(out)
    assert loaded["dropped_rows_file"] == DROPPED_FILE and "dropped_rows" not in loaded


def test_promptset_key_is_what_changes_the_prompts() -> None:
    """The key reads the source's own arguments, the filter and the split: a key the source does
    not read, a reading-only setting or a field added to the schema later leaves it alone."""
    from lenbench.data.promptset import promptset_key
    from lenbench.stages import stable_hash

    base = preset_config("dataset", "sharegpt")
    key = stable_hash(promptset_key(base))
    for same in ({"seed": 7}, {"strict": True}, {"streaming": True}, {"name": "mine"}):
        assert stable_hash(promptset_key(replace(base, **same))) == key, same
    later = make_dataclass("Later", [("a_field_added_later", int, 1)], bases=(type(base),))
    assert stable_hash(promptset_key(later(**asdict(base)))) == key
    for other in ({"turns": "all"}, {"limit": 10}, {"max_words": 60}, {"split_salt": "x"},
                  {"hub_id": "someone/else"}, {"source_args": {"x": 1}}):
        assert stable_hash(promptset_key(replace(base, **other))) != key, other
    toy = preset_config("dataset", "toyworld")
    assert stable_hash(promptset_key(replace(toy, seed=1))) != stable_hash(promptset_key(toy))
