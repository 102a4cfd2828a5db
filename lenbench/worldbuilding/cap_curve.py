"""Choose a world's length cap from data: the share of answers that end on EOS within each cap.

A cap that cuts answers the model would have finished turns labels into lower bounds and makes a
benchmark rank the cap rather than the length. So the cap is read off a curve: several samples on
each of a world's first test prompts, generated with the widest cap, and for each smaller cap the
share that ended on EOS within it (the same answers cut shorter, since a sample's tokens do not
depend on the cap). Where the curve flattens, what is still censored are answers that loop.

    python -m lenbench.worldbuilding.cap_curve generate --worker 0 --workers 2
    python -m lenbench.worldbuilding.cap_curve generate --worker 1 --workers 2
    python -m lenbench.worldbuilding.cap_curve report \\
        --json lenbench/worlds/smollm2_sharegpt_v2/cap-curve.json --plot docs/img/cap-curve.png

`generate` is resumable (shards of whole prompts, written as they finish); the samples are the
world's own (same seeds), so the dense test prompts of the world reuse them cut at its cap.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.configs import RunConfig
from lenbench.generation.protocol import penalty_in_effect

CAPS = (384, 512, 768, 1024, 1536)
CONF = Path(__file__).resolve().parents[1] / "conf"
log = logging.getLogger(__name__)


def compose(experiment: str, overrides: list[str] | None = None) -> RunConfig:
    """The experiment's config, composed as `lenbench experiment=...` composes it, typed."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(CONF), version_base=None):
        cfg = hydra_compose("config", overrides=[f"experiment={experiment}", *(overrides or [])])
    return RunConfig.from_composed(OmegaConf.to_container(cfg, resolve=True))


def curve_prompts(run: RunConfig, n_prompts: int) -> pd.DataFrame:
    """The first `n_prompts` test prompts of the experiment's PromptSet (file order)."""
    from lenbench.pipeline import _promptset_stage

    _, prompts, _ = _promptset_stage(Path(run.paths.cache_dir), run.dataset)
    return prompts[prompts["split"] == "test"].reset_index(drop=True)


# the dataset settings that name the curve's prompts (`turns`: the ShareGPT schemas' only)
CURVE_DATASET_KEYS = ("name", "limit", "split", "split_salt", "max_words", "turns")


def stage_folder(run: RunConfig, n_prompts: int, samples: int, cap: int) -> Path:
    from lenbench.stages import stable_hash

    g = run.generation
    key = {"dataset": {k: getattr(run.dataset, k, None) for k in CURVE_DATASET_KEYS},
           "model": run.model.name, "temperature": g.temperature,
           "top_p": g.top_p, "seed": g.seed, "max_prompt_tokens": g.max_prompt_tokens,
           "prompts": n_prompts, "samples": samples, "cap": cap}
    if (penalty := penalty_in_effect(g.repetition_penalty)) is not None:
        key["repetition_penalty"] = penalty  # added later: keys without it stay as they were
    return Path(run.paths.cache_dir) / "cap_curve" / stable_hash(key)


def generate(args) -> pd.DataFrame:
    """Sample the curve's prompts at the widest cap, as the world's generate stage would."""
    import torch

    from lenbench.generation.backends import sampling_config
    from lenbench.generation.hf import HFGenerator
    from lenbench.generation.runner import generate_labels
    from lenbench.models.chat import eos_token_ids
    from lenbench.models.loading import load_target, resolve_model

    run = compose(args.experiment, args.override)
    g = run.generation
    prompts = curve_prompts(run, args.prompts)
    cache = Path(run.paths.cache_dir)
    torch.set_num_threads(args.threads)
    path, _ = resolve_model(run.model, cache)
    target = load_target(path, "float32", "cpu")
    eos = eos_token_ids(target.model, target.tokenizer)
    out = stage_folder(run, args.prompts, args.samples, args.cap) / "shards"
    # the prompts over the token limit are skipped, so take a few more and keep the first N
    rendered_ok = _fitting(prompts, target.tokenizer, g.max_prompt_tokens)[: args.prompts]
    known = _kept(Path(args.keep)) if args.keep else {}
    labels, _ = generate_labels(
        rendered_ok, target.model, target.tokenizer, out,
        sampling_config(g, args.cap), n_samples=args.samples,
        seed=g.seed, batch_size=args.batch_size or g.batch_size,
        shard_prompts=1,  # a prompt's samples are kept on disk as soon as all of them end
        max_prompt_tokens=g.max_prompt_tokens, keep_censored=True, progress=False,
        generator_factory=lambda: HFGenerator(target.model, eos,
                                              batch_size=args.batch_size or g.batch_size),
        worker=args.worker, num_workers=args.workers, known=known)
    return labels


def _kept(path: Path) -> dict:
    """Samples exported earlier (`report --export`): taken as they are, not generated again."""
    from lenbench.worlds.sample_store import known_from_frame

    if not path.exists():
        return {}
    known = known_from_frame(pd.read_parquet(path))
    log.info("cap curve: %d samples from %s", len(known), path)
    return known


def _fitting(prompts: pd.DataFrame, tokenizer, limit: int) -> pd.DataFrame:
    from lenbench.models.chat import render_prompt

    ok = [len(render_prompt(tokenizer, t)) <= limit for t in prompts["text"]]
    return prompts[ok].reset_index(drop=True)


def eos_shares(labels: pd.DataFrame, caps=CAPS, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per cap: the share of samples that ended on EOS within it, with a 95% interval from a
    bootstrap over prompts (a prompt's samples move together)."""
    ended = (labels["finish_reason"] == "stop").to_numpy()
    lengths = labels["L"].to_numpy()
    codes, prompt_of = np.unique(labels["prompt_id"].to_numpy(), return_inverse=True)
    rng = np.random.default_rng(seed)
    out = {}
    for cap in caps:
        hit = (ended & (lengths <= cap)).astype(float)
        per_prompt = np.bincount(prompt_of, hit) / np.bincount(prompt_of)
        boots = per_prompt[rng.integers(0, len(per_prompt), (n_boot, len(per_prompt)))].mean(1)
        out[int(cap)] = {"eos_share": float(hit.mean()),
                         "ci95": [float(np.quantile(boots, 0.025)),
                                  float(np.quantile(boots, 0.975))]}
    return out


def distinct_ngram_share(ids, n: int = 8, tail: int = 256) -> float:
    """The share of distinct n-grams among the last `tail` tokens: near 0 for an answer that
    repeats itself, near 1 for one that does not."""
    ids = [int(t) for t in list(ids)[-tail:]]
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def loop_check(labels: pd.DataFrame, n: int = 8, tail: int = 256, loop_below: float = 0.5
               ) -> dict:
    """Whether what the widest cap still cuts is loops: the distinct n-gram share of the last
    `tail` tokens of the cut answers, beside that of the answers that ended on EOS after at
    least `tail` tokens (long answers that were not loops)."""
    share = labels["output_token_ids"].map(lambda ids: distinct_ngram_share(ids, n, tail))
    cut = share[labels["finish_reason"] == "length"].to_numpy()
    long_ended = share[(labels["finish_reason"] == "stop") & (labels["L"] >= tail)].to_numpy()

    def quartiles(x: np.ndarray) -> list[float] | None:
        return [float(q) for q in np.quantile(x, [0.25, 0.5, 0.75])] if x.size else None

    return {"ngram": n, "tail_tokens": tail, "cut": int(cut.size),
            "cut_quartiles": quartiles(cut), "long_ended": int(long_ended.size),
            "long_ended_quartiles": quartiles(long_ended), "loop_below": loop_below,
            "cut_looping_share": float((cut < loop_below).mean()) if cut.size else None}


def report(args) -> dict:
    run = compose(args.experiment, args.override)
    if args.samples_file:  # an export (committed): the curve without generating anything
        labels = pd.read_parquet(args.samples_file)
    else:
        folder = stage_folder(run, args.prompts, args.samples, args.cap) / "shards"
        shards = sorted(folder.glob("shard-*.parquet"))
        if not shards:
            raise SystemExit(f"cap_curve report: no samples in {folder}; run `generate` first")
        labels = pd.concat([pd.read_parquet(p) for p in shards], ignore_index=True)
    caps = sorted({c for c in CAPS if c <= args.cap} | {args.cap})
    shares = eos_shares(labels, caps)
    n_prompts = labels["prompt_id"].nunique()
    summary = {"experiment": args.experiment, "prompts": int(n_prompts),
               "samples": int(len(labels)), "widest_cap": args.cap,
               "temperature": run.generation.temperature,
               "top_p": run.generation.top_p,
               "repetition_penalty": penalty_in_effect(run.generation.repetition_penalty) or 1.0,
               "eos_share_within": shares,
               "complete": n_prompts >= args.prompts,
               "ended_median_L": float(labels.loc[labels["finish_reason"] == "stop", "L"]
                                       .median()),
               "loops": loop_check(labels)}
    print(f"{n_prompts} prompts, {len(labels)} samples (widest cap {args.cap}):")
    for cap, s in shares.items():
        print(f"  EOS within {cap:>5}: {s['eos_share']:.1%} [{s['ci95'][0]:.1%}, "
              f"{s['ci95'][1]:.1%}]")
    loops = summary["loops"]
    if loops["cut"]:
        print(f"  cut at {args.cap}: {loops['cut']} answers, distinct {loops['ngram']}-gram share "
              f"of their last {loops['tail_tokens']} tokens: median "
              f"{loops['cut_quartiles'][1]:.2f} ({loops['cut_looping_share']:.0%} below "
              f"{loops['loop_below']}); answers that ended after {loops['tail_tokens']}+ tokens: "
              + (f"median {loops['long_ended_quartiles'][1]:.2f} ({loops['long_ended']})"
                 if loops["long_ended"] else "none"))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    if args.plot:
        plot(shares, n_prompts, len(labels), Path(args.plot))
    if args.export:
        export(labels, Path(args.export))
    return summary


def plot(shares: dict, n_prompts: int, n_samples: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = list(shares)
    y = [shares[c]["eos_share"] for c in caps]
    lo = [shares[c]["eos_share"] - shares[c]["ci95"][0] for c in caps]
    hi = [shares[c]["ci95"][1] - shares[c]["eos_share"] for c in caps]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.errorbar(caps, y, yerr=[lo, hi], marker="o", capsize=3)
    ax.set_xlabel("length cap (tokens)")
    ax.set_ylabel("share ended on EOS within the cap")
    ax.set_ylim(0, 1)
    ax.set_title(f"EOS share by cap: {n_samples} samples of {n_prompts} test prompts")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def export(labels: pd.DataFrame, out: Path) -> None:
    """The curve's samples without any prompt text (ids, token ids, L, finish reason), added to
    those `out` already holds: commit it as the curve grows, and `generate --keep` resumes from
    it on any machine."""
    from lenbench.worlds.sample_store import prompt_tokens_sha

    table = pd.DataFrame({
        "prompt_id": labels["prompt_id"], "sample_idx": labels["sample_idx"],
        "prompt_sha": [prompt_tokens_sha(list(p)) for p in labels["prompt_token_ids"]],
        "output_token_ids": [np.asarray(o, dtype=np.uint16) for o in labels["output_token_ids"]],
        "L": labels["L"], "finish_reason": labels["finish_reason"]})
    if out.exists():
        table = pd.concat([pd.read_parquet(out), table], ignore_index=True) \
            .drop_duplicates(["prompt_id", "sample_idx"], keep="first")
    table = table.sort_values(["prompt_id", "sample_idx"], kind="stable")
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out, index=False, compression="zstd", compression_level=19)
    _write_card(out, table)
    log.info("cap curve: %d samples in %s", len(table), out)


def _write_card(out: Path, table: pd.DataFrame) -> None:
    """`<file>.json` beside the samples: their checksum and count, and what made them."""
    from lenbench.models.build_info import cpu_description, lenbench_commit, package_versions
    from lenbench.worlds.pack import CPU_FLAGS, LICENSE, PACKAGES
    from lenbench.worlds.shipped import file_sha256

    card = {"file": out.name, "sha256": file_sha256(out), "bytes": out.stat().st_size,
            "samples": len(table), "prompts": int(table["prompt_id"].nunique()),
            "what": "the cap curve's samples: 8 samples on each of the first test prompts, "
                    "generated with the widest cap (cut at a world's cap, they are its samples)",
            "cpu": cpu_description(CPU_FLAGS), "packages": package_versions(PACKAGES),
            "lenbench_commit": lenbench_commit(), "license": LICENSE}
    out.with_suffix(".json").write_text(json.dumps(card, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("generate", "report"))
    ap.add_argument("--experiment", default="real_smollm2")
    ap.add_argument("--override", action="append", default=[],
                    help="a Hydra override of the experiment, e.g. generation.temperature=1.0 "
                         "(repeatable): a curve for other sampling settings")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--cap", type=int, default=max(CAPS))
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--json", help="report: write the curve here")
    ap.add_argument("--plot", help="report: draw the curve here (PNG)")
    ap.add_argument("--export", help="report: add the samples (no text) to this parquet")
    ap.add_argument("--samples-file", help="report: read the samples from this export instead "
                    "of the generated shards")
    ap.add_argument("--keep", help="generate: take the samples this parquet holds (an export)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.command == "generate":
        try:
            generate(args)
        except Exception as exc:  # another worker's shards still missing: not an error
            from lenbench.generation.runner import ShardsPending

            if not isinstance(exc, ShardsPending):
                raise
            log.info("%s", exc)
    else:
        report(args)


if __name__ == "__main__":
    main()
