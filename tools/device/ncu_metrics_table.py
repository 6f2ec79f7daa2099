#!/usr/bin/env python3
"""One row a kernel launch from an `ncu --csv --print-units base --metrics M1,M2,...` file.

    ncu_metrics_table.py NCU_CSV TITLE [LABEL...]

Launches in the file's order, each labelled by LABEL (cycled: `gate_up down`
for the MoE layer's two grouped GEMMs), with its time in ms, DRAM bytes read
in GB and every other metric as ncu gives it. Prints markdown rows after a
header naming TITLE.
"""
import collections
import csv
import sys

TIME, DRAM = "gpu__time_duration.sum", "dram__bytes_read.sum"

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit(f"{sys.argv[1]}: no kernels in the ncu output")
title, labels = sys.argv[2], sys.argv[3:] or ["launch"]
head, rows = rows[0], rows[1:]
ii, mi, vi = head.index("ID"), head.index("Metric Name"), head.index("Metric Value")
launches = collections.OrderedDict()  # ID -> {metric: value}
for r in rows:
    launches.setdefault(r[ii], {})[r[mi]] = float(r[vi].replace(",", ""))
metrics = [m for m in next(iter(launches.values())) if m not in (TIME, DRAM)]
print(f"| {title} | ms | DRAM read GB | " + " | ".join(metrics) + " |")
print("|---|---|---|" + "---|" * len(metrics))
for n, values in enumerate(launches.values()):
    cells = [f"{values.get(TIME, float('nan')) / 1e6:.3f}", f"{values.get(DRAM, float('nan')) / 1e9:.2f}"]
    cells += [f"{values[m]:.1f}" for m in metrics]
    print(f"| {labels[n % len(labels)]} | " + " | ".join(cells) + " |")
