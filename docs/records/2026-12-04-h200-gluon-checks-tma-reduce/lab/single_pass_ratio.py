"""Section 4's table: per shape, the best single-pass candidate of a sweep (sweeps/sptma-<v>.md)
against the shipped backward of mha.bench in the same call (sweeps/benchsp-<v>.md).

    python3 docs/records/2026-12-04-h200-gluon-checks-tma-reduce/lab/single_pass_ratio.py
"""
import re
from pathlib import Path

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
ROW = re.compile(r"\| (\S+) \| bwd \| (.+) \| (\d+) \|$")

for v in ("3.4", "3.8"):
    best = {}
    for line in (SWEEPS / f"sptma-{v}.md").read_text().splitlines():
        m = ROW.match(line)
        if m and (m.group(1) not in best or int(m.group(3)) > best[m.group(1)][0]):
            best[m.group(1)] = (int(m.group(3)), m.group(2))
    shipped = {}
    for line in (SWEEPS / f"benchsp-{v}.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[1] == "bwd":
            shipped[cells[0]] = int(cells[2])
    for key, (tflops, cfg) in best.items():
        print(f"triton {v} {key}: single pass {tflops} / two kernels {shipped[key]} = "
              f"{tflops / shipped[key]:.2f} ({cfg})")
