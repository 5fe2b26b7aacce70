"""A CPU model of the persistent Gluon forward's synchronisation (lab/persistent.patch), to find
deadlocks and buffer reuse bugs before a GPU call: the loader and the two consumer partitions run
as generators under a random scheduler, with the patch's index arithmetic, over mbarriers modelled
by their phase counts (a wait on parity P passes once the barrier's current phase parity is not
P, so a fresh barrier passes parity 1 at once).

Checked in every run: no deadlock; every K/V ring slot a consumer reads holds the block it expects
(tile, block), never one of another tile or a later round; every Q buffer holds the consumer's
tile when its first QK^T reads it and is not overwritten while its O staging is in flight; the
two groups issue their wgmma pairs in strict alternation; each tile's key blocks are those of
`_tile`. TMA copies land after a random delay (the loader does not wait for them).

    python3 lab/protocol_sim.py [RUNS]   (from the record's folder; exit 1 on the first failure)
    python3 lab/protocol_sim.py --plants  (each planted bug below must be caught)
"""
import random
import sys

# Planted bugs, each a one-line change of the patch's arithmetic that the model must catch.
PLANTS = {
    "q-empty-not-waited": "the loader loads Q without waiting for the consumers to release the buffer",
    "ring-base-not-advanced": "the consumers count ring slots from 0 in every tile",
    "turn-base-not-advanced": "the consumers count ping-pong turns from 0 in every tile",
    "q-phase-per-buffer-ignored": "the consumers wait on the Q barrier with the tile count's parity, not the buffer round's",
}
PLANT = None


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, 0, 0

    def arrive(self):
        self.pending += 1
        if self.pending == self.count:
            self.pending, self.phase = 0, self.phase + 1

    def passed(self, parity):
        return (self.phase & 1) != parity


def tiles(n_slices, n_tiles, causal, head_group, block_m, block_n, seqlen_q, seqlen_k):
    """`_tile` of the patch: (t, pid_bh, pid_m, n_full, n_total) in launch order."""
    out = []
    for t in range(n_slices * n_tiles):
        if causal and head_group > 0:
            first = t // (head_group * n_tiles) * head_group
            size = min(n_slices - first, head_group)
            r = t - first * n_tiles
            pid_bh, pid_m = first + r % size, n_tiles - 1 - r // size
        elif causal:
            pid_bh, pid_m = t % n_slices, n_tiles - 1 - t // n_slices
        else:
            pid_m, pid_bh = t % n_tiles, t // n_tiles
        m0, diag = pid_m * block_m, seqlen_k - seqlen_q
        if causal:
            n_full, n_total = (m0 + diag) // block_n, (m0 + diag + block_m) // block_n
        else:
            n_full = n_total = seqlen_k // block_n
        out.append((t, pid_bh, pid_m, n_full, n_total))
    return out


def run(seed):
    rng = random.Random(seed)
    stages, q_bufs, programs = rng.choice([2, 3, 4]), rng.choice([1, 2]), rng.randint(1, 4)
    causal, head_group = rng.random() < 0.7, rng.choice([0, 0, 4])
    block_m, block_n = 128, rng.choice([64, 128])
    n_tiles, n_slices = rng.randint(1, 5), rng.randint(1, 6)
    seqlen_q = n_tiles * block_m
    seqlen_k = seqlen_q + (rng.choice([0, 128, 256]) if causal else rng.choice([-seqlen_q + 128, 0, 256]))
    seqlen_k = max(seqlen_k, 128)
    if causal and seqlen_k < seqlen_q:
        seqlen_k = seqlen_q
    work = tiles(n_slices, n_tiles, causal, head_group, block_m, block_n, seqlen_q, seqlen_k)
    where = f"seed {seed}: stages {stages} q_bufs {q_bufs} programs {programs} causal {causal} group {head_group} " \
            f"n_tiles {n_tiles} n_slices {n_slices} sq {seqlen_q} sk {seqlen_k} block_n {block_n}"
    for program in range(min(programs, len(work))):
        mine = work[program::programs]
        err = run_program(rng, mine, stages, q_bufs)
        if err:
            return f"{where}, program {program}: {err}"
    return None


def run_program(rng, mine, stages, q_bufs):
    k_ready = [Barrier(1) for _ in range(stages)]
    v_ready = [Barrier(1) for _ in range(stages)]
    k_empty = [Barrier(2) for _ in range(stages)]
    v_empty = [Barrier(2) for _ in range(stages)]
    q_bar = [Barrier(1) for _ in range(q_bufs)]
    q_empty = [Barrier(2) for _ in range(q_bufs)]
    turn = [Barrier(1), Barrier(1)]
    k_slot, v_slot = [None] * stages, [None] * stages
    q_buf = [[None, None] for _ in range(q_bufs)]
    in_flight = []       # (due tick, action) of TMA copies
    issues = []          # wgmma pair issues by group, in order
    errors = []

    def copy(due_in, action):
        in_flight.append((tick[0] + due_in, action))

    def loader():
        base, i = 0, 0
        for (t, _bh, _m, _nf, n_total) in mine:
            qb = i % q_bufs
            yield lambda: PLANT == "q-empty-not-waited" or q_empty[qb].passed(((i // q_bufs) & 1) ^ 1)
            for c in (0, 1):
                if q_buf[qb][c] is not None and q_buf[qb][c][0] == "O-staging":
                    errors.append(f"Q load of tile {t} into buffer {qb} while O of tile {q_buf[qb][c][1]} is staged there")

            def land_q(qb=qb, t=t):
                for c in (0, 1):
                    if q_buf[qb][c] is not None and q_buf[qb][c][0] == "O-staging":
                        errors.append(f"Q of tile {t} lands in buffer {qb} over staged O of tile {q_buf[qb][c][1]}")
                q_buf[qb][0] = q_buf[qb][1] = ("Q", t)
                q_bar[qb].arrive()
            copy(rng.randint(1, 6), land_q)
            for j in range(n_total):
                g = base + j
                st, ph = g % stages, (g // stages) & 1
                yield lambda st=st, ph=ph: k_empty[st].passed(ph ^ 1)
                copy(rng.randint(1, 6), lambda st=st, t=t, j=j: (k_slot.__setitem__(st, (t, j)), k_ready[st].arrive()))
                yield lambda st=st, ph=ph: v_empty[st].passed(ph ^ 1)
                copy(rng.randint(1, 6), lambda st=st, t=t, j=j: (v_slot.__setitem__(st, (t, j)), v_ready[st].arrive()))
            base += n_total
            i += 1

    def consumer(cid):
        first = 1 - cid
        base = turn_base = i = 0
        for (t, _bh, _m, n_full, n_total) in mine:
            qb = i % q_bufs
            q_round = i if PLANT == "q-phase-per-buffer-ignored" else i // q_bufs
            yield lambda: q_bar[qb].passed(q_round & 1)
            if q_buf[qb][cid] != ("Q", t):
                errors.append(f"group {cid} tile {t}: Q buffer {qb} holds {q_buf[qb][cid]}")
            st0 = base % stages
            yield lambda: k_ready[st0].passed((base // stages) & 1)
            if k_slot[st0] != (t, 0):
                errors.append(f"group {cid} tile {t}: K slot {st0} holds {k_slot[st0]}, wanted block 0")
            k_empty[st0].arrive()
            js = list(range(1, n_full)) + list(range(max(n_full, 1), n_total))
            if js != list(range(1, n_total)):
                errors.append(f"tile {t}: key blocks {js}")
            for j in js:
                g = base + j
                st, ph = g % stages, (g // stages) & 1
                pj = g - 1
                pst, pph = pj % stages, (pj // stages) & 1
                yield lambda st=st, ph=ph: k_ready[st].passed(ph)
                yield lambda j=j: turn[cid].passed(((turn_base + j - 1) & 1) ^ first)
                if q_buf[qb][cid] != ("Q", t):
                    errors.append(f"group {cid} tile {t} block {j}: Q buffer {qb} holds {q_buf[qb][cid]}")
                if k_slot[st] != (t, j):
                    errors.append(f"group {cid} tile {t}: K slot {st} holds {k_slot[st]}, wanted block {j}")
                yield lambda pst=pst, pph=pph: v_ready[pst].passed(pph)
                if v_slot[pst] != (t, j - 1):
                    errors.append(f"group {cid} tile {t}: V slot {pst} holds {v_slot[pst]}, wanted block {j - 1}")
                issues.append(cid)
                turn[1 - cid].arrive()
                k_empty[st].arrive()
                yield lambda: True        # the softmax: others may run
                v_empty[pst].arrive()
            last = base + n_total - 1
            lst = last % stages
            yield lambda: v_ready[lst].passed((last // stages) & 1)
            if v_slot[lst] != (t, n_total - 1):
                errors.append(f"group {cid} tile {t}: V slot {lst} holds {v_slot[lst]}, wanted block {n_total - 1}")
            v_empty[lst].arrive()
            q_buf[qb][cid] = ("O-staging", t)
            yield lambda: True            # the TMA store reads the slot
            q_buf[qb][cid] = None
            q_empty[qb].arrive()
            base += 0 if PLANT == "ring-base-not-advanced" else n_total
            turn_base += 0 if PLANT == "turn-base-not-advanced" else n_total - 1
            i += 1

    tick = [0]
    agents = {"loader": loader(), "group 0": consumer(0), "group 1": consumer(1)}
    waiting = {name: next(agent, None) for name, agent in agents.items()}
    while any(w is not None for w in waiting.values()) or in_flight:
        tick[0] += 1
        for due, action in [x for x in in_flight if x[0] <= tick[0]]:
            in_flight.remove((due, action))
            action()
        ready = [n for n, w in waiting.items() if w is not None and w()]
        if not ready:
            if not in_flight:
                return "deadlock: " + ", ".join(n for n, w in waiting.items() if w is not None) + " wait"
            continue
        name = rng.choice(ready)
        waiting[name] = next(agents[name], None)
        if errors:
            return errors[0]
    if any(a == b for a, b in zip(issues, issues[1:])):
        return f"wgmma issues not alternating: {issues[:20]}"
    return None


def plants(runs: int = 2000) -> int:
    global PLANT
    missed = 0
    for PLANT, what in PLANTS.items():
        caught = next((f for f in map(run, range(runs)) if f), None)
        print(f"{PLANT}: {'caught: ' + caught[:160] if caught else 'MISSED'} ({what})")
        missed += caught is None
    PLANT = None
    return 1 if missed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--plants"]:
        sys.exit(plants())
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for seed in range(runs):
        failure = run(seed)
        if failure:
            print("FAIL", failure)
            sys.exit(1)
    print(f"{runs} random runs: no deadlock, every slot and buffer read held what its reader expected, "
          f"wgmma issues alternated")
