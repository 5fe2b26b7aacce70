"""The ncu table of this record's README from its raw files:
python3 lab/ncu_table.py raw/call3-ncu-d64-main.txt raw/call4-ncu-d64-pair.txt (run in the record's folder)."""
import csv
import sys

COLUMNS = [("gpu__time_duration.sum", "time us", lambda v: f"{float(v.replace(',', '')) / 1000:.0f}"),
           ("sm__inst_executed_pipe_xu.sum", "XU (MUFU) instr M", lambda v: f"{int(v.replace(',', '')) / 1e6:.1f}"),
           ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "XU busy %", str),
           ("sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active", "FMA %", str),
           ("sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", "ALU %", str),
           ("sm__inst_issued.avg.pct_of_peak_sustained_active", "issue %", str),
           ("sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active", "shared pipe %", str),
           ("sm__inst_executed.sum", "instr M", lambda v: f"{int(v.replace(',', '')) / 1e6:.0f}"),
           ("sm__warps_active.avg.per_cycle_active", "warps/SM", str)]


def runs(path):
    label, out = None, {}
    for line in open(path):
        if line.startswith("=== "):
            label = line[4:].strip()
            out[label] = {}
        elif line.startswith('"0"') and label:
            row = next(csv.reader([line]))
            out[label][row[12]] = row[14]
            out[label]["grid"], out[label]["block"] = row[8], row[7]
    return out


print("| kernel | grid x block | " + " | ".join(c[1] for c in COLUMNS) + " |")
print("|---|---|" + "---|" * len(COLUMNS))
for path in sys.argv[1:]:
    for label, m in runs(path).items():
        cells = [fmt(m[k]) if k in m else "n/a" for k, _, fmt in COLUMNS]
        print(f"| {label} | {m['grid']} x {m['block']} | " + " | ".join(cells) + " |")
