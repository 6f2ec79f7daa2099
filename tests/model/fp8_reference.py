#!/usr/bin/env python3
"""Dequantizes every F8_E4M3 tensor of a safetensors file with numpy, from the
definitions alone: the OCP float8 E4M3FN encoding (bias 7, subnormals, 0x7f
and 0xff NaN, no infinities) and DeepSeek's block scales (w = fp8 * scale_inv
of the weight's [128, 128] block). An oracle for sluice's loader, sharing no
code with it. Writes OUT_DIR/<tensor name>.f32 (raw little-endian float32).

With --checkpoint, writes instead a whole model directory OUT_DIR: the
model's config.json without quantization_config, its tokenizer files, and
model.safetensors with every FP8 weight replaced by its F32 dequantization
(scales dropped, other tensors copied byte for byte).

Usage: fp8_reference.py MODEL.safetensors OUT_DIR [BLOCK_ROWS BLOCK_COLS]
       fp8_reference.py --checkpoint MODEL_DIR OUT_DIR
"""
import json
import os
import shutil
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


def dequantize(tensors, name, block_rows=128, block_cols=128):
    dtype, (rows, cols), raw = tensors[name]
    values = decode_e4m3(raw).reshape(rows, cols)
    scale_dtype, scale_shape, scale_raw = tensors[name + "_scale_inv"]
    assert scale_dtype == "F32", name
    scales = np.frombuffer(scale_raw, dtype="<f4").reshape(scale_shape)
    expanded = np.repeat(np.repeat(scales, block_rows, axis=0), block_cols, axis=1)[:rows, :cols]
    return (values * expanded).astype("<f4")  # one float32 multiplication per element


def write_checkpoint(model_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    config = json.load(open(os.path.join(model_dir, "config.json")))
    block_rows, block_cols = config.pop("quantization_config")["weight_block_size"]
    json.dump(config, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(model_dir, name), out_dir)
    tensors = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        if name.endswith("_scale_inv"):
            continue
        if dtype == "F8_E4M3":
            dtype, raw = "F32", dequantize(tensors, name, block_rows, block_cols).tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def main():
    if sys.argv[1] == "--checkpoint":
        write_checkpoint(sys.argv[2], sys.argv[3])
        return
    path, out_dir = sys.argv[1], sys.argv[2]
    block_rows, block_cols = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (128, 128)
    tensors = read_safetensors(path)
    os.makedirs(out_dir, exist_ok=True)
    count = 0
    for name, (dtype, shape, raw) in tensors.items():
        if dtype != "F8_E4M3":
            continue
        dequantize(tensors, name, block_rows, block_cols).tofile(os.path.join(out_dir, name + ".f32"))
        count += 1
    print(f"{count} tensors")


if __name__ == "__main__":
    main()
