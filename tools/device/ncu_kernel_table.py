#!/usr/bin/env python3
"""Kernel time per kernel name from an `ncu --metrics gpu__time_duration.sum --csv` file.

    ncu_kernel_table.py NCU_CSV [TOP]   # the TOP kernels by total time (default 25)
"""
import collections
import csv
import sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    sys.exit("no kernels in the ncu output")
top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
head, rows = rows[0], rows[1:]
ki, vi = head.index("Kernel Name"), head.index("Metric Value")
tot = collections.defaultdict(float)
cnt = collections.Counter()
for r in rows:
    name = r[ki].split("(")[0][:80]
    tot[name] += float(r[vi].replace(",", "")) / 1e3
    cnt[name] += 1
print(f"{len(rows)} kernels, {sum(tot.values()):.0f} us of kernel time")
for name, us in sorted(tot.items(), key=lambda x: -x[1])[:top]:
    print(f"{us:9.1f} us  x{cnt[name]:4d}  {name}")
