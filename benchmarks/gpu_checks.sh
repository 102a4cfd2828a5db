#!/usr/bin/env bash
# GPU checks for lenbench, one script, a few minutes, a compact report at the end.
#
# Steps (each under its own `timeout`; a failing or skipped step does not stop the others, the
# script exits non-zero at the end if any step failed):
#   0. env       python / package versions, nvidia-smi -L, torch.cuda visibility
#   1. overhead  benchmarks/outlets_overhead.py --device cuda --dtype bfloat16 --json $OUT/overhead.json
#   2. features  benchmarks/features_throughput.py --device cuda --json $OUT/features.json
#                (random Llama-3.1-8B shape in bf16: plain forward vs extract_features, tok/s)
#   3. pytest    python -m pytest -q tests/test_outlets.py (CPU tensors; a check that torch and
#                transformers of the device machine run the OUTLETS code)
#   4. ray       (only when asked: STEPS=...,ray) python -m pytest -q tests/test_generation_ray.py:
#                the generate stage's shards as Ray tasks on a local 2-CPU cluster, the same
#                labels as the local runner, a killed task retried (toy model, CPU; ~1.5 min on
#                a busy 2-core CPU)
# Logs: $OUT/<step>.log, summary: $OUT/summary.txt (also printed).
#
# Launching with the device `run` tool (the device has no internet, so do NOT `pip install -e .`:
# even with --no-deps, pip's isolated build wants to download setuptools). The repository root is
# put on PYTHONPATH instead, so `lenbench` imports from the working tree without installing. The
# local .venv is not carried (it is git-ignored and built for another Python). Command:
#
#     bash benchmarks/gpu_checks.sh            (run tool: timeout_s=600; device sets $OUT)
#
# Expected cost (a guess, nothing measured on a GPU yet): a few minutes in all. Per-step limits
# (60+150+210+120 s) keep the whole script under 9 min. Rerun chosen steps with e.g.
# STEPS=features bash benchmarks/gpu_checks.sh (comma list of env,overhead,features,pytest,ray;
# ray is not in the default list, which stays under 9 min without it).
#
# Third-party imports needed (all checked before each step; a step whose imports are missing is
# skipped with a message):
#   overhead: torch                              (lenbench.outlets.modeling / .overhead)
#   features: torch, transformers, numpy, pandas, rich   (lenbench.features.extract)
#   pytest:   pytest, torch, transformers, numpy, pandas, rich, omegaconf (tests/conftest.py)
#   ray:      ray, pytest, torch, transformers, pandas, pyarrow, hydra (the toy world's pipeline)
# pyarrow, hydra, datasets, scipy, sklearn are NOT needed by these steps. The ones most likely
# missing on a bare device image: rich, omegaconf, pytest (pandas/numpy usually come along).
#
# Local CPU test (same steps, tiny sizes, OUT defaults to /tmp/gpu_checks_out):
#     nice -n 19 bash benchmarks/gpu_checks.sh --tiny        (--cpu is a synonym)
set -euo pipefail

TINY=0
for arg in "$@"; do
  case "$arg" in
    --tiny|--cpu) TINY=1 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "gpu_checks.sh: unknown argument $arg (use --tiny/--cpu)" >&2; exit 2 ;;
  esac
done

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
OUT="${OUT:-/tmp/gpu_checks_out}"
mkdir -p "$OUT"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1
if [[ -z "${PYTHON:-}" ]]; then
  if [[ $TINY == 1 && -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"
  elif command -v python >/dev/null 2>&1; then PYTHON=python
  else PYTHON=python3; fi
fi
STEPS="${STEPS:-env,overhead,features,pytest}"

if [[ $TINY == 1 ]]; then
  DEV=cpu
  OVERHEAD_ARGS=(--device cpu --dtype float32 --shapes llama-3.2-1b --batches 1 --context 32 --reps 2)
  FEATURES_ARGS=(--tiny --device cpu)
  T_OVERHEAD=120; T_FEATURES=60; T_PYTEST=120
else
  DEV=cuda
  OVERHEAD_ARGS=(--device cuda --dtype bfloat16)
  FEATURES_ARGS=(--device cuda)
  T_OVERHEAD=150; T_FEATURES=210; T_PYTEST=120
fi

declare -a SUMMARY=()
FAILED=0
note() { SUMMARY+=("$(printf '%-9s %s' "$1" "$2")"); }

missing_mods() {  # prints the modules among "$@" that do not import
  "$PYTHON" - "$@" <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
EOF
}

step() {  # step NAME TIMEOUT "mod1 mod2 ..." cmd...
  local name=$1 limit=$2 mods=$3; shift 3
  if [[ ",$STEPS," != *",$name,"* ]]; then return 0; fi
  local miss
  miss=$(missing_mods $mods) || miss="(python failed)"
  if [[ -n "$miss" ]]; then
    echo "== $name: SKIPPED, missing python modules: $miss" | tee "$OUT/$name.log"
    note "$name" "SKIPPED (missing: $miss)"
    return 0
  fi
  echo "== $name (limit ${limit}s): $*"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
  local dt=$((SECONDS - t0))
  if [[ $rc == 0 ]]; then
    note "$name" "ok (${dt}s)"
  elif [[ $rc == 124 || $rc == 137 ]]; then
    note "$name" "TIMEOUT after ${dt}s (limit ${limit}s), see $OUT/$name.log"; FAILED=1
  else
    note "$name" "FAILED rc=$rc (${dt}s), see $OUT/$name.log"; FAILED=1
  fi
}

env_report() {
  local rc=0
  "$PYTHON" - "$DEV" <<'EOF' || rc=$?
import importlib, importlib.metadata, platform, sys
print(f"python {platform.python_version()} ({sys.executable})")
for m in ("torch", "transformers", "numpy", "pandas", "rich", "omegaconf", "pytest", "pyarrow"):
    try:
        mod = importlib.import_module(m)
        try:
            ver = importlib.metadata.version(m)
        except Exception:  # noqa: BLE001
            ver = getattr(mod, "__version__", "?")
        print(f"  {m:12s} {ver}")
    except Exception as e:  # noqa: BLE001
        print(f"  {m:12s} MISSING ({type(e).__name__}: {e})")
try:
    import torch
    print(f"  cuda available: {torch.cuda.is_available()}, torch cuda {torch.version.cuda}, "
          f"devices {torch.cuda.device_count()}"
          + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    if sys.argv[1] == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA not visible to torch")
except ImportError:
    pass
EOF
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L || true; fi
  return $rc
}

echo "gpu_checks: OUT=$OUT PYTHON=$PYTHON mode=$([[ $TINY == 1 ]] && echo tiny-cpu || echo cuda)"
export PYTHON DEV
export -f env_report
step env 60 "" bash -c env_report
step overhead "$T_OVERHEAD" "torch" \
  "$PYTHON" benchmarks/outlets_overhead.py "${OVERHEAD_ARGS[@]}" --json "$OUT/overhead.json"
step features "$T_FEATURES" "torch transformers numpy pandas rich" \
  "$PYTHON" benchmarks/features_throughput.py "${FEATURES_ARGS[@]}" --json "$OUT/features.json"
step pytest "$T_PYTEST" "pytest torch transformers numpy pandas rich omegaconf" \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_outlets.py
step ray 240 "ray pytest torch transformers pandas pyarrow hydra" \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_generation_ray.py

{
  echo "==================== gpu_checks summary ($(date -u +%FT%TZ)) ===================="
  printf '%s\n' "${SUMMARY[@]}"
  if [[ -f "$OUT/env.log" ]]; then
    grep -E "^python |torch |transformers |cuda available|^GPU " "$OUT/env.log" | sed 's/^/  env: /' || true
  fi
  if [[ -f "$OUT/overhead.log" ]]; then
    grep -E "batch +[0-9]+:" "$OUT/overhead.log" | sed 's/  params:.*//; s/^/  overhead: /' || true
  fi
  if [[ -f "$OUT/features.log" ]]; then
    grep -E "^(model|plain forward|extract_features|ratio):?" "$OUT/features.log" \
      | sed 's/^/  features: /' || true
  fi
  if [[ -f "$OUT/pytest.log" ]]; then
    grep -E "passed|failed|error" "$OUT/pytest.log" | tail -n 1 | sed 's/^/  pytest: /' || true
  fi
  if [[ -f "$OUT/ray.log" ]]; then
    grep -E "passed|failed|error|SKIPPED" "$OUT/ray.log" | tail -n 1 | sed 's/^/  ray: /' || true
  fi
} | tee "$OUT/summary.txt"
exit $FAILED
