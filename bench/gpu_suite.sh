#!/usr/bin/env bash
# The GPU and many-core figures of issue #28 in one run of at most 8 minutes on the H200 machine (one H200,
# 16 cores, no network): installs the package into that machine's Python, then writes one JSON line per
# item into OUT_DIR (1.jsonl .. 4.jsonl, and all four in suite.jsonl) and a log (suite.log):
#   1. Triton k-center, n = 1M, d = 1792, fp16, k = 200 (bench/gpu_kcenter.py --item 1)
#   2. the engine on CUDA, bf16 and fp32, LLaVA-1.5-shaped random model, 1000 docs (bench/gpu_engine.py)
#   3. the contamination build on 1B u16 tokens, --threads 1..16, --memory 16GB (bench/gpu_contam.py)
#   4. CPU k-center at 16 threads (bench/gpu_kcenter.py --item 4)
# Each step has its own timeout; a step that fails or runs out of time still gets its line (status "error")
# and the next step runs. Large scratch files go to $GPU_SUITE_WORK (default: a temporary folder), never
# under OUT_DIR (everything there is brought back).
#
# Usage: bash bench/gpu_suite.sh OUT_DIR [--device cpu] [--small] [--no_install]
#   --device cpu --small   the CPU rehearsal (tens of seconds; CUDA-only parts say skipped, with the reason)
#   --no_install           use the Python as it is (its fastmmeval already installed)
# The Python is $PYTHON (default: python). Modules the package needs that the machine lacks travel as wheels
# in wheels/ at the repository root; they are installed first (pip --no-index --no-deps).
set -u
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
  echo "usage: bash bench/gpu_suite.sh OUT_DIR [--device cpu] [--small] [--no_install]" >&2
  exit 2
fi
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
shift
DEVICE=cuda SMALL="" INSTALL=1
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --small) SMALL=--small; shift ;;
    --no_install) INSTALL=0; shift ;;
    *) echo "gpu_suite.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $DEVICE in cuda|cpu) ;; *) echo "gpu_suite.sh: --device must be cuda or cpu, got $DEVICE" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python}
LOG=$OUT/suite.log
WORK=${GPU_SUITE_WORK:-$(mktemp -d /tmp/gpu_suite.XXXXXX)}
mkdir -p "$WORK"
[ -z "${GPU_SUITE_WORK:-}" ] && trap 'rm -rf "$WORK"' EXIT
rm -f "$OUT"/[1-4].jsonl "$OUT/suite.jsonl"
: >"$LOG"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
START=$SECONDS
say() { echo "[gpu_suite $((SECONDS - START)) s] $*" | tee -a "$LOG"; }

# Step limits in seconds: install, then items 1-4 (8 minutes in all on the H200; the rehearsal is small).
NAMES=(install triton_kcenter engine_cuda contam_build cpu_kcenter)
if [ -n "$SMALL" ]; then LIMITS=(300 60 60 60 60); else LIMITS=(70 60 185 90 60); fi

say "python $PY, device $DEVICE ${SMALL:-full size}, work $WORK"
if [ "$INSTALL" = 1 ]; then
  if ls wheels/*.whl >/dev/null 2>&1; then
    say "installing wheels/*.whl"
    timeout "${LIMITS[0]}" "$PY" -m pip install --no-index --no-deps wheels/*.whl >>"$LOG" 2>&1 \
      || { say "FAILED: pip install wheels/*.whl (see $LOG)"; exit 1; }
  fi
  say "building and installing fastmmeval (pip install --no-build-isolation --no-deps -e .)"
  timeout "${LIMITS[0]}" "$PY" -m pip install --no-build-isolation --no-deps -e . >>"$LOG" 2>&1 \
    || { say "FAILED: pip install -e . (see $LOG; it needs scikit-build-core, pybind11, cmake, ninja)"; exit 1; }
fi

# What the four steps import; missing ones are named in one line (put their wheels in wheels/).
NEEDED="numpy yaml PIL tqdm rich xxhash torch transformers tokenizers safetensors fastmmeval._core"
[ "$DEVICE" = cuda ] && NEEDED="$NEEDED triton"
if ! "$PY" - $NEEDED >>"$LOG" 2>&1 <<'EOF'
import importlib, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as err:
        missing.append(f"{name} ({type(err).__name__})")
if missing:
    print("missing Python modules: " + ", ".join(missing) + ": put their wheels in wheels/ and rerun")
    sys.exit(1)
EOF
then
  say "FAILED: $(tail -n 1 "$LOG")"
  exit 1
fi

step() {  # step ITEM SCRIPT [ARGS...]: run one item under its limit; on failure write its error line
  local item=$1 script=$2 limit=${LIMITS[$1]}
  shift 2
  local t0=$SECONDS
  say "item $item: $script $* (limit $limit s)"
  timeout --kill-after=10 "$limit" "$PY" "bench/$script" --item "$item" --out "$OUT/$item.jsonl" \
    --work "$WORK" --device "$DEVICE" --budget_s "$limit" $SMALL "$@" >>"$LOG" 2>&1
  local rc=$?
  if [ ! -s "$OUT/$item.jsonl" ]; then
    local why="exit $rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after $limit s"
    local last
    last=$(grep -v '^\s*$' "$LOG" | tail -n 1 | cut -c1-300 | sed 's/\\/\\\\/g; s/"/\\"/g; s/\t/ /g')
    printf '{"item": %d, "name": "%s", "status": "error", "error": "%s: %s", "seconds": %d}\n' \
      "$item" "${NAMES[$item]}" "$why" "$last" "$((SECONDS - t0))" >"$OUT/$item.jsonl"
  fi
  say "item $item: $(cut -c1-200 "$OUT/$item.jsonl")"
}

if [ "$DEVICE" = cpu ]; then
  TRITON_INTERPRET=1 step 1 gpu_kcenter.py
else
  step 1 gpu_kcenter.py
fi
step 2 gpu_engine.py
step 3 gpu_contam.py
step 4 gpu_kcenter.py
cat "$OUT"/[1-4].jsonl >"$OUT/suite.jsonl"
say "done in $((SECONDS - START)) s: $OUT/suite.jsonl"
