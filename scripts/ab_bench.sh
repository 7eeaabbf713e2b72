#!/usr/bin/env bash
# Same-run A/B of two source trees on a CUDA machine: builds gna-kernel-bench in each, runs
# BENCH_ARGS on both interleaved ROUNDS times (base, new, base, new, ...), keeps each run's JSON
# under $OUT/ab, and prints scripts/ab_table.py's comparison (exit 1 when a case is slower than
# LIMIT percent beyond base's own spread). Only figures of one run compare (clocks and hosts
# differ between runs), hence both trees in one call.
#
#   scripts/ab_bench.sh BASE_TREE NEW_TREE
#
# Trees are clean exports of two commits, e.g. on the development machine
#   git archive -o base.tar main && git archive -o new.tar my-branch
# and on the CUDA machine: mkdir -p /tmp/base /tmp/new && tar -xf base.tar -C /tmp/base && ...
# Environment: BENCH_ARGS (gna-kernel-bench arguments, shell quoting honoured, e.g.
# "--backends hopper --passes fwd --cases 'hunyuan 18x24x24 NA,wan 15x27x48'"), ROUNDS (2),
# LIMIT (2), JOBS (16), OUT (default ./ab-out), CUDA_ARCHS (GNA_CUDA_ARCHS of both builds,
# default native: this machine's GPUs alone, the quickest build).
set -u -o pipefail
if [ $# -ne 2 ]; then
  echo "usage: scripts/ab_bench.sh BASE_TREE NEW_TREE" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
base=$(cd "$1" && pwd) || exit 2
new=$(cd "$2" && pwd) || exit 2
ROUNDS=${ROUNDS:-2}
LIMIT=${LIMIT:-2}
JOBS=${JOBS:-16}
OUT=${OUT:-$PWD/ab-out}
mkdir -p "$OUT/ab"
eval "bench_args=(${BENCH_ARGS:-})"

build() {  # TREE LOG
  cmake -S "$1" -B "$1/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGNA_CUDA=ON \
      -DGNA_CUDA_ARCHS="${CUDA_ARCHS:-native}" -DGNA_BUILD_TESTS=OFF >"$2" 2>&1 &&
    cmake --build "$1/build-ab" -j "$((JOBS / 2))" --target gna-kernel-bench >>"$2" 2>&1
}
build "$base" "$OUT/build-base.log" & pid=$!
build "$new" "$OUT/build-new.log" || { tail -20 "$OUT/build-new.log"; exit 2; }
wait $pid || { tail -20 "$OUT/build-base.log"; exit 2; }

for round in $(seq 1 "$ROUNDS"); do
  for side in base new; do
    tree=$base
    [ $side = new ] && tree=$new
    "$tree/build-ab/bin/gna-kernel-bench" "${bench_args[@]}" --json "$OUT/ab/$round-$side.json" \
        >"$OUT/ab/$round-$side.txt" 2>&1 || { tail -20 "$OUT/ab/$round-$side.txt"; exit 2; }
  done
done
python3 "$here/ab_table.py" "$OUT/ab" --limit "$LIMIT" | tee "$OUT/ab_table.md"
