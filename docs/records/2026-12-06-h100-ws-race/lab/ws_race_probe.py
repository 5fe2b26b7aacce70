"""Lab probe (issue 39): the warp-specialized backward's dK/dV going non-finite, run after run.
usage: python3 probe.py CASE...
env: WS='{"num_stages": 3}' patches the ws config; SENTINEL=-7776 fills dK/dV with that value before the kernel; VARIANT=ptr|early swaps in .lab/nan/ws_race_variants.py's
dK/dV kernel; REPS (default 1) backward runs of the ws path per case.
Per case: the Triton backward (a config override) once, then REPS ws backwards of one forward;
for each of dq/dk/dv, the runs with non-finite entries and the runs not bitwise equal to the
Triton result, and where the first bad run's non-finite entries lie."""
import json, os, sys, time
import torch
import mha
from mha import config as cfgmod, launch

CASES = {  # name: (b, s, hq, hk, causal)
    "s8k_c": (1, 8192, 64, 8, True), "s16k_c": (1, 16384, 64, 8, True), "s32k_c": (1, 32768, 64, 8, True),
    "s64k_c": (1, 65536, 64, 8, True), "s64k_n": (1, 65536, 64, 8, False), "g1_s64k_c": (1, 65536, 8, 8, True),
    "b4_s4k_n": (4, 4096, 32, 8, False), "b2_s32k_c": (2, 32768, 64, 8, True),
    "b5_s64k_c": (5, 65536, 64, 8, True), "b5_s64k_n": (5, 65536, 64, 8, False),
}
TRITON = {"backward": {"num_warps": 8}}   # any key of the pass: the Triton backward

# The withdrawn config (no file holds it now), patched by $WS.
WS_BASE = {"triton": "==3.4", "BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 64,
           "num_warps": 4, "num_stages": 2}
ws = cfgmod.load_arch_configs("sm90")["backward"]["default"].setdefault("ws", dict(WS_BASE))
ws.update(json.loads(os.environ.get("WS") or "{}"))
print("ws config:", ws, flush=True)
if os.environ.get("VARIANT"):
    sys.path.insert(0, os.path.dirname(__file__))
    from ws_race_variants import VARIANTS
    launch.attn_bwd_dkdv_ws = VARIANTS[os.environ["VARIANT"]]
    print("dK/dV kernel:", os.environ["VARIANT"], flush=True)
REPS = int(os.environ.get("REPS", "1"))
# SENTINEL=-7776: dK/dV start as this value instead of torch.empty's leftovers, so an entry the
# kernel never wrote is told apart from one it computed wrong.
SENT = float(os.environ["SENTINEL"]) if os.environ.get("SENTINEL") else None
if SENT is not None:
    def _dkdv_sentinel(spec, geo, q, k, v, dout, lse, delta, softmax_scale):
        dk, dv = torch.full_like(k, SENT), torch.full_like(v, SENT)
        launch._ws_launch(spec, geo, geo.heads_k, geo.seqlen_k, [q, k, v, dout, lse, delta, dk, dv], softmax_scale)
        return dk, dv
    launch.TILE_BACKWARDS = tuple((kind, ok, _dkdv_sentinel if f is launch.backward_ws_dkdv else f, g)
                                  for kind, ok, f, g in launch.TILE_BACKWARDS)
    print("dK/dV start as", SENT, flush=True)


def where_bad(x, name):
    bad = ~torch.isfinite(x) | ((x == SENT) if SENT is not None else False)
    b, s, h, d = x.shape
    rows = bad.any(dim=(2, 3))                         # (b, s)
    r = rows.nonzero()[:, 1]
    per_tile = rows.view(b, s // 128, 128).any(dim=0).sum(dim=0)   # which rows of a 128-key tile
    return (f"{name}: {int(bad.sum())} non-finite; {int(rows.sum())} rows in "
            f"{int(rows.view(b, s // 128, 128).any(dim=2).sum())} tiles, rows {int(r.min())}..{int(r.max())}; "
            f"tile rows 0-63: {int(per_tile[:64].sum())}, 64-127: {int(per_tile[64:].sum())}; "
            f"slices (b,h): {sorted({tuple(i) for i in bad.any(dim=(1, 3)).nonzero().tolist()})[:8]}")


def run(name):
    b, s, hq, hk, causal = CASES[name]
    torch.manual_seed(0)
    q = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, s, hk, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, s, hk, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16)
    t = time.time()
    out = mha.flash_attn_func(q, k, v, causal=causal, config=TRITON)
    ref = torch.autograd.grad(out, (q, k, v), dout)
    del out
    out = mha.flash_attn_func(q, k, v, causal=causal)
    nonfinite, differ, first = [0, 0, 0], [0, 0, 0], None
    kinds = {"unwritten": [0, 0, 0], "nan": [0, 0, 0], "inf": [0, 0, 0], "wrong finite": [0, 0, 0]}  # entries, all runs
    for rep in range(REPS):
        got = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        torch.cuda.synchronize()
        for i, (g, r) in enumerate(zip(got, ref)):
            bad = not bool(torch.isfinite(g).all()) or (SENT is not None and bool((g == SENT).any()))
            nonfinite[i] += bad
            differ[i] += not torch.equal(g, r)
            unwritten = (g == SENT) if SENT is not None else torch.zeros_like(g, dtype=torch.bool)
            kinds["unwritten"][i] += int(unwritten.sum())
            kinds["nan"][i] += int(torch.isnan(g).sum())
            kinds["inf"][i] += int(torch.isinf(g).sum())
            kinds["wrong finite"][i] += int((torch.isfinite(g) & ~unwritten & (g != r)).sum())
            if bad and first is None:
                first = where_bad(g, ("dq", "dk", "dv")[i])
        del got
    print(f"== {name} b{b} s{s} hq{hq} hk{hk} causal={causal}: {REPS} ws runs ({time.time() - t:.1f} s): "
          f"non-finite dq/dk/dv {nonfinite}, not bitwise the Triton result dq/dk/dv {differ}", flush=True)
    print("   entries over all runs, dq/dk/dv:", "; ".join(f"{k} {v}" for k, v in kinds.items()), flush=True)
    if first:
        print("   first bad:", first, flush=True)
    del q, k, v, dout, out, ref
    torch.cuda.empty_cache()


if __name__ == "__main__":
    print("triton", __import__("triton").__version__, "torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for name in sys.argv[1:]:
        try:
            run(name)
        except Exception as e:  # the next case still runs
            print(f"== {name}: {type(e).__name__}: {e}", flush=True)
            torch.cuda.empty_cache()
