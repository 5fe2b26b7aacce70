"""Lab (issue 36): where do the sink backward shapes' between-process offsets come from?
One process, per shape: (1) control: the same inputs measured M times; (2) relayout: fresh
inputs (same seed, same values) behind a pad of random size, M times; (3) per-dispatch drift
inside a rep (first vs last tenth), and a rep with the maximal hold. Prints JSON lines."""
import json, os, random, statistics, sys, time
os.environ["TRITON_DISABLE_LINE_INFO"] = "1"
import torch
from mha_ci.payloads.perf import make_inputs, kernel_call, CudaTimer, MAX_HOLD_US
from mha_ci.perf.shapes import parse_key

KEYS = sys.argv[2].split(",")
M = 8
tag = sys.argv[1]
timer = CudaTimer(torch, False)
rng = random.Random(int(time.time()))

def enqueue_us(call):
    t0 = time.perf_counter()
    for _ in range(3):
        call()
    return (time.perf_counter() - t0) / 3 * 1e6

def measure(call, n=50, reps=3, hold=None):
    for _ in range(5):
        timer.one(call)
    eq = enqueue_us(call)
    h = hold if hold is not None else min(n * eq * 1.5 + 100, MAX_HOLD_US)
    rs = [timer.rep(call, n, h, 0.0) for _ in range(reps)]
    allt = [t for r in rs for t in r]
    first = statistics.median([t for r in rs for t in r[: n // 10]])
    last = statistics.median([t for r in rs for t in r[-n // 10:]])
    return statistics.median(allt), first, last, eq

with torch.no_grad():
    for key in KEYS:
        shape = parse_key(key).to_dict()
        factory = kernel_call("mha", shape)
        inputs = make_inputs(torch, shape, "cuda", 1234)
        call = factory(torch, shape, inputs)
        call(); torch.cuda.synchronize()
        ctrl = [measure(call) for _ in range(M)]
        maxhold = measure(call, hold=MAX_HOLD_US)
        inputs = call = None
        relay = []
        for i in range(M):
            torch.cuda.empty_cache()
            pad = torch.empty(rng.randrange(1, 8192) * 4096, dtype=torch.uint8, device="cuda")
            inputs = make_inputs(torch, shape, "cuda", 1234)
            call = factory(torch, shape, inputs)
            relay.append(measure(call) + (inputs["q"].data_ptr() % (1 << 30),))
            inputs = call = None
            del pad
        torch.cuda.empty_cache()
        med = lambda xs: statistics.median(xs)
        c = [x[0] for x in ctrl]; r = [x[0] for x in relay]
        print(json.dumps({"tag": tag, "key": key, "control_us": [round(x, 2) for x in c],
                          "control_spread_pct": round(100 * (max(c) - min(c)) / med(c), 3),
                          "relayout_us": [round(x, 2) for x in r],
                          "relayout_spread_pct": round(100 * (max(r) - min(r)) / med(r), 3),
                          "relayout_vs_control_pct": round(100 * (med(r) / med(c) - 1), 3),
                          "first_last_tenth_us": [round(ctrl[0][1], 2), round(ctrl[0][2], 2)],
                          "enqueue_us": round(ctrl[0][3], 1),
                          "maxhold_us": round(maxhold[0], 2), "maxhold_first_last": [round(maxhold[1], 2), round(maxhold[2], 2)]}),
              flush=True)
