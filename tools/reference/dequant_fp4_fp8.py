#!/usr/bin/python3
"""Dequantizes a DeepSeek-V4 checkpoint's FP8 and FP4 weights with numpy, from
the format definitions alone, as an oracle for sluice's loader (it shares no
code with it). Run it with Debian's /usr/bin/python3 and python3-numpy.

The formats (docs/checkpoint-formats.md has the sources):
  - an FP8 linear `<m>.weight` is F8_E4M3 [rows, cols] (OCP E4M3FN: bias 7,
    subnormals, S.1111.111 NaN, no infinities) beside `<m>.scale`, one
    multiplier per BLOCK x BLOCK block (F8_E8M0, or F32 in -Base checkpoints):
        w[r][c] = e4m3(weight[r][c]) * scale[r // BLOCK][c // BLOCK]
  - an FP4 routed expert `<m>.weight` is I8 (or U8) [rows, cols / 2], two
    E2M1 codes a byte along the row, element 2i in the low nibble and 2i + 1
    in the high nibble, beside an F8_E8M0 `<m>.scale` [rows, ceil(cols / 32)]:
        w[r][c] = e2m1(code[r][c]) * scale[r][c // 32]
  - E8M0 is 2 ** (code - 127), code 255 NaN; E2M1 is the 16-value table below.

Writes OUT.safetensors: every scaled weight as F32 under its own name, nothing
else; `__metadata__` records the input, the block size and, with
--make-model, the make-model flags (JSON) that wrote the input, so a test can
rebuild it. Each element is one float32 multiplication (exact here: every
product is a float32).

Usage: dequant_fp4_fp8.py MODEL.safetensors OUT.safetensors [--block 128] [--make-model JSON]
"""
import argparse
import json
import struct

import numpy as np

GROUP = 32  # inputs per FP4 scale

# E2M1 by its definition (sign, 2 exponent bits with bias 1, 1 mantissa bit;
# exponent 0 is subnormal), written out: codes 0-7 positive, 8-15 negative.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


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
        tensors[name] = (info["dtype"], tuple(info["shape"]), data[base + begin:base + end])
    return tensors


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    offset = 0
    for name, array in tensors.items():
        size = array.nbytes
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for array in tensors.values():
            f.write(array.astype("<f4").tobytes())


def decode_e4m3(raw):
    bits = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent = (bits >> 3) & 0xF
    mantissa = bits & 0x7
    value = np.where(exponent == 0, sign * (mantissa / 8.0) * 2.0 ** -6,
                     sign * (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0))
    value = np.where((exponent == 0xF) & (mantissa == 0x7), np.nan, value)
    return value.astype(np.float32)


def decode_e8m0(raw):
    codes = np.frombuffer(raw, dtype=np.uint8).astype(np.float64)
    value = np.exp2(codes - 127.0)  # exact in float64; 2^-127 is a float32 subnormal, still exact
    return np.where(codes == 255, np.nan, value).astype(np.float32)


def scales_of(dtype, raw):
    if dtype == "F8_E8M0":
        return decode_e8m0(raw)
    assert dtype == "F32", dtype
    return np.frombuffer(raw, dtype="<f4").copy()


def dequantize_fp8(weight, scale, block):
    _, (rows, cols), raw = weight
    values = decode_e4m3(raw).reshape(rows, cols)
    grid = (-(-rows // block), -(-cols // block))
    assert scale[1] == grid, (scale[1], grid)
    scales = scales_of(scale[0], scale[2]).reshape(grid)
    expanded = np.repeat(np.repeat(scales, block, axis=0), block, axis=1)[:rows, :cols]
    return (values * expanded).astype(np.float32)


def dequantize_fp4(weight, scale):
    dtype, (rows, half_cols), raw = weight
    assert dtype in ("I8", "U8"), dtype
    cols = 2 * half_cols
    assert scale[0] == "F8_E8M0" and scale[1] == (rows, -(-cols // GROUP)), scale[:2]
    packed = np.frombuffer(raw, dtype=np.uint8).reshape(rows, half_cols)
    codes = np.empty((rows, cols), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F  # element 2i: the low nibble
    codes[:, 1::2] = packed >> 4    # element 2i + 1: the high nibble
    scales = decode_e8m0(scale[2]).reshape(rows, -1)
    expanded = np.repeat(scales, GROUP, axis=1)[:, :cols]
    return (E2M1[codes] * expanded).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--block", type=int, default=128, help="FP8 weight_block_size (both dimensions)")
    parser.add_argument("--make-model", default=None, help="the make-model flags that wrote MODEL, as JSON")
    args = parser.parse_args()
    tensors = read_safetensors(args.model)
    out = {}
    for name in sorted(tensors):
        if not name.endswith(".scale"):
            continue
        weight_name = name[:-len(".scale")] + ".weight"
        weight = tensors[weight_name]
        if weight[0] == "F8_E4M3":
            out[weight_name] = dequantize_fp8(weight, tensors[name], args.block)
        else:
            out[weight_name] = dequantize_fp4(weight, tensors[name])
    metadata = {"source": args.model.split("/")[-1], "fp8_block": str(args.block), "fp4_group": str(GROUP),
                "producer": "tools/reference/dequant_fp4_fp8.py"}
    if args.make_model is not None:
        metadata["make_model"] = json.dumps(json.loads(args.make_model), separators=(",", ":"))
    write_safetensors(args.out, out, metadata)
    print(f"wrote {len(out)} dequantized tensors to {args.out}")


if __name__ == "__main__":
    main()
