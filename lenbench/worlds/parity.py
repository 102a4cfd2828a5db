"""Do two labellings sample the same model? A shipped world against labels made another way.

    python -m lenbench.worlds.parity --world smollm2_sharegpt \\
        --stage .cache/lenbench/generate/<key> [--json report.json]

Typical use: the same prompts, seeds and sampling in bfloat16 against the world's float32. On
the samples both hold (same prompt, same sample index, so the same random stream) it reports how
many are token-for-token identical, and where they part; then, as distributions, the mean L, the
share ending on EOS, the paired mean difference of L with a bootstrap interval over prompts (and
a Wilcoxon signed-rank test), and unpaired two-sample tests of the lengths (Kolmogorov-Smirnov and
Mann-Whitney; censored samples sit tied at the cap on both sides). Identical samples say the
numerics agree; few identical samples with an interval around 0 say the labels differ sample by
sample, and bound how far apart their mean lengths can be.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from lenbench.models.build_info import cpu_description, lenbench_commit, package_versions
from lenbench.scoring.metrics import paired_difference
from lenbench.worlds.pack import CPU_FLAGS
from lenbench.worlds.shipped import ShippedWorld


def first_difference(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if int(x) != int(y):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def paired_lengths(ref_L: np.ndarray, other_L: np.ndarray, prompts: np.ndarray,
                   n_boot: int = 2000, seed: int = 0) -> dict:
    """The mean of other minus reference L with a bootstrap 95% interval over prompts (the
    leaderboard's paired difference), and a Wilcoxon signed-rank test on the prompts' mean
    differences: the two labellings answer the same prompts, so their lengths pair, and the
    unpaired tests beside it ignore that."""
    paired = paired_difference(other_L, ref_L, prompts, n_boot=n_boot, seed=seed)
    ids, inverse = np.unique(prompts, return_inverse=True)
    per_prompt = np.bincount(inverse, weights=other_L - ref_L) / np.bincount(inverse)
    nonzero = per_prompt[per_prompt != 0]
    wilcoxon = stats.wilcoxon(nonzero) if nonzero.size else None
    return {"mean_L_difference": paired["mean"], "ci95": paired["ci"],
            "n_prompts": int(ids.size),
            "wilcoxon_p_value": None if wilcoxon is None else float(wilcoxon.pvalue),
            "n_prompts_same_mean_L": int(ids.size - nonzero.size)}


def parity_report(reference: pd.DataFrame, other: pd.DataFrame) -> dict:
    """Compare two label tables on their common (prompt_id, sample_idx) rows."""
    ref = reference.set_index(["prompt_id", "sample_idx"])
    oth = other.set_index(["prompt_id", "sample_idx"])
    common = ref.index.intersection(oth.index)
    if len(common) == 0:
        raise ValueError("the two labellings share no (prompt, sample) row")
    ref, oth = ref.loc[common], oth.loc[common]
    splits = [first_difference(list(a), list(b))
              for a, b in zip(ref["output_token_ids"], oth["output_token_ids"])]
    parted = [s for s in splits if s is not None]
    la, lb = ref["L"].to_numpy(float), oth["L"].to_numpy(float)  # censored: at the cap, both

    def side(df: pd.DataFrame, lengths: np.ndarray) -> dict:
        return {"mean_L": float(lengths.mean()), "median_L": float(np.median(lengths)),
                "eos_share": float((df["finish_reason"] == "stop").mean())}

    ks = stats.ks_2samp(la, lb)
    mw = stats.mannwhitneyu(la, lb, alternative="two-sided")
    paired = paired_lengths(la, lb, common.get_level_values(0).to_numpy())
    return {"n_samples": len(common),
            "n_prompts": int(common.get_level_values(0).nunique()),
            "identical": int(len(splits) - len(parted)),
            "same_L": int((la == lb).sum()),
            "both_censored": int(((ref["finish_reason"] == "length").to_numpy()
                                  & (oth["finish_reason"] == "length").to_numpy()).sum()),
            "median_first_difference": float(np.median(parted)) if parted else None,
            "reference": side(ref, la), "other": side(oth, lb),
            "paired": paired,
            "ks": {"statistic": float(ks.statistic), "p_value": float(ks.pvalue)},
            "mann_whitney": {"statistic": float(mw.statistic), "p_value": float(mw.pvalue)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, help="a shipped world (name or folder)")
    parser.add_argument("--stage", type=Path, required=True,
                        help="a finished generate stage with the other labels")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    world = ShippedWorld.load(args.world)
    other = pd.read_parquet(args.stage / "labels.parquet")
    report = parity_report(world.samples, other)
    report["world"] = world.name
    report["other_card"] = {k: v for k, v in json.loads(
        (args.stage / "card.json").read_text()).items()
        if k in ("model_dtype", "sampling", "seed", "backend", "sample_key")}
    # the machine the comparison ran on; the stage's card does not record where its labels were
    # generated, so run this there (the docs say which machine made the shipped report's labels)
    report["compared_on"] = {"cpu": cpu_description(CPU_FLAGS),
                             "packages": package_versions(("torch", "transformers")),
                             "lenbench_commit": lenbench_commit(),
                             "other_stage": args.stage.name}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
