#!/usr/bin/env bash
# On the development machine: packs built binaries for the device tool's
# `carry` (64 MiB a call with the checkout): strips them, adds the shared
# libraries the GPU machine lacks (carry_libs.sh) and writes DIR/bin.tar.xz,
# which the check scripts unpack (carried_bin.sh). .devcarry is git-ignored
# and does not survive between sessions.
#
#   tools/device/pack_carry.sh .devcarry/s28 build/tests/cuda/cuda_kernel_test build/bench/cuda/cuda_bench
#   # then carry [".devcarry/s28"] and run CARRY_DIR=.devcarry/s28 tools/device/<check>.sh
set -euo pipefail
dir=$1
shift
[ $# -gt 0 ] || { echo "usage: pack_carry.sh DIR BINARY..." >&2; exit 2; }
rm -rf "$dir/bin" "$dir/bin.tar.xz"
mkdir -p "$dir/bin"
cp "$@" "$dir/bin/"
strip "$dir"/bin/*
"$(dirname "$0")/carry_libs.sh" "$dir/bin" >/dev/null
(cd "$dir/bin" && tar -cJf ../bin.tar.xz .)
rm -rf "$dir/bin"
du -h "$dir/bin.tar.xz"
