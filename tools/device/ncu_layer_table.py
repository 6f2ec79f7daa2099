#!/usr/bin/env python3
"""Kernel time per sub-layer of one DeepSeek-V4 step, from an ncu CSV in launch order.

    ncu_layer_table.py NCU_CSV LAYERS

`ncu --metrics gpu__time_duration.sum --csv` over one step (deepseek_v4_forward_bench
--flash-formats ... PROFILE 5: a prefill chunk). Each sub-layer starts with its hc_pre
(v4_hc_pre_kernel, or v4_hc_pre_partials_kernel where the width is split), two a layer
(attention, then the MoE); the head's hc_pre starts the last segment. For each
sub-layer: its kernel time, and the indexer's share: the scores and the top-k, and with
them the index-key records gathered from the blocks.
"""
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no kernels in the ncu output")
head, rows = rows[0], rows[1:]
ki, vi, ii = head.index("Kernel Name"), head.index("Metric Value"), head.index("ID")
layers = int(sys.argv[2])
kernels = sorted(((int(r[ii]), r[ki].split("(")[0], float(r[vi].replace(",", "")) / 1e3) for r in rows))
prologue, segments = [], []  # the kernels before the first hc_pre (the embedding), then the sub-layers
for _, name, us in kernels:
    if "v4_hc_pre_kernel" in name or "v4_hc_pre_partials" in name:
        segments.append([])
    (segments[-1] if segments else prologue).append((name, us))
print(f"{len(kernels)} kernels, {sum(us for _, _, us in kernels):.0f} us; before the first layer {sum(us for _, us in prologue):.0f} us")
print("| sub-layer | kernel time | indexer scores + top-k | + index-key records | share of its layer |")
print("|---|---|---|---|---|")
layer_us = {}
for i, seg in enumerate(segments[: 2 * layers]):
    layer_us[i // 2] = layer_us.get(i // 2, 0.0) + sum(us for _, us in seg)
for i, seg in enumerate(segments):
    total = sum(us for _, us in seg)
    scores = sum(us for name, us in seg if "indexer_scores" in name or "indexer_top_k" in name)
    records = scores + sum(us for name, us in seg if "gather_index_keys" in name or "gather_index_records" in name)
    layer = i // 2
    what = f"layer {layer} {'attention' if i % 2 == 0 else 'MoE'}" if layer < layers else "head"
    share = f"{100 * scores / layer_us[layer]:.1f}% / {100 * records / layer_us[layer]:.1f}%" if scores and layer < layers else ""
    print(f"| {what} | {total:.0f} us | {scores:.0f} us | {records:.0f} us | {share} |")
for layer, us in layer_us.items():
    print(f"layer {layer}: {us:.0f} us")
