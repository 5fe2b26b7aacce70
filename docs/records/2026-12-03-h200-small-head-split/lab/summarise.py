"""Best two-kernel and best single-pass backward per shape, from the mha.bench --sweep tables.

    python3 lab/summarise.py sweeps/sp-3.4.md sweeps/d32-3.4.md sweeps/sp-3.8.md sweeps/d32-3.8.md
"""
import ast
import re
import sys

ROW = re.compile(r"^\| (\S+) \| bwd \| (\{.*\}) \| (\S+) \|$")


def tiles(cfg):
    return (cfg["BLOCK_M1"], cfg["BLOCK_N1"], cfg["BLOCK_M2"], cfg["BLOCK_N2"], cfg["num_warps"], cfg["num_stages"])


def main(paths):
    print("| table | shape | best two-kernel (tiles M1/N1/M2/N2, warps, stages) | TFLOP/s | best single-pass | TFLOP/s | single / two |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        best = {}
        for line in open(path):
            m = ROW.match(line.strip())
            if not m or not m.group(3).isdigit():
                continue
            shape, cfg, tf = m.group(1), ast.literal_eval(m.group(2)), int(m.group(3))
            kind = "single" if cfg.get("single_pass") else "two"
            if tf > best.get((shape, kind), (0, None))[0]:
                best[(shape, kind)] = (tf, tiles(cfg))
        for shape in dict.fromkeys(s for s, _ in best):
            two, one = best.get((shape, "two")), best.get((shape, "single"))
            ratio = f"{one[0] / two[0]:.2f}" if one and two else "-"
            fmt = lambda b: ("/".join(map(str, b[1][:4])) + f", {b[1][4]}, {b[1][5]}", b[0]) if b else ("-", "-")
            print(f"| {path.split('/')[-1]} | {shape} | {fmt(two)[0]} | {fmt(two)[1]} | {fmt(one)[0]} | {fmt(one)[1]} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1:])
