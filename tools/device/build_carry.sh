#!/usr/bin/env bash
# On the development machine: builds the CUDA tests and benchmark in
# build-cuda/ and copies them, with the non-CUDA shared libraries they need
# (the GPU machine has CUDA but not Debian's fmt), into .devcarry/cuda/ for
# the device tool's `carry`. Then, on the GPU machine:
#   tools/device/cuda_check.sh
#
#   tools/device/build_carry.sh [--no-cli]   (--no-cli: skip the sluice binary,
#   whose build is most of the time; cuda_check.sh then skips its CLI check)
set -euo pipefail
cd "$(dirname "$0")/../.."
targets="cuda_kernel_test cuda_golden_test cuda_bench"
[ "${1:-}" = --no-cli ] || targets="$targets sluice"
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON >/dev/null
cmake --build build-cuda --target $targets
rm -rf .devcarry/cuda
mkdir -p .devcarry/cuda
cp build-cuda/tests/cuda/cuda_kernel_test build-cuda/tests/cuda/cuda_golden_test build-cuda/bench/cuda/cuda_bench \
  .devcarry/cuda/
[ "${1:-}" = --no-cli ] || cp build-cuda/sluice .devcarry/cuda/
for b in .devcarry/cuda/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -v '^/usr/local/cuda' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl|librt|libcuda|libcublas|libcudart)[.-]' || true
done | sort -u | while read -r lib; do cp -L "$lib" .devcarry/cuda/; done
ls -la .devcarry/cuda
du -sh .devcarry/cuda
