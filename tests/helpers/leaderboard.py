"""Leaderboard helpers: the golden results folder, synthetic results, a section of the markdown."""

from __future__ import annotations

import json
from pathlib import Path

from lenbench.results import PROTOCOL_VERSION, load_results, result_path, write_result

GOLDEN = Path(__file__).parent.parent / "data" / "golden_results"


def synthetic_result(res: Path, name: str, seed: int, report: dict | None = None,
                     dynamic: dict | None = None, protocol_version: int | None = PROTOCOL_VERSION,
                     **timings: float) -> None:
    """A copy of the golden mlp_probe result renamed to `name`, with `report` and dynamic extras,
    scored under `protocol_version` (None: a file written before the field existed)."""
    base = next(r for r in load_results(GOLDEN)[0]
                if r.predictor.name == "mlp_probe" and r.seed == 0)
    r = json.loads((GOLDEN / base.source).read_text(encoding="utf-8"))  # the file, to edit
    r["predictor"]["name"], r["seed"] = name, seed
    r.pop("protocol_version", None)
    if protocol_version is not None:
        r["protocol_version"] = protocol_version
    r["config_hash"] = f"{name[:4]}{seed:08d}".ljust(12, "0")
    if report is not None:
        r["report"] = report
    if dynamic is None:
        r["metrics"]["dynamic"], r["predictor"]["dynamic"] = None, False
    else:
        r["metrics"]["dynamic"].update(dynamic)
    r["timings"].update(timings)
    write_result(result_path(res, "toyworld", "toy", name, r["config_hash"]), r)


def heading_block(md: str, heading: str) -> str:
    """The text under a `#### heading` up to the next heading."""
    rest = md.split(f"#### {heading}\n", 1)[1]
    return rest.split("\n#", 1)[0]


HOSTILE_NAME = '<script>alert("x")</script> & <img src=//evil.example/x> *a* | `b`'
HOSTILE_SHOWN = '<script>alert("x")</script> & <img src=//evil.example/x> a | b'  # as read


def site_results(res: Path) -> dict[str, list[str]]:
    """A small results folder for the web site: the golden world, a second world (a model name
    with a slash), a predictor with a hostile name, and a file whose path needs quoting in a
    link. Returns the world titles and predictor names the site must show, as a reader sees
    them (the markdown's marks in a name, *a* and `b`, are rendered on the page as in README)."""
    import shutil

    shutil.copytree(GOLDEN, res, dirs_exist_ok=True)
    synthetic_result(res, HOSTILE_NAME, 0)
    base = json.loads(next((GOLDEN / "toyworld" / "toy" / "mlp_probe").glob("*.json"))
                      .read_text(encoding="utf-8"))
    other = json.loads(json.dumps(base))
    other["dataset"]["name"], other["model"]["name"] = "other_set", "org/model-b"
    write_result(result_path(res, "other_set", "org/model-b", "mlp_probe",
                             other["config_hash"]), other)
    spaced = json.loads(json.dumps(base))
    spaced["predictor"]["name"] = "spaced_probe"
    odd = res / "toyworld" / "toy" / "odd folder #1" / "a b.json"
    odd.parent.mkdir(parents=True)
    odd.write_text(json.dumps(spaced), encoding="utf-8")
    return {"worlds": ["toyworld / toy", "other_set / org/model-b"],
            "predictors": ["mlp_probe", "bin_classifier", "bin_classifier (expectation)",
                           "noise_floor", "spaced_probe", HOSTILE_SHOWN]}


def schedule(true, pred, prompt_len, name: str, sim: dict, **kw) -> dict:
    """The scheduling block a run writes for these predictions, with the sim settings given as
    a mapping (a preset's, or a stored record's), typed as the harness types them."""
    from lenbench.evaluate import schedule as scheduling_block
    from lenbench.sim import SimConfig

    return scheduling_block(true, pred, prompt_len, name, SimConfig.from_dict(sim), **kw)


def board_text(readme: Path) -> str:
    """The whole markdown leaderboard as one text, as a reader following its links reads it:
    README.md with each world's summary replaced by the world's own page, and each "What the
    columns mean" link replaced by the caption it points to in the glossary (the wording for
    that world)."""
    import re

    from lenbench.leaderboard.pages import GLOSSARY, anchor

    folder = readme.parent
    captions: dict[str, list[str]] = {}  # anchor -> its wordings
    if (folder / GLOSSARY).is_file():
        for part in (folder / GLOSSARY).read_text(encoding="utf-8").split("\n## ")[1:]:
            title, _, body = part.partition("\n")
            captions[anchor(title)] = [p for p in body.strip().split("\n\n") if p]

    def caption(world: str, link: re.Match) -> str:
        wordings = captions.get(link.group(1), [link.group(0)])
        mine = [w.split(":* ", 1)[1] for w in wordings if w.startswith("*In ")
                and world in w[len("*In "):].split(":* ", 1)[0].split("; ")]
        return mine[0] if mine else wordings[0]

    parts = readme.read_text(encoding="utf-8").split("\n## ")
    for i, part in enumerate(parts[1:], 1):
        link = re.search(r"\]\((world-[^)]+\.md)\)", part)
        if link and (folder / link.group(1)).is_file():
            page = (folder / link.group(1)).read_text(encoding="utf-8")
            part = page.split("\n## ", 1)[1]  # without the way back
        world = part.split("\n", 1)[0]
        parts[i] = re.sub(rf"What the columns mean: \[[^]]*\]\({GLOSSARY}#([^)]+)\)\.",
                          lambda m, w=world: caption(w, m), part)
    return "\n## ".join(parts)
