#!/usr/bin/env bash
# On the development machine: builds the CUDA tests and benchmark in
# build-cuda/ and copies them, with the non-CUDA shared libraries they need
# (the GPU machine has CUDA but not Debian's fmt), into .devcarry/cuda/ for
# the device tool's `carry`. Then, on the GPU machine:
#   tools/device/cuda_check.sh
#
#   tools/device/build_carry.sh [--no-cli]   (--no-cli: skip the sluice binary,
#   whose build is most of the time; cuda_check.sh then skips its CLI check)
#
# BUILD_DIR (default build-cuda) and CARRY_DIR (default .devcarry/cuda) let
# several people build and carry their own variants from one checkout; pass
# the same CARRY_DIR to cuda_check.sh on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-cuda}
carry=${CARRY_DIR:-.devcarry/cuda}
targets="cuda_kernel_test cuda_golden_test cuda_deepseek_v4_forward_test cuda_bench host_link_bench"
[ "${1:-}" = --no-cli ] || targets="$targets sluice"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON >/dev/null
cmake --build "$build" --target $targets
rm -rf "$carry"
mkdir -p "$carry"
cp "$build"/tests/cuda/cuda_kernel_test "$build"/tests/cuda/cuda_golden_test \
  "$build"/tests/cuda/cuda_deepseek_v4_forward_test "$build"/bench/cuda/cuda_bench \
  "$build"/bench/cuda/host_link_bench "$carry"/
[ "${1:-}" = --no-cli ] || cp "$build"/sluice "$carry"/
tools/device/carry_libs.sh "$carry"
