"""Replay: mha.tile_schedule's imbalance (static stride over first-free scheduling, 132 SMs)
beside the measured persistent-grid delta for each dense forward shape of a perf compare.json.

    PYTHONPATH=src python3 docs/records/2026-12-07-h200-persistent-forward/lab/predict.py \
        docs/records/2026-12-07-h200-persistent-forward/raw/pers/compare.json
"""
import json
import sys

from mha import tile_schedule as ts

SMS = 132
rows = []
for r in json.load(open(sys.argv[1]))["shapes"]:
    s = r["shape"]
    if s["layout"] != "dense" or r["same_code"]:
        continue   # the shapes the Gluon forward does not serve ran the same code on both sides
    p = ts.Problem(slices=s["batch"] * s["hq"], tiles_per_slice=s["sq"] // 128, seqlen_q=s["sq"], seqlen_k=s["sk"],
                   causal=s["causal"], head_group=4 if s["causal"] and s["dqk"] > s["dv"] else 0,
                   block_m=128, block_n=128)
    pred = ts.imbalance(p, SMS) if p.tiles > SMS else 1.0
    grid = "persistent" if ts.grid_size(p, SMS) < p.tiles else "per tile"
    rows.append((pred, r["delta_pct"], r["status"], p.tiles_per_slice, grid, r["key"]))
print(f"{'imbalance':>9} {'delta %':>8} {'status':11} {'tiles/slice':>11} {'policy':10} shape")
for pred, delta, status, per, grid, key in sorted(rows):
    print(f"{pred:9.3f} {delta:+8.1f} {status:11} {per:11d} {grid:10} {key}")
