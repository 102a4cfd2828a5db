"""`lenbench`: the Hydra app that runs the pipeline and evaluates one predictor or a suite.

`lenbench` alone evaluates the default suite on the default world; `lenbench predictor=NAME`
runs one; `lenbench -m predictor=a,b seed=0,1` sweeps. Each predictor's run is recorded as a
result file, failed runs included, and the leaderboard is rebuilt at the end of a run or sweep; a
run or sweep in which a predictor failed then exits with status 1 after one line naming it. A
config that cannot run (an unknown key, a wrong type, an argument a constructor refuses) stops
before any stage with one line per problem and exit status 2.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.console import Console
from rich.table import Table

from lenbench.configs import RunConfig
from lenbench.contract.instantiate import (
    instantiate_predictor,
    predictor_arg_problems,
    suite_problems,
)
from lenbench.data.sources.reading import SourceError
from lenbench.generation.llamacpp_server import LlamaServerError
from lenbench.generation.ray_executor import RaySetupError
from lenbench.models.gguf import ModelSourceError
from lenbench.runtime.heap import hold, release, settle
from lenbench.runtime.stage_times import StageClock, recording, timed
from lenbench.validate import ConfigError, check_config, unknown_key_problems
from lenbench.worlds.shipped import ShippedWorldError

# the configs ship inside the package (the repository's top-level conf/ links here)
CONF_DIR = str(Path(__file__).resolve().parent / "conf")
# Errors that mean "fix the command or the input": one line each and exit status 2, no traceback.
USER_ERRORS = (ConfigError, SourceError, ShippedWorldError)
# Errors met on the way that the user fixes outside lenbench (a model package to install, a
# llama-server that died): one line saying what to do, exit status 2, no traceback.
SETUP_ERRORS = (ModelSourceError, LlamaServerError, RaySetupError)
log = logging.getLogger(__name__)
# Groups whose node is always a mapping. On the command line `group.key=value` may set a key the
# preset leaves out (any constructor argument of a predictor, `predictor.k=3`), and a key no
# schema knows is refused after composition naming the closest one (`check_run_config`), instead
# of by Hydra's struct error with its advice to append the key.
OPEN_GROUPS = ("predictor", "dataset", "model", "generation", "features", "eval", "paths", "sim")
_GROUP_KEY = re.compile(rf"^(?:{'|'.join(OPEN_GROUPS)})\.[^=@/]+=")
FAILURES_FILE = "failed_predictors.txt"  # a sweep job's failures, read when the sweep ends


def _predictor_configs(cfg: DictConfig) -> list[tuple[str, dict]]:
    """The (name, config) of each predictor to run: the chosen one, or every suite member."""
    pred = OmegaConf.to_container(cfg.predictor, resolve=True)
    if "suite" not in pred:
        return [(pred.get("name") or pred["_target_"].rsplit(".", 1)[-1], pred)]
    from hydra import compose

    out = []
    overrides = []
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        overrides = [o for o in hc.overrides.task if not o.lstrip("+~").startswith("predictor")]
        # a user's predictor folders (hydra.searchpath=[...]) must be visible to the members too
        overrides += [o for o in hc.overrides.hydra
                      if o.lstrip("+~").startswith("hydra.searchpath")]
    for name in pred["suite"]:
        member = compose(config_name="config", overrides=[*overrides, f"predictor={name}"])
        # Resolve the member's interpolations (${generation.max_new_tokens}, ${progress}) against
        # this run's config, not the recomposed one: outside the Hydra app (compose + run() in a
        # notebook or test) there are no recorded overrides to recompose with.
        full = copy.deepcopy(cfg)
        with open_dict(full):
            full.predictor = member.predictor
        member_cfg = OmegaConf.to_container(full.predictor, resolve=True)
        # a preset in a subfolder (cpu/outlets) reports under its own name (outlets)
        out.append((member_cfg.get("name") or name, member_cfg))
    return out


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain values; a required value left unset is a `ConfigError`, not a trace."""
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as exc:
        raise ConfigError([(f"{exc.full_key}: required, but not set (add {exc.full_key}=... to "
                           "the command)")]) from None
    except OmegaConfBaseException as exc:
        where = getattr(exc, "full_key", "") or "config"
        raise ConfigError([f"{where}: {exc.msg if hasattr(exc, 'msg') else exc}"]) from None


def check_predictor_args(members: list[tuple[str, dict]], container: dict[str, Any]) -> None:
    """Every predictor's arguments against its class's signature, before any stage runs."""
    problems = suite_problems(container["predictor"]) + [
        f"{name}: {line}" if len(members) > 1 else line
        for name, pcfg in members for line in predictor_arg_problems(pcfg)]
    if problems:
        raise ConfigError(problems)


def check_run_config(cfg: DictConfig) -> tuple[dict[str, Any], list[tuple[str, dict]]]:
    """What `run` checks before any work, reading only the config: the values resolved, every
    field validated, every predictor's arguments against its class. Returns the resolved config
    and the (name, config) of each predictor to run; raises `ConfigError` naming each problem."""
    unknown = unknown_key_problems(cfg)
    if unknown:
        raise ConfigError(unknown)
    container = resolved_config(cfg)
    check_config(container)
    worker = cfg.generation.worker is not None  # a shard worker only generates (pipeline.py)
    members = [] if worker else _predictor_configs(cfg)
    check_predictor_args(members, container)
    return container, members


def build_predictors(members: list[tuple[str, dict]]) -> list[tuple[str, dict, Any]]:
    """Each predictor built from its config, before any stage: a constructor that refuses its
    arguments (a ValueError on `k=0`) stops the run here, one line per predictor, instead of
    after the labels and features are built."""
    built, problems, first = [], [], None
    for name, pcfg in members:
        try:
            built.append((name, pcfg, instantiate_predictor(pcfg)))
        except Exception as exc:  # noqa: BLE001 - whatever the constructor raised is the user's
            problems.append(f"predictor {name} could not be built: {type(exc).__name__}: "
                            f"{_first_line(exc)}")
            first = first or exc
    if problems:
        raise ConfigError(problems) from first
    return built


def _first_line(message: object, limit: int = 200) -> str:
    text = (str(message).strip().splitlines() or [""])[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def failure_summary(written: list[dict[str, Any]]) -> str | None:
    """One line naming each predictor that failed and why (None when none did)."""
    failed = [r for r in written if r.get("status") == "failed"]
    if not failed:
        return None
    what = "; ".join(f"{r['predictor']['name']} ({r['error']['type']}: "
                     f"{_first_line(r['error']['message'], 120)})" for r in failed)
    return (f"{len(failed)} of {len(written)} results failed: {what}. The other results and the "
            "leaderboard were written; each failed result file holds its traceback "
            "(eval.raise_on_error=true stops at the first failure)")


def typed_config(container: dict[str, Any]) -> RunConfig:
    """The resolved config as typed objects, once per run: what every stage below reads."""
    try:
        return RunConfig.from_composed(container)
    except ValueError as exc:  # a value no schema takes, e.g. a transfer set with no preset
        raise ConfigError([str(exc)]) from None


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    """Run the pipeline for the configured predictor(s); return the result dicts written.
    Where the time went is logged at the end, stage by stage, and kept in the run's output
    folder (stage_times.json) when Hydra runs it."""
    with recording() as clock:
        try:
            return _run(cfg)
        finally:
            if clock.stages:  # a refused config times nothing, and says so itself
                _report_stage_times(clock)


def _report_stage_times(clock: StageClock) -> None:
    """Log the run's stage times and keep them in Hydra's run folder; a failure to do so
    (a full disk) costs the record, never the run's results or its own error message."""
    from lenbench.results.provenance import environment_info

    try:
        log.info("%s:\n%s", clock.heading(), clock.table())
        if HydraConfig.initialized():
            hc = HydraConfig.get()
            folder = Path(hc.runtime.output_dir)
            if folder.is_dir():
                clock.write(folder, overrides=list(hc.overrides.task),
                            environment=environment_info())
    except Exception as exc:  # noqa: BLE001 - a timing record is never worth a run
        log.warning("stage times not kept: %s", exc)


def _run(cfg: DictConfig) -> list[dict[str, Any]]:
    import numpy as np

    from lenbench.contract.views import SplitView
    from lenbench.evaluate import evaluate_predictor, failed_result, noise_floor_result, save
    from lenbench.models.loading import resolve_device
    from lenbench.pipeline import label_import_cap, prepare_world
    from lenbench.runtime.fork_pool import JobDied, usable_cores
    from lenbench.runtime.predictor_jobs import evaluated, predictor_jobs
    from lenbench.runtime.process import configure_threads
    from lenbench.scoring.audit_plan import new_audit_seed
    from lenbench.sim import warmup as sim_warmup
    from lenbench.transfer import (
        attach_transfer,
        check_transfer,
        prepare_transfer,
        transfer_noise_floor,
        transfer_run_config,
        transfer_size_note,
    )

    container, members = check_run_config(cfg)
    built = build_predictors(members)  # constructors refuse bad arguments before any stage
    worker = cfg.generation.worker is not None  # a shard worker only generates (pipeline.py)
    config = typed_config(container)
    cap = label_import_cap(config)
    if cap is not None:  # an imported trace: predictors clip to its cap, not to a default
        cfg = copy.deepcopy(cfg)
        with open_dict(cfg):
            cfg.generation.max_new_tokens = cap
        config = typed_config(resolved_config(cfg))
        members = [] if worker else _predictor_configs(cfg)  # ${generation.max_new_tokens}
        built = build_predictors(members)
        log.info("label import: predictors clip lengths to %d (generation.max_new_tokens "
                 "takes the trace's cap)", cap)
    check_transfer(config, cap)  # a second prompt set (dataset@transfer=...), if any
    if (note := transfer_size_note(config)) is not None and not worker:
        log.info(note)
    configure_threads(config.threads)
    progress = bool(config.progress)
    settle()  # started up: what the imports and the config made stays to the end
    if worker:
        with timed("world"):
            prepare_world(config, need_features=False, progress=progress, generate_only=True)
        if config.transfer is not None:  # the transfer set's shards too
            with timed("transfer set"):
                prepare_world(transfer_run_config(config), need_features=False,
                              progress=progress, generate_only=True)
        return []
    need_features = any(p.needs.features for _, _, p in built)
    needs = [p.needs for _, _, p in built]
    jobs = predictor_jobs(config.jobs, config.threads, resolve_device(config.device),
                          bool(config.eval.raise_on_error), built)
    head_start: list = []  # the reference simulations, begun once the labels exist

    def simulate_references_early(labels) -> None:
        settle()  # the labels stay to the end; the fork below inherits them settled
        if config.sim.enabled and usable_cores() >= 2:
            rows = np.flatnonzero(labels["split"].to_numpy() == "test")
            test = SplitView("test", labels, rows)
            head_start.append(sim_warmup.start(
                test.lengths, test.prompt_lengths,
                labels["censored"].to_numpy(dtype=bool)[rows], config.sim.simulation()))

    with timed("world"):
        world = prepare_world(config, need_features=need_features, progress=progress,
                              needs=needs, on_labels=simulate_references_early)
    tworld = None
    if config.transfer is not None:
        with timed("transfer set"):
            tworld = prepare_transfer(config, world, need_features=need_features,
                                      progress=progress, needs=needs)
    for warm in filter(None, head_start):
        with timed("reference simulations"):
            warm.finish()
    settle()  # the world and the reference figures stay to the end; the predictors fork now
    results_dir = config.paths.results_dir
    written = []
    seed = int(config.seed)
    # one audit stream for the run: its predictors are audited on the same changed rows, so one
    # that shares work across predictors (OUTLETS's prediction cache) does its audit's once too
    audit_seed = new_audit_seed()

    def evaluate_one(name: str, pcfg: dict, predictor) -> tuple[dict, BaseException | None]:
        run_cfg = replace(config, predictor=pcfg)  # the result records its own predictor
        try:
            with timed(name):
                result = evaluate_predictor(predictor, name, pcfg, world, run_cfg, seed,
                                            audit_seed)
                if tworld is not None:
                    with timed("transfer"):
                        attach_transfer(result, predictor, name, world, tworld, run_cfg, seed,
                                        raise_on_error=bool(config.eval.raise_on_error))
            return result, None
        except Exception as exc:  # recorded, and re-raised only on request
            log.exception("predictor %s failed", name)
            return failed_result(world, name, pcfg, run_cfg, seed, exc), exc

    if jobs > 1:
        log.info("evaluating %d predictors, %d at a time", len(built), jobs)
    for (name, pcfg, _), (result, exc) in zip(built, evaluated(built, evaluate_one, jobs)):
        if isinstance(exc, JobDied):
            result = failed_result(world, name, pcfg, replace(config, predictor=pcfg), seed, exc)
        path = save(result, results_dir)
        log.info("wrote %s%s", path, "" if exc is None else " (the failure and its traceback)")
        written.append(result)
        if exc is not None and config.eval.raise_on_error:
            raise exc
    if config.eval.noise_floor:
        floor_cfg = replace(config, predictor={"name": "noise_floor"})
        with timed("noise_floor"):
            ref = noise_floor_result(world, floor_cfg, seed)
            if ref is not None and tworld is not None:
                ref["transfer"] = transfer_noise_floor(world, tworld, floor_cfg)
        if ref is not None:
            save(ref, results_dir)
            written.append(ref)
    _summary(written)
    return written


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _floor_text(bounds: dict[str, Any] | None) -> tuple[str, list | None] | None:
    """The noise floor as the leaderboard shows it: its one estimate where the world has dense
    prompts, else the range from its optimistic to its pessimistic bound; with its interval."""
    if not bounds:
        return None
    estimate = bounds.get("extrapolated") or {}
    if estimate.get("estimate") is not None:
        return _fmt(estimate["estimate"]), estimate.get("ci")
    if bounds.get("in_sample") is None:
        return None
    return (f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}",
            bounds.get("interval"))


def _summary(written: list[dict[str, Any]]) -> None:
    from lenbench.results import Result

    results = [Result.from_mapping(r) for r in written]
    table = Table(title="lenbench results (test split)")
    for col in ("predictor", "status", "static MAE", "95% CI", "C-index", "dynamic MAE",
                "fit s"):
        table.add_column(col)
    # the static MAE on the transfer set (dataset@transfer=...), when the run scored one
    away = [(r.transfer.metrics.static if r.transfer and r.transfer.metrics else None) or {}
            for r in results]
    if any(away):
        table.add_column("transfer MAE")
    for r, a in zip(results, away):
        st, dy = r.metrics.static or {}, r.metrics.dynamic or {}
        mae, ci = _fmt(st.get("mae")), st.get("mae_ci")
        if (floor := _floor_text(r.metrics.noise_floor)) is not None:
            mae, ci = floor
        table.add_row(r.predictor.name, r.status, mae,
                      "—" if not ci else f"[{ci[0]:.1f}, {ci[1]:.1f}]",
                      _fmt(st.get("c_index"), 2), _fmt(dy.get("mae")),
                      _fmt(r.timings.fit_s, 2), *([_fmt(a.get("mae"))] if any(away) else []))
    Console(stderr=True).print(table)


def rebuild_leaderboard(results_dir: str, leaderboard_dir: str) -> None:
    from lenbench.leaderboard import build_leaderboard

    path = build_leaderboard(results_dir, leaderboard_dir)
    log.info("leaderboard: %s", path)
    print(f"leaderboard written to {path}", file=sys.stderr)


class LeaderboardCallback(Callback):
    """Rebuild the leaderboard once when a multirun ends (jobs skip it to avoid races), then
    exit with status 1 naming the predictors that failed in any job."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        rebuild_leaderboard(config.paths.results_dir, config.paths.leaderboard_dir)
        found = sorted(Path(str(config.hydra.sweep.dir)).glob(f"*/{FAILURES_FILE}"))
        lines = [line for path in found for line in path.read_text().splitlines() if line]
        if lines:
            for line in lines:
                print(f"lenbench: job {line}", file=sys.stderr)
            sys.exit(1)


def _report_failures(cfg: DictConfig, written: list[dict[str, Any]]) -> None:
    """A run whose predictors failed exits with status 1 after writing everything else; a sweep
    job leaves its line beside its log for the sweep's end to report."""
    summary = failure_summary(written)
    if summary is None:
        return
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        (Path(hc.runtime.output_dir) / FAILURES_FILE).write_text(f"{hc.job.num}: {summary}\n")
        return
    print(f"lenbench: {summary}", file=sys.stderr)
    sys.exit(1)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _app(cfg: DictConfig) -> None:
    try:
        written = run(cfg)
    except USER_ERRORS as exc:
        if cfg.debug:
            raise
        problems = getattr(exc, "problems", None) or [str(exc)]
        for line in problems:
            print(f"lenbench: {line}", file=sys.stderr)
        print("lenbench: stopped before any model work (debug=true shows the traceback)",
              file=sys.stderr)
        sys.exit(2)
    except SETUP_ERRORS as exc:
        if cfg.debug:
            raise
        print(f"lenbench: {exc} (debug=true shows the traceback)", file=sys.stderr)
        sys.exit(2)
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        release()  # the sweep's next job runs in this process: what this one held may go
    elif cfg.generation.worker is None:
        rebuild_leaderboard(cfg.paths.results_dir, cfg.paths.leaderboard_dir)
    _report_failures(cfg, written)


def open_group_overrides(args: list[str]) -> list[str]:
    """`group.key=value` for the groups of `OPEN_GROUPS` as `++group.key=value`: set whether or
    not the preset lists the key; an unknown one is then refused by `check_run_config`."""
    return [f"++{a}" if _GROUP_KEY.match(a) else a for a in args]


def composition_lines(exc: Exception) -> list[str]:
    """Hydra's refusal of a command line as lenbench's lines: the field and what is wrong with
    it, without Hydra's advice to append an unknown key or the `++` lenbench added."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    from lenbench.configs.run import LenbenchConfig
    from lenbench.validate import unknown_key_line

    cause, key = exc.__cause__, getattr(exc.__cause__, "full_key", None)
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and key:
        where = key.rpartition(".")[0]
        known = list(LenbenchConfig.__dataclass_fields__) if not where else None
        hint = " (a transfer set is chosen first: dataset@transfer=PRESET)" \
            if where == "transfer" else ""
        return [unknown_key_line(key, where, known) + hint]
    if isinstance(cause, OmegaConfBaseException) and key:
        return [f"{key}: {str(cause.msg).splitlines()[0]}"]
    return [str(exc).replace("override ++", "override ").strip()]


def main() -> None:
    hold()  # imports and composing make objects that live to the end, not garbage
    sys.argv[1:] = open_group_overrides(sys.argv[1:])
    from hydra.errors import ConfigCompositionException, OverrideParseException

    hydra_traces = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors reach this function, to word them
    try:
        _app()
        settle()  # leave without a last walk over everything the run held
    except (ConfigCompositionException, OverrideParseException) as exc:
        if hydra_traces:
            raise
        for line in composition_lines(exc):
            print(line if "\n" in line else f"lenbench: {line}", file=sys.stderr)
        print("lenbench: stopped before any model work (HYDRA_FULL_ERROR=1 shows the "
              "traceback)", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
