#!/bin/sh
# Build coverage-instrumented copies of tracekit's C modules for the atheris targets in this
# folder: clang with libFuzzer's edge counters and AddressSanitizer (FUZZ_CFLAGS); the targets
# then re-run themselves with LD_PRELOAD of atheris's asan_with_fuzzer.so (libFuzzer + ASan
# runtime). The copies
# go to build/fuzz-instrumented/ (ignored by git); the targets use them when that folder exists,
# the regular in-place builds otherwise. Needs clang (Debian: apt-get install clang).
set -eu
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=build/fuzz-instrumented/tracekit/parsers
FLAGS=${FUZZ_CFLAGS:--fsanitize=fuzzer-no-link,address}
mkdir -p "$OUT"
INC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
SUFFIX=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
for mod in _kineto_scan _xplane_wire; do
    clang -shared -fPIC -O1 -g -std=c11 $FLAGS -I"$INC" \
        "tracekit/parsers/$mod.c" -o "$OUT/$mod$SUFFIX"
    echo "built $OUT/$mod$SUFFIX"
done
