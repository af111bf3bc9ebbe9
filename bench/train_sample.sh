# What fidelity.sh and variants.sh share, sourced by them after setting
# root (the project's folder): sh functions over the caller's variables.

# bench_build NAME [CMAKE_OPTION...]: builds giant (Release, the options
# added) in $GIANT_BUILD_DIR, or build-bench-NAME by default; sets build,
# giant (the binary) and work (the build's NAME folder, made).
bench_build() {
  build="${GIANT_BUILD_DIR:-$root/build-bench-$1}"
  work="$build/$1"
  shift
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  cmake --build "$build" --target giant -j"$(nproc)" >/dev/null
  giant="$build/giant"
  mkdir -p "$work"
}

# bench_train_sample NAME CFG DEVICE N [SAMPLE_OPTION...]: trains CFG on
# DEVICE into a fresh $work/NAME.db (set as db), then samples N showers
# (seed 1, the options added) into $work/NAME.h5, its log in
# $work/NAME.sample.log; t0, t1 and t2 are the times before training,
# between and after sampling.
bench_train_sample() {
  db="$work/$1.db"
  rm -f "$db" "$db-wal" "$db-shm"
  t0=$(date +%s.%N)
  "$giant" train "$2" --db "$db" --device "$3" --quiet > /dev/null
  t1=$(date +%s.%N)
  bts_name=$1 bts_n=$4
  shift 4
  "$giant" sample --n "$bts_n" --seed 1 -o "$work/$bts_name.h5" --db "$db" "$@" \
      2> "$work/$bts_name.sample.log"
  t2=$(date +%s.%N)
}
