#!/usr/bin/env bash
# Copies the shared libraries that the binaries in DIR need and the GPU
# machine lacks (Debian's fmt, spdlog, ICU, ...; CUDA and libc are there) into
# DIR, so DIR can travel as the device tool's `carry`.
#
#   tools/device/carry_libs.sh DIR
set -euo pipefail
dir=$1
for b in "$dir"/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -v '^/usr/local/cuda' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl|librt|libcuda|libcublas|libcudart)[.-]' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$dir"/; done
ls -la "$dir"
du -sh "$dir"
