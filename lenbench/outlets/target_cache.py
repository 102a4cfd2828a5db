"""The target cache: the frozen target's per-token training inputs, computed once.

Split from `train` so training reads the cache without the cache depending on training. The
target runs once over the training sequences (as training batches them), its fused features and
drafting teacher go to memory-mapped .npy files (16-bit, about 6H + 2 V_d bytes per token), and
every epoch reads them back a batch at a time, so an epoch costs only the draft.
`open_target_cache` applies `train.target_cache` (on / off / auto: on when the estimated size is
within `target_cache_max_bytes`). Where the harness names its cache folder and the target's key
(`CacheHome`), the cache is a stage there, `cache_dir/outlets_target/<key>/`, keyed by exactly
what its bytes depend on (`cache_config`), so every variant and seed trained on the same rows
reuses one build; otherwise it lives in a temporary folder for one fit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lenbench.contract.features import role_layers
from lenbench.outlets.batches import (
    Batch,
    Sequence,
    TrainConfig,
    autocast,
    collate,
    make_batches,
    target_forward,
)
from lenbench.outlets.losses import Teacher, make_teacher
from lenbench.runtime.progress import ProgressLog
from lenbench.stages import Stage

log = logging.getLogger(__name__)
FREE_MARGIN = 2_000_000_000  # bytes a cache's build leaves free on its disk
STAGE = "outlets_target"
CACHE_FORMAT = 1  # raised when the files' layout changes, so older caches are rebuilt
META_FILE = "cache.json"


def storage_dtype(target_model) -> torch.dtype:
    """bf16 features for a bf16 target (lossless), fp16 otherwise (3 more mantissa bits)."""
    dtype = next(target_model.parameters()).dtype
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16


def cache_bytes(seqs: list[Sequence], max_len: int, target_hidden: int, draft_vocab: int,
                teacher: bool) -> int:
    """Size of a TargetCache: per token 3H 16-bit features, and with the teacher V_d fp16
    probabilities, the in-draft flag and the target's argmax (int32)."""
    tokens = sum(min(len(s.ids), max_len) for s in seqs)
    return tokens * (3 * target_hidden * 2 + ((2 * draft_vocab + 1 + 4) if teacher else 0))


def row_layout(seqs: list[Sequence], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """First cache row and row count of each sequence (its tokens up to max_len)."""
    lengths = np.array([min(len(s.ids), max_len) for s in seqs], dtype=np.int64)
    return np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64), lengths


def store_rows(arrays: dict[str, np.ndarray], rows: dict[str, np.ndarray], index: list[int],
               starts: np.ndarray, lengths: np.ndarray) -> None:
    """A batch's rows ([B, T, ...] per array) into each of its sequences' span of the cache
    arrays (`row_layout`)."""
    for b, i in enumerate(index):
        span = slice(starts[i], starts[i] + lengths[i])
        for k, v in rows.items():
            arrays[k][span] = v[b, : lengths[i]]


def write_meta(folder: Path, dtype: torch.dtype, teacher: bool, tokens: int,
               started: float) -> dict:
    """The description `TargetCache.open` reads, written beside the arrays once they are
    complete; `started` is the build's perf_counter start."""
    meta = {"dtype": str(dtype).removeprefix("torch."), "teacher": teacher, "tokens": tokens,
            "build_seconds": round(time.perf_counter() - started, 3)}
    (folder / META_FILE).write_text(json.dumps(meta, indent=2))
    return meta


@dataclass(frozen=True)
class CacheHome:
    """Where shared target caches live: the harness's cache folder and its key for the target's
    weights. Without one (a target the harness did not load) a cache lasts one fit."""

    cache_dir: Path
    target_key: str

    @classmethod
    def of(cls, target) -> CacheHome | None:
        """From a predictor's target handle (`TargetModel`); None when it names no cache."""
        cache_dir, key = getattr(target, "cache_dir", None), getattr(target, "key", None)
        return cls(Path(cache_dir), str(key)) if cache_dir and key else None


def rows_fingerprint(seqs: list[Sequence], max_len: int) -> str:
    """A hash of the token ids the cache holds, in order: each sequence up to max_len."""
    digest = hashlib.sha256()
    for s in seqs:
        ids = np.asarray(s.ids[:max_len], dtype=np.int64)
        digest.update(np.int64(len(ids)).tobytes() + ids.tobytes())
    return digest.hexdigest()[:16]


def cache_config(target_model, home: CacheHome, seqs: list[Sequence], cfg: TrainConfig,
                 t2d: torch.Tensor | None) -> dict:
    """Everything a cache's bytes depend on, and nothing else: the target (weights, dtype,
    device, fused layers), the rows, how they are batched and cast, and with the teacher
    (t2d given) the draft vocabulary. Learning rate, steps, K, the variant and the seed do
    not change a byte, so they are not here."""
    param = next(target_model.parameters())
    layers = role_layers(target_model.config.num_hidden_layers)
    vocab = None
    if t2d is not None:
        ids = torch.nonzero(t2d.cpu()).flatten().numpy().astype(np.int64)
        vocab = hashlib.sha256(ids.tobytes()).hexdigest()[:16]
    return {"format": CACHE_FORMAT, "target": home.target_key,
            "dtype": str(param.dtype).removeprefix("torch."), "device": param.device.type,
            "fused_layers": [layers[r] for r in ("low", "mid", "high")],
            "rows": rows_fingerprint(seqs, cfg.max_len), "n_rows": len(seqs),
            "max_len": cfg.max_len, "batch_tokens": cfg.batch_tokens, "amp": cfg.amp,
            "teacher_vocab": vocab}


class TargetCache:
    """The frozen target's per-token training inputs, computed once and read back per batch.

    Rows of every sequence (truncated to max_len) lie back to back in .npy memory maps:
    `fused` [N, 3H] (16-bit), and with the teacher `p` [N, V_d] (fp16), `in_draft` [N] and
    `top` [N]. Only one batch's rows are ever in memory at a time. The folder is temporary
    (removed by `close`) or a shared stage (kept; `key` names it).
    """

    def __init__(self, path: Path, seqs: list[Sequence], max_len: int, dtype: torch.dtype,
                 teacher: bool, build_seconds: float,
                 temporary: tempfile.TemporaryDirectory | None = None,
                 key: str | None = None, reused: bool = False):
        self.path, self._temporary, self.max_len, self.dtype = Path(path), temporary, max_len, dtype
        self.starts, self.lengths = row_layout(seqs, max_len)
        self.has_teacher, self.build_seconds = teacher, build_seconds
        self.key, self.reused = key, reused
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        self.arrays = {k: np.load(self.path / f"{k}.npy", mmap_mode="r") for k in names}
        if any(len(a) != int(self.lengths.sum()) for a in self.arrays.values()):
            raise ValueError(f"the target cache in {self.path} does not hold these rows; "
                             "delete the folder to rebuild it")

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.glob("*.npy"))

    @classmethod
    def build(cls, target_model, seqs: list[Sequence], max_len: int, t2d: torch.Tensor,
              teacher: bool, batch_tokens: int, amp: str = "auto") -> TargetCache:
        """Run the target once over seqs into a temporary folder (removed by `close`)."""
        folder = tempfile.TemporaryDirectory(prefix="outlets-target-cache-")
        meta = cls.write(Path(folder.name), target_model, seqs, max_len, t2d, teacher,
                         batch_tokens, amp)
        return cls(Path(folder.name), seqs, max_len, storage_dtype(target_model), teacher,
                   meta["build_seconds"], temporary=folder)

    @classmethod
    def open(cls, stage: Stage, seqs: list[Sequence], max_len: int, reused: bool) -> TargetCache:
        """A shared cache written by `write` into a stage folder."""
        meta = json.loads((stage.path / META_FILE).read_text())
        return cls(stage.path, seqs, max_len, getattr(torch, meta["dtype"]), meta["teacher"],
                   meta["build_seconds"], key=stage.key, reused=reused)

    @staticmethod
    @torch.no_grad()
    def write(folder: Path, target_model, seqs: list[Sequence], max_len: int, t2d: torch.Tensor,
              teacher: bool, batch_tokens: int, amp: str = "auto") -> dict:
        """Run the target once over seqs (as training batches them) and write the arrays and
        their description into folder."""
        started = time.perf_counter()
        device = next(target_model.parameters()).device
        dtype = storage_dtype(target_model)
        starts, lengths = row_layout(seqs, max_len)
        n = int(lengths.sum())

        def create(name, dt, *shape):
            return np.lib.format.open_memmap(folder / f"{name}.npy", mode="w+", dtype=dt,
                                             shape=(n, *shape))

        out = {"fused": create("fused", np.int16, 3 * target_model.config.hidden_size)}
        if teacher:
            out |= {"p": create("p", np.float16, int(t2d.sum())),
                    "in_draft": create("in_draft", np.bool_),
                    "top": create("top", np.int32)}
        plain = ProgressLog(log, "outlets target cache", len(seqs), unit="rows", total_tokens=n)
        for index in make_batches(seqs, batch_tokens, max_len):
            batch = collate(seqs, index, max_len, device)
            with autocast(device, amp):
                fused, logits = target_forward(target_model, batch, with_head=teacher)
            stored = fused.to(dtype)
            if not torch.isfinite(stored).all():
                raise FloatingPointError(
                    f"target features overflow {dtype} in the target cache; "
                    "set outlets train.target_cache=off")
            rows = {"fused": stored.view(torch.int16)}
            if teacher:
                t = make_teacher(logits, t2d)
                rows |= {"p": t.p.half(), "in_draft": t.in_draft, "top": t.top.int()}
            del logits
            store_rows(out, {k: v.cpu().numpy() for k, v in rows.items()}, index, starts, lengths)
            plain.advance(len(index), tokens=int(lengths[index].sum()))
        for array in out.values():
            array.flush()
        del out
        return write_meta(folder, dtype, teacher, n, started)

    def serves(self, n_seqs: int, max_len: int, teacher: bool) -> bool:
        """Whether this cache holds every row a run over n_seqs sequences at max_len reads."""
        return (n_seqs == len(self.lengths) and (self.has_teacher or not teacher)
                and (max_len <= self.max_len or self.lengths.max(initial=0) < self.max_len))

    def inputs(self, index: list[int], batch: Batch, teacher: bool
               ) -> tuple[torch.Tensor, Teacher | None]:
        """Fused features [B, T, 3H] (fp32) and the teacher for the sequences `index` as
        `batch` lays them out; padding is zero (no loss or real position reads it)."""
        rows, width = batch.ids.shape
        valid = batch.valid.sum(1).tolist()
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        bufs = {k: np.zeros((rows, width, *self.arrays[k].shape[1:]), self.arrays[k].dtype)
                for k in names}
        for b, (i, n) in enumerate(zip(index, valid)):
            if n > self.lengths[i]:
                raise ValueError(f"the target cache holds {self.lengths[i]} tokens of sequence "
                                 f"{i}, the batch needs {n}")
            for k in names:
                bufs[k][b, :n] = self.arrays[k][self.starts[i]: self.starts[i] + n]
        device = batch.ids.device
        fused = torch.from_numpy(bufs["fused"]).view(self.dtype).to(device).float()
        if not teacher:
            return fused, None
        return fused, Teacher(torch.from_numpy(bufs["p"]).to(device).float(),
                              torch.from_numpy(bufs["in_draft"]).to(device),
                              torch.from_numpy(bufs["top"]).to(device).long())

    def describe(self) -> dict:
        out = {"mode": "cached", "bytes": self.nbytes, "tokens": int(self.lengths.sum()),
               "dtype": str(self.dtype).removeprefix("torch."), "teacher": self.has_teacher,
               "build_seconds": round(self.build_seconds, 3)}
        if self.key is not None:  # a shared cache: which one, and whether this fit built it
            out |= {"key": self.key, "reused": self.reused}
        return out

    def close(self) -> None:
        """Release the arrays; a temporary cache's files go too (also when it is garbage
        collected), a shared one's stay for the next fit."""
        self.arrays = {}
        if self._temporary is not None:
            self._temporary.cleanup()


def disk_room(folder: Path, size: int) -> tuple[bool, int]:
    """Whether the disk under `folder` holds `size` more bytes with FREE_MARGIN to spare, and
    how many bytes are free there."""
    folder = Path(folder)
    while not folder.exists():  # the cache's own folder may not exist yet
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    return free >= size + FREE_MARGIN, free


def room_to_build(folder: Path, size: int, cache: str = "outlets target cache",
                  instead: str = "training online (the target runs on every batch)") -> bool:
    """disk_room, saying in the log what runs `instead` of building `cache` when there is none."""
    room, free = disk_room(folder, size)
    if not room:
        log.warning("%s: %.1f GB free, %.1f GB needed with %.0f GB to spare; %s", cache,
                    free / 1e9, size / 1e9, FREE_MARGIN / 1e9, instead)
    return room


def open_target_cache(target_model, seqs: list[Sequence], cfg: TrainConfig, t2d: torch.Tensor,
                      teacher: bool, home: CacheHome | None = None
                      ) -> tuple[TargetCache | None, dict]:
    """The cache when cfg.target_cache asks for one (None: train online), and a record of the
    decision for the report. With a `home` the cache is shared (`shared_cache`). `auto` also
    trains online when a cache still to build would not fit on its disk with FREE_MARGIN to
    spare."""
    estimate = cache_bytes(seqs, cfg.max_len, target_model.config.hidden_size, int(t2d.sum()),
                           teacher)
    record = {"setting": cfg.target_cache, "estimated_bytes": estimate,
              "max_bytes": cfg.target_cache_max_bytes}
    if cfg.target_cache == "off" or (cfg.target_cache == "auto"
                                     and estimate > cfg.target_cache_max_bytes):
        return None, record | {"mode": "online"}
    check_room = cfg.target_cache == "auto"
    if home is not None:
        cache = shared_cache(target_model, seqs, cfg, t2d, teacher, home, check_room)
    elif not check_room or room_to_build(Path(tempfile.gettempdir()), estimate):
        cache = TargetCache.build(target_model, seqs, cfg.max_len, t2d, teacher,
                                  cfg.batch_tokens, cfg.amp)
    else:
        cache = None
    if cache is None:
        return None, record | {"mode": "online", "reason": "disk space"}
    if cache.reused:
        log.info("outlets target cache: reused %s (%d tokens, %.1f MB, built earlier in %.1f s)",
                 cache.path, cache.lengths.sum(), cache.nbytes / 1e6, cache.build_seconds)
    else:
        log.info("outlets target cache: %d tokens, %.1f MB, built in %.1f s%s",
                 cache.lengths.sum(), cache.nbytes / 1e6, cache.build_seconds,
                 f" into {cache.path}" if cache.key else "")
    return cache, record | cache.describe()


def candidate_stages(target_model, seqs: list[Sequence], cfg: TrainConfig, t2d: torch.Tensor,
                     teacher: bool, home: CacheHome) -> list[Stage]:
    """The stages that serve a fit: with the teacher, and (a fit that needs none) without it."""
    def stage(with_teacher: bool) -> Stage:
        config = cache_config(target_model, home, seqs, cfg, t2d if with_teacher else None)
        return Stage(home.cache_dir, STAGE, config)

    return [stage(True)] if teacher else [stage(True), stage(False)]


def shared_cache(target_model, seqs: list[Sequence], cfg: TrainConfig, t2d: torch.Tensor,
                 teacher: bool, home: CacheHome, check_room: bool = False) -> TargetCache | None:
    """The cache stage for these rows under home, built once. A run without the drafting
    teacher also takes a cache that has it; when it builds, it stores the teacher too if that
    fits `target_cache_max_bytes` (and, with `check_room`, the disk), so the drafting variants
    reuse its build. None: with `check_room`, the stage to build does not fit on the disk."""
    found = candidate_stages(target_model, seqs, cfg, t2d, teacher, home)
    for candidate in found:
        if candidate.done:
            return TargetCache.open(candidate, seqs, cfg.max_len, reused=True)
    sizes = {w: cache_bytes(seqs, cfg.max_len, target_model.config.hidden_size, int(t2d.sum()),
                            w) for w in (True, False)}
    with_teacher = teacher or (sizes[True] <= cfg.target_cache_max_bytes and (
        not check_room or disk_room(found[0].path.parent, sizes[True])[0]))
    chosen = found[0] if with_teacher else found[-1]
    with chosen.lock():
        reused = chosen.done  # another process built it while this one waited
        if not reused:
            # under the lock nobody else writes here: a partial folder is a killed build's
            shutil.rmtree(chosen.partial, ignore_errors=True)
            if check_room and not room_to_build(chosen.path.parent, sizes[with_teacher]):
                return None
            with chosen.building() as folder:
                TargetCache.write(folder, target_model, seqs, cfg.max_len, t2d, with_teacher,
                                  cfg.batch_tokens, cfg.amp)
    return TargetCache.open(chosen, seqs, cfg.max_len, reused=reused)
