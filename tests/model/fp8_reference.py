#!/usr/bin/env python3
"""Dequantizes every F8_E4M3 tensor of a safetensors file with numpy, from the
definitions alone: the OCP float8 E4M3FN encoding (bias 7, subnormals, 0x7f
and 0xff NaN, no infinities) and DeepSeek's block scales (w = fp8 * scale_inv
of the weight's [128, 128] block). An oracle for sluice's loader, sharing no
code with it. Writes OUT_DIR/<tensor name>.f32 (raw little-endian float32).

Usage: fp8_reference.py MODEL.safetensors OUT_DIR [BLOCK_ROWS BLOCK_COLS]
"""
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[base + begin:base + end])
    return tensors


def decode_e4m3(raw):
    bits = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent = (bits >> 3) & 0xF
    mantissa = bits & 0x7
    normal = sign * np.ldexp(1.0 + mantissa / 8.0, exponent - 7)
    subnormal = sign * np.ldexp(mantissa / 8.0, -6)
    value = np.where(exponent == 0, subnormal, normal)
    value = np.where((exponent == 0xF) & (mantissa == 0x7), np.nan, value)
    return value.astype(np.float32)  # every e4m3 value is exact in float32


def main():
    path, out_dir = sys.argv[1], sys.argv[2]
    block_rows, block_cols = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (128, 128)
    tensors = read_safetensors(path)
    os.makedirs(out_dir, exist_ok=True)
    count = 0
    for name, (dtype, shape, raw) in tensors.items():
        if dtype != "F8_E4M3":
            continue
        rows, cols = shape
        values = decode_e4m3(raw).reshape(rows, cols)
        scale_dtype, scale_shape, scale_raw = tensors[name + "_scale_inv"]
        assert scale_dtype == "F32", name
        scales = np.frombuffer(scale_raw, dtype="<f4").reshape(scale_shape)
        expanded = np.repeat(np.repeat(scales, block_rows, axis=0), block_cols, axis=1)[:rows, :cols]
        dequantized = (values * expanded).astype("<f4")  # one float32 multiplication per element
        dequantized.tofile(os.path.join(out_dir, name + ".f32"))
        count += 1
    print(f"{count} tensors")


if __name__ == "__main__":
    main()
