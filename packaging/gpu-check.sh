#!/usr/bin/env bash
# Kev's GPU checks, on a machine with an NVIDIA GPU, PyTorch (with transformers), CMake,
# nvcc and a C++ compiler, but no Qt and no internet. Builds the engine, kev-cli and
# kev-bench without Qt against that PyTorch's CUDA libtorch, then checks and measures:
#
#   1. cuda-q4    the CUDA 4-bit kernels (q4_0, q4_1, nf4 x fp32/fp16/bf16 activations):
#                 equal to the bit to their CPU twin, rows alone == rows in any pack;
#                 the tensor-core form (KEV_CUDA_Q4=tiles) near the twin and invariant;
#                 ms per call and weight GB/s against HBM
#      cuda-dense the dense tensor-core tiles (KEV_CUDA_DENSE=tiles) against cuBLAS:
#                 error, rows alone == packed (both reported), ms side by side
#   2. parity     fp32 logits within 1e-4 of transformers on the same GPU (tiny random
#                 Llama, Qwen2, Qwen3; positions past 1,000)
#   3. greedy     fp16 and bf16: 32 greedy tokens identical to transformers' in the same
#                 dtype (the built-in model where its file is here, else a random model
#                 of its shapes)
#   4. isolation  kev-cli --verify-isolation (packed == alone) in fp16, bf16 and 4-bit,
#                 by the default paths and by the tiles
#   5. vram       the VRAM gauge's figures (weights, KV cache, activations, reserve)
#                 against libtorch's allocator in the same process and the driver
#   6. pack       kev-bench pack --device cuda: the 0.5B- and 7B-shaped random models,
#                 bf16 and 4-bit, N = 1/4/8/16, 128 + 128 tokens: packed / one-at-a-time,
#                 tok/s, step time against the HBM roofline, allocator peak vs the driver
#
#   packaging/gpu-check.sh fetch        here, on Debian 12 (apt, PyPI): the C++ packages
#                                       and Python wheels the GPU machine lacks, into
#                                       .gpu-deps/ (ignored by git; carry it there)
#   packaging/gpu-check.sh fetch-builtin here: the built-in model in parts under .gpu-model/
#                                       (each part carried by its own call, see below)
#   packaging/gpu-check.sh run OUTDIR   there: build, check, write reports to OUTDIR
#
# Environment: KEV_GPU_BUDGET_S (default 450): a step that would start later than this
# many seconds after the start is reported NOT RUN (time budget), so the script ends in
# time on a lent device; the steps run in the order above, the pack measurements last.
# KEV_GPU_SKIP_7B=1 leaves out the 7B-shaped model (15 GB written and
# loaded); KEV_GPU_ARCH=90 the CUDA architecture (default: the GPU's own);
# KEV_BUILTIN_MODEL the built-in model's GGUF, where it is on that machine. To rehearse
# the script on a machine without a GPU: KEV_GPU_DEVICE=cpu (every step on the CPU),
# KEV_GPU_BUILD_DIR=build (reuse a build tree), KEV_GPU_QUICK=1 (no pack benchmarks),
# KEV_GPU_PYTHON=.venv/bin/python (the Python with torch and transformers).
# Each step prints PASS, FAIL or NOT RUN (with why) into OUTDIR/summary.md; the exit
# status is 1 if any step failed.
set -uo pipefail

MODE="${1:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.gpu-deps"
say() { printf '[gpu-check] %s\n' "$*" >&2; }

if [[ "$MODE" == fetch ]]; then
  set -e
  mkdir -p "$DEPS/debs" "$DEPS/wheels"
  # The engine's C++ dependencies, as Debian 12 ships them (headers, pkg-config files,
  # libraries), with pkg-config itself.
  (cd "$DEPS/debs" && apt-get download nlohmann-json3-dev libsentencepiece-dev libsentencepiece0 \
     libprotobuf-lite32 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
     libutf8proc-dev libutf8proc2 pkgconf pkgconf-bin libpkgconf3)
  # gguf (the 4-bit GGUF writer of tests/reference/make_random_gguf.py), pure Python.
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$DEPS/wheels" gguf==$(sed -n "s/^gguf==//p" "$ROOT/packaging/requirements-test.txt")
  du -sh "$DEPS"
  exit 0
fi
if [[ "$MODE" == fetch-builtin ]]; then
  # The built-in model's GGUF (98 MB) in 30 MB parts under .gpu-model/, with its sha256:
  # a call to the device carries at most 64 MiB with the sources, so the parts travel in
  # successive calls to one warm machine (carry .gpu-model/part-aa, then -ab, ...); `run`
  # joins them when all are there and the sum matches.
  set -e
  src="$(readlink -f "$ROOT/.venv/share/kev/models/SmolLM2-135M-Instruct.Q4_1.gguf")"
  rm -rf "$ROOT/.gpu-model" && mkdir -p "$ROOT/.gpu-model"
  split -b 30M "$src" "$ROOT/.gpu-model/part-"
  (cd "$(dirname "$src")" && sha256sum "$(basename "$src")") > "$ROOT/.gpu-model/sha256"
  ls -l "$ROOT/.gpu-model"
  exit 0
fi
[[ "$MODE" == run ]] || { sed -n '2,32p' "$0"; exit 2; }
OUT="${2:?usage: gpu-check.sh run OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
START=$(date +%s)
SUMMARY="$OUT/summary.md"
FAILED=0
WORK="${TMPDIR:-/tmp}/kev-gpu-check"
mkdir -p "$WORK"
BUDGET="${KEV_GPU_BUDGET_S:-450}"
step_result() {  # step_result NAME STATUS DETAIL
  printf '| %s | %s | %s | %ss |\n' "$1" "$2" "$3" "$(( $(date +%s) - START ))" >> "$SUMMARY"
  say "$1: $2 $3"
  [[ "$2" == FAIL ]] && FAILED=1
  return 0
}
out_of_time() {  # out_of_time NAME: true (and NAME reported NOT RUN) once the budget is spent
  (( $(date +%s) - START < BUDGET )) && return 1
  step_result "$1" "NOT RUN" "time budget (KEV_GPU_BUDGET_S=$BUDGET) spent"
  return 0
}
{
  echo "# Kev GPU check"
  echo
  echo "Command: \`packaging/gpu-check.sh run OUTDIR\` at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  "${KEV_GPU_PYTHON:-python3}" -c 'import torch, sys; print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {sys.version.split()[0]}")'
  echo
  echo "| step | result | detail | at |"
  echo "|---|---|---|---|"
} > "$SUMMARY"

# --- dependencies carried as packages ------------------------------------------------
PREFIX="$WORK/deps"
if [[ -d "$DEPS/debs" ]]; then
  mkdir -p "$PREFIX"
  for f in "$DEPS"/debs/*.deb; do dpkg-deb -x "$f" "$PREFIX"; done
  export PKG_CONFIG_SYSROOT_DIR="$PREFIX"
  export PKG_CONFIG_PATH="$PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$PREFIX/usr/share/pkgconfig"
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Where a pkg-config drops the prefix's include or library folder as a system one.
  export CPATH="$PREFIX/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
  command -v pkg-config >/dev/null || export PATH="$PATH:$PREFIX/usr/bin"
fi
if compgen -G "$DEPS/wheels/*.whl" >/dev/null; then
  "${KEV_GPU_PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$DEPS"/wheels/*.whl \
    && export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi

DEV="${KEV_GPU_DEVICE:-cuda}"
PY="${KEV_GPU_PYTHON:-python3}"
REF="$ROOT/tests/reference"

# --- models and transformers' references, made while the engine builds -------------------
cat > "$WORK/prompts.json" <<'EOF'
[{"tokens": [1, 17, 42, 99, 7, 300, 5, 64, 128, 3, 250, 11], "start": 0},
 {"tokens": [2, 9, 33, 480, 21, 77, 160, 4], "start": 1000},
 {"tokens": [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24], "start": 1990}]
EOF
cat > "$WORK/greedy-prompts.json" <<'EOF'
[{"tokens": [1, 504, 3458, 282, 4649, 314, 17, 1044, 30, 2], "start": 0},
 {"tokens": [1, 1780, 5248, 260, 1789, 1345, 288, 2053, 30], "start": 0}]
EOF
GREEDY_MODEL="${KEV_BUILTIN_MODEL:-}"
GREEDY_WHAT="the built-in model"
if [[ -z "$GREEDY_MODEL" && -f "$ROOT/.gpu-model/sha256" ]]; then  # parts from fetch-builtin
  joined="$WORK/$(awk '{print $2}' "$ROOT/.gpu-model/sha256")"
  cat "$ROOT"/.gpu-model/part-* > "$joined" 2>/dev/null
  if [[ "$(sha256sum < "$joined" | cut -d' ' -f1)" == "$(cut -d' ' -f1 "$ROOT/.gpu-model/sha256")" ]]; then
    GREEDY_MODEL="$joined"
  else
    say "the built-in model's parts in .gpu-model/ are incomplete: its random stand-in is used"
  fi
fi
if [[ -z "$GREEDY_MODEL" || ! -f "$GREEDY_MODEL" ]]; then
  GREEDY_MODEL="$WORK/smollm2-135m"
  GREEDY_WHAT="a random model of the built-in model's shapes (the built-in model's file is not on this machine)"
fi
Q05="$WORK/qwen2.5-0.5b"
Q05_GGUF="$WORK/qwen2.5-0.5b-q4_0.gguf"
Q7="$WORK/qwen2.5-7b"
PARITY_PRESETS=(tiny-llama tiny-qwen2 tiny-qwen3 tiny-phi4)  # tiny-phi4: partial rotary, LongRoPE
# Each piece leaves NAME.ok beside itself when it is made; the steps below look for it,
# and a second run on the same machine keeps what the first one made (the models are
# drawn from fixed seeds).
prepare() {
  for preset in "${PARITY_PRESETS[@]}"; do
    [[ -e "$WORK/$preset.ok" ]] || { $PY "$REF/make_random_model.py" --preset "$preset" --out "$WORK/$preset" > /dev/null \
      && $PY "$REF/model_logits.py" --model "$WORK/$preset" --prompts "$WORK/prompts.json" --out "$WORK/$preset/ref" \
           --device "$DEV" > /dev/null \
      && touch "$WORK/$preset.ok"; }
  done
  [[ "$GREEDY_MODEL" != "$WORK/smollm2-135m" || -e "$WORK/greedy-bf16.ok" ]] \
    || $PY "$REF/make_random_model.py" --preset smollm2-135m --out "$GREEDY_MODEL" > /dev/null
  for dt in fp16 bf16; do
    [[ -e "$WORK/greedy-$dt.ok" ]] || { $PY "$REF/model_logits.py" --model "$GREEDY_MODEL" --prompts "$WORK/greedy-prompts.json" \
      --out "$WORK/greedy-$dt" --device "$DEV" --dtype "$dt" --greedy 32 > /dev/null && touch "$WORK/greedy-$dt.ok"; }
  done
  [[ -e "$Q05.ok" ]] || { $PY "$REF/make_random_model.py" --preset qwen2.5-0.5b --out "$Q05" > /dev/null \
    && cp "$ROOT/tests/data/qwen-tokenizer/tokenizer.json" "$ROOT/tests/data/qwen-tokenizer/tokenizer_config.json" "$Q05/" \
    && touch "$Q05.ok"; }
  [[ -e "$Q05_GGUF.ok" ]] || { $PY -c 'import gguf' 2>/dev/null \
    && $PY "$REF/make_random_gguf.py" --model "$Q05" --out "$Q05_GGUF" --type Q4_0 \
         --tokenizer "$ROOT/tests/data/qwen-tokenizer" > /dev/null && touch "$Q05_GGUF.ok"; }
  if [[ "${KEV_GPU_QUICK:-0}" != 1 && "${KEV_GPU_SKIP_7B:-0}" != 1 && ! -e "$Q7.ok" ]]; then
    $PY "$REF/make_random_model.py" --preset qwen2.5-7b --out "$Q7" --device cuda --shards 4 > /dev/null \
      && touch "$Q7.ok"
  fi
  return 0
}
prepare > "$OUT/prepare.log" 2>&1 &
PREPARE_PID=$!

# --- build: engine, kev-cli, kev-bench; no Qt ------------------------------------------
ARCH="${KEV_GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')}"
BUILD="$WORK/build"
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
if [[ -n "${KEV_GPU_BUILD_DIR:-}" && -x "$KEV_GPU_BUILD_DIR/bin/kev-bench" ]]; then
  BUILD="$(cd "$KEV_GPU_BUILD_DIR" && pwd)"
  step_result build PASS "reused ${KEV_GPU_BUILD_DIR} (KEV_GPU_BUILD_DIR)"
elif cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DKEV_BUILD_UI=OFF -DKEV_BUILD_TESTS=OFF \
     -DKEV_PYTHON="$(command -v "$PY")" -DKEV_CUDA_KERNELS=ON ${ARCH:+-DKEV_CUDA_ARCHITECTURES=$ARCH} \
     -DCMAKE_PREFIX_PATH="$PREFIX/usr" > "$OUT/build.log" 2>&1 \
   && cmake --build "$BUILD" -j "$(nproc)" --target kev-bench kev-cli >> "$OUT/build.log" 2>&1; then
  step_result build PASS "engine, kev-cli, kev-bench for sm_${ARCH:-?} (build.log)"
else
  step_result build FAIL "see build.log"
  tail -30 "$OUT/build.log" >&2
  kill "$PREPARE_PID" 2>/dev/null
  exit 1
fi
BENCH="$BUILD/bin/kev-bench"
CLI="$BUILD/bin/kev-cli"

# ready NAME: waits for a piece of prepare() (NAME.ok), true once it is there, false when
# prepare() ended without it.
ready() {
  while [[ ! -e "$1.ok" ]]; do
    kill -0 "$PREPARE_PID" 2>/dev/null || { [[ -e "$1.ok" ]]; return; }
    sleep 1
  done
}

# --- 1. the 4-bit kernels -------------------------------------------------------------
"$BENCH" cuda-q4 > "$OUT/cuda-q4.out" 2> "$OUT/cuda-q4.log"
case $? in
  0) step_result cuda-q4 PASS "$(tail -1 "$OUT/cuda-q4.out"); timings in cuda-q4.log" ;;
  4) step_result cuda-q4 "NOT RUN" "$(head -1 "$OUT/cuda-q4.out")" ;;
  *) step_result cuda-q4 FAIL "$(grep -m3 MISMATCH "$OUT/cuda-q4.out" | tr '\n' ' ')" ;;
esac

"$BENCH" cuda-dense > "$OUT/cuda-dense.out" 2> "$OUT/cuda-dense.log"
case $? in
  0) step_result cuda-dense PASS "$(tail -1 "$OUT/cuda-dense.out"); timings against cuBLAS in cuda-dense.log" ;;
  4) step_result cuda-dense "NOT RUN" "$(head -1 "$OUT/cuda-dense.out")" ;;
  *) step_result cuda-dense FAIL "$(grep -m3 MISMATCH "$OUT/cuda-dense.out" | tr '\n' ' ')" ;;
esac

# --- 2. fp32 parity with transformers on the GPU ----------------------------------------
for preset in "${PARITY_PRESETS[@]}"; do
  m="$WORK/$preset"
  out_of_time "parity $preset" && continue
  if ready "$m"; then
    if "$BENCH" parity --model "$m" --prompts "$WORK/prompts.json" --reference "$m/ref" --device "$DEV" --tol 1e-4 \
         > "$OUT/parity-$preset.json" 2>> "$OUT/parity.log"; then
      step_result "parity $preset" PASS "fp32 logits within 1e-4 (max $(grep -o '"max_abs_diff": [0-9.e+-]*' "$OUT/parity-$preset.json" | sort -t: -k2 -g | tail -1 | cut -d' ' -f2))"
    else
      step_result "parity $preset" FAIL "$(grep -o '"max_abs_diff": [0-9.e+-]*' "$OUT/parity-$preset.json" | tr '\n' ' ')"
    fi
  else
    step_result "parity $preset" "NOT RUN" "the reference could not be made (prepare.log)"
  fi
done

# --- 3. fp16 / bf16 greedy tokens --------------------------------------------------------
for dt in fp16 bf16; do
  out_of_time "greedy $dt" && continue
  if ready "$WORK/greedy-$dt"; then
    if "$BENCH" parity --model "$GREEDY_MODEL" --prompts "$WORK/greedy-prompts.json" --reference "$WORK/greedy-$dt" \
         --device "$DEV" --precision "$dt" --tol 1e9 --greedy 32 > "$OUT/greedy-$dt.json" 2>> "$OUT/greedy.log"; then
      step_result "greedy $dt" PASS "32 tokens identical to transformers, $GREEDY_WHAT"
    else
      # Where the runs part, was the reference itself at a near-tie (its two best logits
      # closer than the largest logit difference between the two on the prompt)? Then
      # the step says NEAR-TIE with the numbers, not PASS; any other parting is a FAIL.
      verdict="$($PY - "$OUT/greedy-$dt.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["prompts"]
parted = [r for r in rows if not r.get("greedy_identical", False)]
ties = [r for r in parted if r.get("reference_margin_at_first_difference", 1e9) <= 2 * r["max_abs_diff"]]
what = "; ".join(f"prompt {r['index']} from token {r['greedy_first_difference']}: reference margin "
                 f"{r.get('reference_margin_at_first_difference', float('nan')):.4g}, logit noise {r['max_abs_diff']:.4g}"
                 for r in parted)
print(("NEAR-TIE" if len(ties) == len(parted) else "FAIL") + "\t" + what)
EOF
)"
      [[ "$verdict" == *$'\t'* ]] || verdict=$'FAIL\tsee greedy-'"$dt"'.json'
      step_result "greedy $dt" "${verdict%%$'\t'*}" "${verdict#*$'\t'} ($GREEDY_WHAT)"
    fi
  else
    step_result "greedy $dt" "NOT RUN" "transformers could not make the reference (prepare.log)"
  fi
done

# --- 4. isolation: packed == alone ------------------------------------------------------
questions=("What is a prime number?" "Name three rivers." "Why is the sky blue?" "Write a haiku about rain." "2+2?")
for prec in fp16 bf16 nf4 4bit fp16-tiles bf16-tiles nf4-tiles 4bit-tiles; do
  model="$Q05"
  form=default
  [[ "$prec" == *-tiles ]] && { form=tiles; prec="${prec%-tiles}"; }
  out_of_time "isolation $prec ($form)" && continue
  ready "$Q05" || { step_result "isolation $prec ($form)" "NOT RUN" "the 0.5B-shaped model could not be written (prepare.log)"; continue; }
  if [[ "$prec" == 4bit ]]; then
    ready "$Q05_GGUF" || { step_result "isolation 4bit ($form)" "NOT RUN" "no Q4_0 file: the gguf package is missing or could not write it (prepare.log)"; continue; }
    model="$Q05_GGUF"
  fi
  for temp in 0 0.8; do
    name="isolation-$prec-$form-t$temp"
    if KEV_CUDA_Q4="$form" KEV_CUDA_DENSE="$form" "$CLI" --model "$model" --device "$DEV" --precision "$prec" --verify-isolation --max-new-tokens 24 \
         --ignore-eos --seed 5 --temperature "$temp" --json "${questions[@]}" > "$OUT/$name.json" 2>> "$OUT/isolation.log"; then
      step_result "isolation $prec ($form) t=$temp" PASS "5 cards packed == alone"
    else
      step_result "isolation $prec ($form) t=$temp" FAIL "see $name.json"
    fi
  done
done

# Libtorch's attention kernels, limited (KEV_CUDA_SDPA, kev/cuda_attention.h): the first
# GPU check saw a packed decode step pay 60-75 ms for each new shape under libtorch's own
# choice. Each limit must keep packed == alone before its speed counts (pack, below).
SDPA_LIMITS=("flash,efficient,math" "math")
for sdpa in "${SDPA_LIMITS[@]}"; do
  out_of_time "isolation bf16 SDPA=$sdpa" && continue
  ready "$Q05" || { step_result "isolation bf16 SDPA=$sdpa" "NOT RUN" "no 0.5B-shaped model (prepare.log)"; continue; }
  name="isolation-bf16-sdpa-${sdpa//,/-}"
  if KEV_CUDA_SDPA="$sdpa" "$CLI" --model "$Q05" --device "$DEV" --precision bf16 --verify-isolation --max-new-tokens 24 \
       --ignore-eos --seed 5 --temperature 0.8 --json "${questions[@]}" > "$OUT/$name.json" 2>> "$OUT/isolation.log"; then
    step_result "isolation bf16 SDPA=$sdpa t=0.8" PASS "5 cards packed == alone"
  else
    step_result "isolation bf16 SDPA=$sdpa t=0.8" FAIL "see $name.json"
  fi
done

# --- 5. the VRAM gauge's figures against the allocator and the driver -------------------
for prec in bf16 nf4; do
  out_of_time "vram gauge $prec" && continue
  ready "$Q05" || { step_result "vram gauge $prec" "NOT RUN" "no 0.5B-shaped model (prepare.log)"; continue; }
  "$BENCH" cuda-memory --model "$Q05" --precision "$prec" > "$OUT/cuda-memory-$prec.json" 2>> "$OUT/cuda-memory.log"
  case $? in
    0) step_result "vram gauge $prec" PASS "weights and cache as allocated, parts add up (cuda-memory-$prec.json)" ;;
    4) step_result "vram gauge $prec" "NOT RUN" "$(head -1 "$OUT/cuda-memory-$prec.json")" ;;
    *) step_result "vram gauge $prec" FAIL "see cuda-memory-$prec.json" ;;
  esac
done

# --- 6. packed vs one-at-a-time, roofline, memory ----------------------------------------
# One-at-a-time is measured on two cards of each pack and scaled (--alone 2): a pack's
# cards have one length, and the device is lent for minutes.
HBM="${KEV_GPU_HBM_GBS:-4800}"
pack() {  # pack LABEL MODEL PRECISION FORM OUTNAME [KEV_CUDA_SDPA]
  local label="$1" model="$2" prec="$3" form="$4" name="$5" sdpa="${6:-auto}"
  out_of_time "$label" && return
  ready "$model" || { step_result "$label" "NOT RUN" "the model could not be written (prepare.log)"; return; }
  if KEV_CUDA_Q4="$form" KEV_CUDA_DENSE="$form" KEV_CUDA_SDPA="$sdpa" "$BENCH" pack --model "$model" --device cuda --hbm-gbs "$HBM" \
       --precision "$prec" --n 1,4,8,16 --reps 1 --alone 2 --dense-mask 0 --out "$OUT/$name" > /dev/null 2>> "$OUT/pack.log"; then
    step_result "$label" PASS "$name.md"
  else
    step_result "$label" FAIL "pack.log"
  fi
}
if [[ "${KEV_GPU_QUICK:-0}" == 1 ]]; then
  step_result pack "NOT RUN" "KEV_GPU_QUICK=1"
else
  wait "$PREPARE_PID" 2>/dev/null  # nothing else on the GPU while it is timed
  pack "pack 0.5B bf16" "$Q05" bf16 default pack-q05-bf16
  for sdpa in "${SDPA_LIMITS[@]}"; do
    pack "pack 0.5B bf16 SDPA=$sdpa" "$Q05" bf16 default "pack-q05-bf16-sdpa-${sdpa//,/-}" "$sdpa"
  done
  pack "pack 0.5B nf4" "$Q05" nf4 default pack-q05-nf4
  if [[ "${KEV_GPU_SKIP_7B:-0}" != 1 ]]; then
    pack "pack 7B bf16" "$Q7" bf16 default pack-q7b-bf16
    pack "pack 7B nf4" "$Q7" nf4 default pack-q7b-nf4
  else
    step_result "pack 7B" "NOT RUN" "KEV_GPU_SKIP_7B=1"
  fi
  pack "pack 0.5B Q4_0" "$Q05_GGUF" 4bit default pack-q05-q4_0
  pack "pack 0.5B bf16 tiles" "$Q05" bf16 tiles pack-q05-bf16-tiles
  pack "pack 0.5B nf4 tiles" "$Q05" nf4 tiles pack-q05-nf4-tiles
fi
kill "$PREPARE_PID" 2>/dev/null
wait 2>/dev/null

echo >> "$SUMMARY"
echo "Total $(( $(date +%s) - START )) s." >> "$SUMMARY"
cat "$SUMMARY"
exit $FAILED
