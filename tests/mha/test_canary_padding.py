"""Canary padding around every tensor a launch touches: one small problem per variant class,
forward and backward through the public functions, checked for loads and stores outside its
tensors.

Every input (q, k, v, dO, sink, cu_seqlens) is a view inside a larger buffer, and so is every
tensor the launcher allocates (out, lse, the warp-specialized forward's lse copies, delta,
dq/dk/dv, the dense problems' placeholder cu_seqlens): mha.launch gets a `torch` whose
empty/empty_like allocate that way. The padding holds CANARY, NaNs with payloads of their own.
A load from the padding brings a NaN into the kernel, and it reaches the results (a masked
score drops it, but the P @ V or dS @ K product right after multiplies it by zero, which keeps
it NaN): the results are compared with the float64 reference. A store to the padding changes
its bits: every buffer's padding is compared with CANARY bit for bit afterwards, and the inputs'
whole buffers with their bits as made. A spy on mha.launch._launch checks that every tensor
argument of every kernel is one of these views, so a tensor that reaches a kernel by another
way fails the test rather than escaping it.

Values miss a stray load whose value a select drops before any product: an lse or delta read
past the end is masked out of P, and a tile of an empty sequence loads a query row it never
uses. So under the Triton interpreter the test also checks addresses: every load and store
passes through two methods of the interpreter's builder, and every address it touches with its
mask set must be an element of one of the views. On a GPU the values alone speak.

Where the padding sits is where a wrong index lands. A tile that runs past the end of a sequence
reads the next rows of its tensor: in a (batch, seqlen, heads, head dim) tensor the next batch
entry's first positions, in a packed (total, heads, head dim) one the next sequence's. So the
sequence dimension is padded by a whole tile (the largest block of the problem's kernels) before
and after every batch entry; in packed tensors, spacer sequences lie between the real ones (see
VARLEN). The head dim is padded to at least its widest tile, so columns past it read padding
rather than the next head; batch and head dimensions get one padding slot on each side.
Sequence lengths are multiples of no block size, and Sq != Sk, so every kernel has a ragged
last tile on both sides.
"""
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
import triton

from cases import LEAVES, Case, run_dense, run_varlen
from mha import launch
from mha.arch import current_arch, interpreter_active
from mha.kernels.forward_ws import attn_fwd_ws

DTYPE = torch.float16
# The padding's bits: quiet NaNs with payloads of their own (arithmetic on finite values makes
# the default NaN), and integer patterns for the index tensors. Inputs' padding and the
# launcher's differ, also once converted between float16 and float32: a NaN loaded from an
# input's padding keeps its payload through the arithmetic, and stored into an output's padding
# it must still differ from what was there.
CANARY = {"input": {torch.float16: 0x7E5A, torch.float32: 0x7FC05A5A, torch.int32: 0x7FC05A5A},
          "launcher": {torch.float16: 0x7E3C, torch.float32: 0x7FC0DEAD, torch.int32: 0x7FC0DEAD,
                       torch.int8: 0x5A}}
BITS = {torch.float16: torch.int16, torch.float32: torch.int32, torch.int32: torch.int32, torch.int8: torch.int8}
# Padding of a 1-D buffer (sink, cu_seqlens, the warp-specialized forward's descriptor scratch
# on a GPU): 256 bytes each side, which keeps the allocator's alignment.
FLAT_PAD_BYTES = 256


def _head_width(d: int) -> int:
    """Padded width of a head dim: at least its widest tile (the next power of two), at least 16
    more than d, a multiple of 16 elements (the warp-specialized forward's descriptors need rows
    of 16-byte multiples; Triton 3.4's interpreter counts the 16 in elements)."""
    return -(-max(triton.next_power_of_2(d), d + 16) // 16) * 16


@dataclass
class _Buffer:
    name: str
    buf: torch.Tensor
    view: torch.Tensor
    index: tuple
    canary: int
    made: torch.Tensor | None = None    # an input's bits right after it was made
    uses: list = field(default_factory=list)   # kernel arguments it was passed as

    def __str__(self):
        return f"{self.name}, passed as {', '.join(self.uses) or 'no kernel argument'}"


@dataclass
class Canaries:
    """The padded buffers of one call. `rows`: the padding of a sequence dimension, one tile."""
    device: str
    rows: int
    varlen: bool
    spacer_rows: dict = field(default_factory=dict)     # input name -> rows of spacer sequences
    buffers: list = field(default_factory=list)
    kernel: str | None = None       # the kernel running now, while a spied launch runs
    strays: list = field(default_factory=list)      # (kernel, access, count, first's buffer, its index)
    _map: tuple | None = None

    def make(self, name, shape, dtype, seq_dim, pad_head_dim, values=None):
        shape = tuple(shape)
        pads = []
        for dim, size in enumerate(shape):
            if len(shape) == 1:
                pads.append((FLAT_PAD_BYTES // dtype.itemsize,) * 2)
            elif dim == seq_dim:
                pads.append((self.rows, self.rows))
            elif dim == len(shape) - 1:
                pads.append((0, _head_width(size) - size if pad_head_dim else 0))
            else:
                pads.append((1, 1))
        canary = CANARY["launcher" if values is None else "input"][dtype]
        buf = torch.empty([size + a + b for size, (a, b) in zip(shape, pads)], dtype=dtype, device=self.device)
        buf.view(BITS[dtype]).fill_(canary)
        index = tuple(slice(a, a + size) for size, (a, _) in zip(shape, pads))
        view = buf[index]
        made = None
        if values is not None:
            view.copy_(values)
            if name in self.spacer_rows:
                view.view(BITS[dtype])[self.spacer_rows[name]] = canary
            made = buf.view(BITS[dtype]).clone()
        self.buffers.append(_Buffer(name, buf, view, index, canary, made))
        return view

    def place(self, name, t):
        """cases.run_dense's `place`: q, k, v, dO (sequence dimension third from last, head dim
        padded), sink and cu_seqlens (1-D) inside padding."""
        view = self.make(name, t.shape, t.dtype, t.dim() - 3, True, values=t)
        if name in LEAVES:
            view.requires_grad_(True)
        return view

    def allocate(self, shape, dtype):
        """A tensor mha.launch asked for, padded by what its dimensions are: the problem's dtype,
        (batch,) seqlen, heads, head dim (out, dq, dk, dv); float32 one rank less, (batch,)
        heads, seqlen (lse, delta); float32 of the same rank, (batch,) heads, seqlen, copies
        (attn_fwd_ws's lse, whose kernel indexes seqlen x copies as one row: only the sequence
        dimension may be padded there)."""
        shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
        data_rank = 3 if self.varlen else 4
        name = f"mha.launch's {dtype} {shape}"
        if len(shape) == 1:
            return self.make(name, shape, dtype, 0, False)
        if dtype == DTYPE and len(shape) == data_rank:
            return self.make(name, shape, dtype, len(shape) - 3, True)
        if dtype == torch.float32 and len(shape) == data_rank - 1:
            return self.make(name, shape, dtype, len(shape) - 1, False)
        if dtype == torch.float32 and len(shape) == data_rank:
            return self.make(name, shape, dtype, len(shape) - 2, False)
        raise AssertionError(f"mha.launch allocated a tensor this test does not know how to pad: {name}")

    def claim(self, t, argument):
        """Record a kernel argument as a use of the buffer whose view it is (messages name them)."""
        for b in self.buffers:
            if b.view.data_ptr() == t.data_ptr() and b.view.shape == t.shape and b.view.stride() == t.stride():
                b.uses.append(argument)
                return
        raise AssertionError(f"{argument}: a tensor {tuple(t.shape)} that is not inside canary padding reached "
                             "a kernel")

    def audit(self, access, ptrs, mask):
        """Under the interpreter: every address `access` ("load", "store") touches with its mask
        set must be an element of one of the views. Vectorized over the access: the buffer an
        address falls in by its base, then whether that element lies inside the view."""
        if self.kernel is None:
            return
        addrs = np.asarray(ptrs, dtype=np.uint64)
        addrs = addrs.ravel() if mask is None else addrs[np.broadcast_to(mask, addrs.shape)]
        if not addrs.size:
            return
        if self._map is None or self._map[0] != len(self.buffers):
            order = sorted(range(len(self.buffers)), key=lambda i: self.buffers[i].buf.data_ptr())
            inside = []
            for i in order:
                b = self.buffers[i]
                flags = torch.zeros(b.buf.shape, dtype=torch.bool)
                flags[b.index] = True
                inside.append(flags.flatten().numpy())
            self._map = (len(self.buffers), np.array(order),
                         np.array([self.buffers[i].buf.data_ptr() for i in order], dtype=np.uint64),
                         np.array([self.buffers[i].buf.nbytes for i in order], dtype=np.uint64),
                         np.array([self.buffers[i].buf.element_size() for i in order], dtype=np.uint64),
                         np.cumsum([0] + [len(f) for f in inside[:-1]]), np.concatenate(inside))
        _, order, bases, sizes, itemsizes, starts, inside = self._map
        slot = np.maximum(np.searchsorted(bases, addrs, side="right") - 1, 0)
        offset = addrs - bases[slot]            # wraps for an address below every buffer
        ok = (addrs >= bases[slot]) & (offset < sizes[slot])
        element = np.where(ok, offset // itemsizes[slot], 0).astype(np.int64)
        ok &= inside[starts[slot] + element]
        if not ok.all():
            first = np.flatnonzero(~ok)[0]
            b = self.buffers[order[slot[first]]] if addrs[first] >= bases[slot[first]] and \
                offset[first] < sizes[slot[first]] else None
            where = None
            if b is not None:
                coords = np.unravel_index(element[first], tuple(b.buf.shape))
                where = tuple(int(c) - s.start for c, s in zip(coords, b.index))
            self.strays.append((self.kernel, access, int((~ok).sum()), b, where))

    def assert_no_strays(self):
        strays = [f"{kernel} {access}: {n} addresses outside the tensors, the first "
                  + (f"in the padding of {b} at view index {where}" if b else "in no buffer of the call")
                  for kernel, access, n, b, where in self.strays[:5]]
        assert not strays, "\n".join(strays)

    def check(self):
        """No access left the views (interpreter), no store left a tensor: padding bits as
        filled, inputs' buffers as made."""
        self.assert_no_strays()
        for b in self.buffers:
            bits = b.buf.view(BITS[b.buf.dtype])
            if b.made is not None:
                written = (bits != b.made).sum().item()
                assert written == 0, f"{b}: {written} elements of an input's buffer were written"
                continue
            outside = torch.ones(bits.shape, dtype=torch.bool, device=bits.device)
            outside[b.index] = False
            written = (bits[outside] != b.canary).sum().item()
            assert written == 0, f"{b}: {written} elements of the padding around it were written"


class _CanaryTorch:
    """torch for mha.launch: every tensor it allocates lies inside canary padding."""

    def __init__(self, canaries):
        self._canaries = canaries

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, size, dtype=None, device=None):
        return self._canaries.allocate(size, dtype or torch.get_default_dtype())

    def empty_like(self, t):
        return self._canaries.allocate(t.shape, t.dtype)


def _install(monkeypatch, canaries, audit=True):
    """Route mha.launch's allocations into canaries, spy on its launches and, under the
    interpreter (and `audit`), on every load and store they make: a launch that strays fails as
    it returns, before any result is compared. Returns the specs launched, in order."""
    launched = []
    real = launch._launch

    def spy(spec, grid, args):
        params = [n for n, t in spec.signature.items() if t != "constexpr"]
        for name, arg in zip(params, args):
            if isinstance(arg, torch.Tensor):
                canaries.claim(arg, f"{spec.name}.{name}")
        launched.append(spec)
        canaries.kernel = spec.name
        try:
            real(spec, grid, args)
        finally:
            canaries.kernel = None
        canaries.assert_no_strays()

    monkeypatch.setattr(launch, "torch", _CanaryTorch(canaries))
    monkeypatch.setattr(launch, "_launch", spy)
    if audit and interpreter_active():
        _audit_interpreter(monkeypatch, canaries)
    return launched


def _audit_interpreter(monkeypatch, canaries):
    """Every load and store of the Triton interpreter, pointer or descriptor, ends in these two
    builder methods (Triton 3.4 and 3.8; an unmasked access passes an all-true mask)."""
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    load, store = builder.create_masked_load, builder.create_masked_store

    def audited_load(ptrs, mask, *args, **kwargs):
        canaries.audit("load", ptrs.data, None if mask is None else mask.data)
        return load(ptrs, mask, *args, **kwargs)

    def audited_store(ptrs, value, mask, *args, **kwargs):
        canaries.audit("store", ptrs.data, None if mask is None else mask.data)
        return store(ptrs, value, mask, *args, **kwargs)

    monkeypatch.setattr(builder, "create_masked_load", audited_load)
    monkeypatch.setattr(builder, "create_masked_store", audited_store)


def _specs(device, dqk, dv, causal, window, sink, dropout_p, varlen, config):
    problem = launch.Problem(dtype=launch.DTYPE_NAMES[DTYPE], dqk=dqk, dv=dv, causal=causal, window=window,
                             has_sink=sink, dropout=dropout_p > 0, varlen=varlen)
    return launch.kernel_specs(problem, current_arch(device), config)


def _tiles(specs):
    """Every block size along a sequence of the problem's kernels."""
    return {v for s in specs.values() for k, v in s.constexprs.items() if k in ("BLOCK_M", "BLOCK_N")}


def _assert_ragged(lengths, tiles):
    for n in lengths:
        assert all(n % t for t in tiles), f"length {n} fills whole tiles of {sorted(tiles)}: no ragged last tile"


def _assert_ran(launched, backward, ws):
    names = [s.name for s in launched]
    want = {"fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq"} if backward else {"fwd"}
    assert set(names) == want, names
    assert all((s.fn is attn_fwd_ws) is ws for s in launched if s.name == "fwd"), \
        "the warp-specialized forward did not run (inputs it cannot read run the plain one)"


# num_warps 4: the only count the Hopper pass acts on (as test_warp_specialized).
WS = {"forward": {"warp_specialize": True, "num_warps": 4}}

# One problem per variant class. Lengths: a full tile and a ragged one of the interpreter's
# 32-row query tiles, more than one 16-key block; causal and sink with Sq > Sk, whose first rows
# see no key (lse -inf, or the sink).
DENSE = {
    "plain": (Case(2, 37, 45, 2, 1, 24, 24), None, True),
    "causal": (Case(1, 45, 37, 2, 1, 24, 24, causal=True), None, True),
    "window": (Case(1, 37, 45, 2, 1, 24, 24, window=(9, 5)), None, True),
    "sink": (Case(1, 45, 37, 2, 1, 24, 24, causal=True, sink=True), None, True),
    "dropout": (Case(1, 21, 35, 1, 1, 24, 24, dropout_p=0.25), None, True),
    # The pe bucket (Dqk > Dv): q/k's head dim split into 128 + 16 columns (launch.head_split),
    # the tail block masked, as the 192/128 one is split into 128 + 64.
    "pe": (Case(1, 37, 45, 2, 1, 136, 40), None, True),
    "ws": (Case(2, 37, 45, 2, 1, 24, 24), WS, False),
}


@pytest.mark.parametrize("name", list(DENSE), ids=list(DENSE))
def test_dense_launches_stay_inside_their_tensors(name, device, monkeypatch):
    case, config, backward = DENSE[name]
    specs = _specs(device, case.dqk, case.dv, case.causal, case.window, case.sink, case.dropout_p, False, config)
    tiles = _tiles(specs)
    _assert_ragged((case.seqlen_q, case.seqlen_k), tiles)
    canaries = Canaries(device, max(tiles), varlen=False)
    launched = _install(monkeypatch, canaries)
    run_dense(case, DTYPE, device, backward=backward, config=config, place=canaries.place)
    canaries.check()
    _assert_ran(launched, backward, ws=config is WS)


# A packed problem, (query rows, key rows) per sequence; SPACER is a spacer's one tile of rows.
# A tile that runs out of a sequence reads the next rows of the packed tensor, the next
# sequence's: spacers lie there, sequences whose rows hold CANARY, so such a load reads NaN as
# it would from a dense tensor's padding. A spacer of queries has no key, one of keys no query,
# so every result is still defined (a query without a key gets output 0, lse -inf and dq 0; a
# key without a query dk = dv = 0) and the whole packed result is compared with the reference
# (which computes from finite spacer rows). The real sequences are ragged, Sq != Sk; the one of
# 37 queries has Sq > Sk, so its first rows see no key under the causal mask, and its queries
# end the packed ones, so a store past it lands in padding (a store into a spacer is overwritten
# by the spacer's own). The last sequence has keys and no query: it starts at the end of the
# packed queries, where a tile that loaded a row of it would read past them.
SPACER = "spacer"
VARLEN = [(13, 35), (SPACER, 0), (0, SPACER), (37, 21), (0, SPACER), (0, 9)]


def _packed(layout, rows):
    """(lens_q, lens_k, spacer rows of q, of k) of a layout whose spacers have `rows` rows."""
    lens, spacers = ([], []), ([], [])
    for entry in layout:
        for side, n in enumerate(entry):
            start = sum(lens[side])
            if n == SPACER:
                n = rows
                spacers[side].append(torch.arange(start, start + n))
            lens[side].append(n)
    return lens[0], lens[1], torch.cat(spacers[0]), torch.cat(spacers[1])


VARLEN_RUNS = {"causal": (None, True), "ws_causal": (WS, False)}


@pytest.mark.parametrize("name", list(VARLEN_RUNS), ids=list(VARLEN_RUNS))
def test_varlen_launches_stay_inside_their_tensors(name, device, monkeypatch):
    config, backward = VARLEN_RUNS[name]
    heads_q, heads_k, dqk, dv = 2, 1, 24, 24
    specs = _specs(device, dqk, dv, True, (-1, -1), False, 0.0, True, config)
    tiles = _tiles(specs)
    _assert_ragged([n for entry in VARLEN for n in entry if n not in (0, SPACER)], tiles)
    lens_q, lens_k, spacer_q, spacer_k = _packed(VARLEN, max(tiles))
    canaries = Canaries(device, max(tiles), varlen=True)
    canaries.spacer_rows.update(q=spacer_q, dout=spacer_q, k=spacer_k, v=spacer_k)
    launched = _install(monkeypatch, canaries)
    run_varlen(lens_q, lens_k, heads_q, heads_k, dqk, dv, DTYPE, device, causal=True, backward=backward,
               config=config, place=canaries.place)
    canaries.check()
    _assert_ran(launched, backward, ws=config is WS)


# The harness itself, told of one row more than the tensors hold: a key row read past the end
# of K and V, a query row stored past the end of out and lse. Seen by the values (NaN in every
# output; the canary's bits changed) and, under the interpreter, by the addresses.
HARNESS_FAULTS = {
    "key_read_past_the_end": ((0, 1), {"values": "out: inf/nan pattern differs",
                                       "addresses": r"fwd load: .* padding of k, passed as fwd\.K "}),
    "query_store_past_the_end": ((1, 0), {"values": "elements of the padding around it were written",
                                          "addresses": r"fwd store: .* passed as fwd\.Out "}),
}


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("mechanism", ["values", "addresses"])
@pytest.mark.parametrize("fault", list(HARNESS_FAULTS))
def test_the_harness_sees_a_launch_one_row_past_its_sequence(fault, mechanism, device, monkeypatch):
    if mechanism == "addresses" and not interpreter_active():
        pytest.skip("only the Triton interpreter shows each access's addresses")
    (extra_q, extra_k), caught = HARNESS_FAULTS[fault]
    case = Case(1, 37, 45, 1, 1, 24, 24)
    specs = _specs(device, case.dqk, case.dv, False, (-1, -1), False, 0.0, False, None)
    canaries = Canaries(device, max(_tiles(specs)), varlen=False)
    _install(monkeypatch, canaries, audit=mechanism == "addresses")
    monkeypatch.setattr(launch.Geometry, "kernel_seqlens",
                        lambda geo: (geo.seqlen_q + extra_q, geo.seqlen_k + extra_k))
    with pytest.raises(AssertionError, match=caught[mechanism]):
        run_dense(case, DTYPE, device, backward=False, place=canaries.place)
        canaries.check()
