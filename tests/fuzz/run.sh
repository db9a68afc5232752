#!/usr/bin/env bash
# Builds the fuzz tree and runs every libFuzzer target for a bounded time.
#
#   tests/fuzz/run.sh [TARGET...]        all targets when none is named
#
# Environment:
#   KEV_FUZZ_SECONDS     seconds per target (default 60)
#   KEV_FUZZ_BUILD_DIR   the fuzz build tree (default build-fuzz)
#   KEV_FUZZ_OUT         where seeds, working corpora, crashes and the report go
#                        (default $KEV_FUZZ_BUILD_DIR/fuzz-run)
#   KEV_FUZZ_CORPUS      optional: output folder of tests/corpus/make_corpus.py, whose small
#                        files join the seeds
#   KEV_JOBS             build jobs (default nproc)
#
# Exit status: non-zero when any target crashed, leaked, hit a sanitizer report, ran out
# of memory (-rss_limit_mb=2048) or timed out on one input; the reproducer is in
# $KEV_FUZZ_OUT/crashes/<target>/ and the report says which.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${KEV_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
OUT="${KEV_FUZZ_OUT:-$BUILD/fuzz-run}"
SECONDS_EACH="${KEV_FUZZ_SECONDS:-60}"
JOBS="${KEV_JOBS:-$(nproc)}"
PY="${KEV_PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3

say() { printf '[kev fuzz] %s\n' "$*" >&2; }

CXX_CLANG="$(command -v clang++ || command -v clang++-14 || true)"
[[ -n "$CXX_CLANG" ]] || { say "error: clang++ not found (libFuzzer needs clang)"; exit 1; }

t0=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -DKEV_FUZZ=ON -DCMAKE_CXX_COMPILER="$CXX_CLANG" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
say "build: $(( $(date +%s) - t0 )) s"

if (($#)); then
  targets=("$@")
else
  targets=()
  for exe in "$BUILD"/bin/fuzz_*; do targets+=("$(basename "$exe" | sed 's/^fuzz_//')"); done
fi

rm -rf "$OUT"
mkdir -p "$OUT"
t0=$(date +%s)
seed_args=("$OUT/seeds")
[[ -n "${KEV_FUZZ_CORPUS:-}" ]] && seed_args+=(--corpus "$KEV_FUZZ_CORPUS")
[[ -n "${KEV_BUILTIN_MODEL:-}" ]] && seed_args+=(--builtin "$KEV_BUILTIN_MODEL")
"$PY" "$ROOT/tests/fuzz/make_seeds.py" "${seed_args[@]}" >&2
say "seeds: $(( $(date +%s) - t0 )) s"

report="$OUT/report.txt"
printf '%-16s %8s %12s %10s  %s\n' target seconds executions exec/s result > "$report"
failed=()
for t in "${targets[@]}"; do
  exe="$BUILD/bin/fuzz_$t"
  [[ -x "$exe" ]] || { say "error: no target fuzz_$t"; exit 1; }
  corpus="$OUT/corpus/$t"
  crashes="$OUT/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  log="$OUT/$t.log"
  say "fuzz_$t: ${SECONDS_EACH} s"
  start=$(date +%s)
  rc=0
  # The seeds are read-only input; what the run finds goes to its own corpus folder.
  # -timeout: one input running longer than 10 s is a hang (a reported failure).
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$exe" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$OUT/seeds/$t" \
      >"$log" 2>&1 || rc=$?
  took=$(( $(date +%s) - start ))
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  rate="$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  if ((rc == 0)); then
    result=ok
  else
    result="FAILED (exit $rc): $(grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|kev fuzz:|deadly signal|out-of-memory|timeout' "$log" || echo 'see log') -- $(ls "$crashes" | head -1)"
    failed+=("$t")
  fi
  printf '%-16s %8s %12s %10s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$result" >> "$report"
  say "fuzz_$t: ${execs:-?} executions in $took s: $result"
done
cat "$report" >&2
say "report: $report"
if ((${#failed[@]})); then
  say "error: crashes in ${failed[*]} (reproducers in $OUT/crashes/, logs in $OUT/*.log)"
  exit 1
fi
