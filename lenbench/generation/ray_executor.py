"""The generate stage's shards as Ray tasks (`generation.executor=ray`).

A shard's tokens depend only on the model, the sampling settings, the seed, the prompt and the
sample index, so any process may generate any shard: task i of N runs the same job as
`generation.worker=i` of `generation.workers=N` would, into the same stage folder. Ray retries a
task whose process died or that raised (`generation.ray_max_retries`). A retry is safe because a
shard's table is written atomically and last (a retried task skips the shards already on disk),
and a sample-store part is named by the samples it holds (a retry that re-adds them rewrites the
same part). When every task is done this process merges the shards in shard order, as a
one-process run does.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lenbench.configs.generation import EXECUTORS
from lenbench.generation.runner import ShardsPending
from lenbench.generation.stage_job import GenerateJob

log = logging.getLogger(__name__)

INSTALL_HINT = "generation.executor=ray needs Ray: pip install lenbench[ray]"
# "<task index>:<marker file>": that task's first attempt dies (os._exit) right after its new
# samples reach the sample store, before its shard table is written; the marker file records the
# death, so the retry runs normally. The tests use it to show a retry loses and repeats nothing.
KILL_ENV = "LENBENCH_RAY_TEST_KILL"


class RaySetupError(RuntimeError):
    """Ray is missing, or no cluster could be started or joined: one line for the user."""


def check_executor(executor: str, worker: int | None) -> None:
    if executor not in EXECUTORS:
        raise ValueError(f"generation.executor={executor!r} is unknown; use one of "
                         f"{list(EXECUTORS)}")
    if executor == "ray" and worker is not None:
        raise ValueError("generation.executor=ray hands out the shards itself: leave "
                         f"generation.worker null (it is {worker})")


def import_ray():
    try:
        import ray
    except ImportError:
        raise RaySetupError(INSTALL_HINT) from None
    return ray


def _bad_address(address: str, why: str) -> RaySetupError:
    return RaySetupError(
        f"generation.ray_address={address!r}: no Ray cluster there ({why}). Give the address "
        "of a running cluster (`ray start --head` prints it: host:6379, or ray://host:10001 "
        "for Ray Client), or leave generation.ray_address null to start a local one")


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a host:port nobody listens on (ray.init would retry it for minutes)."""
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise _bad_address(address, "expected host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise _bad_address(address, f"cannot connect: {exc}") from None


def connect(address: str | None) -> bool:
    """Join the cluster at `address`, or start a local one (null); True if this call started
    or joined it (and so shuts it down after), False if Ray was already initialised."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address:
        _check_reachable(address)
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        if address:
            raise _bad_address(address, str(exc).strip().splitlines()[0]) from exc
        raise RaySetupError(f"a local Ray cluster could not start: {exc}") from exc
    return True


def _die_mid_shard_once(task: int, spec: str | None):
    """The test hook of KILL_ENV (read by the driver, handed to each task); returns an undo,
    or None where it does not apply."""
    if not spec:
        return None
    index, marker = spec.split(":", 1)
    if int(index) != task or os.path.exists(marker):
        return None
    from lenbench.worlds.sample_store import SampleStore

    add = SampleStore.add

    def add_then_die(self, rows):
        add(self, rows)
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)

    SampleStore.add = add_then_die
    return lambda: setattr(SampleStore, "add", add)


def _run_task(job: GenerateJob, out_dir: str, task: int, n_tasks: int,
              kill: str | None = None) -> int:
    """Task `task` of `n_tasks`: its shards written to `out_dir`; returns its process id."""
    undo = _die_mid_shard_once(task, kill)
    try:
        job(Path(out_dir), task, n_tasks)
    except ShardsPending:  # other tasks' shards still running: the driver merges
        pass
    finally:
        if undo is not None:
            undo()
    return os.getpid()


def run_on_ray(job: GenerateJob, out_dir: Path, workers: int = 1) -> tuple:
    """Generate every shard as Ray tasks, then merge here; returns (labels, card) as the local
    runner does. One task per shard, or with `generation.workers=N` > 1, N tasks that take the
    shards k with k % N == i (each loads the target once)."""
    ray = import_ray()
    gen = job.gen
    n_tasks = workers if workers > 1 else max(1, math.ceil(len(job.prompts) / gen.shard_prompts))
    owned = connect(gen.ray_address)
    out_dir = out_dir.resolve()  # the tasks' working directory is not this one
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        remote = ray.remote(_run_task).options(
            max_retries=int(gen.ray_max_retries), retry_exceptions=True, num_cpus=1,
            num_gpus=float(gen.ray_num_gpus or 0))
        job_ref = ray.put(job.picklable())
        kill = os.environ.get(KILL_ENV)
        pending = [remote.remote(job_ref, str(out_dir), i, n_tasks, kill) for i in range(n_tasks)]
        log.info("generate on Ray: %d tasks (%s)", n_tasks,
                 gen.ray_address or "local cluster")
        pids = _wait(ray, pending, out_dir, job.progress)
    finally:
        if owned:
            ray.shutdown()
    seconds = time.perf_counter() - started
    if not any(out_dir.glob("shard-*.parquet")):
        raise RaySetupError(f"the Ray tasks finished but no shard is in {out_dir}: on a cluster, "
                            "paths.cache_dir (LENBENCH_CACHE_DIR) must be a folder every node "
                            "sees at the same path")
    labels, card = job(out_dir, 0, 1)  # every shard on disk: a merge, nothing generated
    card.update({"executor": "ray", "ray_tasks": n_tasks, "ray_processes": len(set(pids)),
                 "seconds_on_ray": seconds})
    return labels, card


def _wait(ray, pending: list, out_dir: Path, progress: bool) -> list[int]:
    """Wait for every task, with a bar and a log line as tasks finish."""
    pids, n = [], len(pending)
    columns = (TextColumn("[bold]generate on Ray"), BarColumn(), MofNCompleteColumn(),
               TextColumn("tasks"), TimeElapsedColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("ray", total=n)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=2.0)
            for ref in done:
                try:
                    pids.append(ray.get(ref))  # a task that failed past its retries raises
                except Exception:
                    for other in pending:  # on a joined cluster they would run on
                        ray.cancel(other, force=True)
                    raise
                bar.advance(task)
                log.info("generate on Ray: %d of %d tasks done, %d shards on disk", len(pids),
                         n, len(list(out_dir.glob("shard-*.parquet"))))
    return pids
