"""Resource usage read from a code object itself: registers, spills, scratch.

Triton's CompiledKernel only learns n_regs / n_spills when a driver loads the binary, and there
is no driver on a compile-only machine. The numbers are in the ELF, though:
- cubin (sm90): `.nv.info` carries EIATTR_REGCOUNT and EIATTR_FRAME_SIZE per kernel symbol
  (what ptxas -v prints as "Used N registers" and "N bytes stack frame");
- hsaco (gfx9xx): the NT_AMDGPU_METADATA note is a msgpack map with `.vgpr_count`,
  `.sgpr_count`, `.agpr_count`, `.private_segment_fixed_size`, `.group_segment_fixed_size`.
`spills` follows Triton's own definition on both vendors (driver.c: local/private bytes per
thread divided by 4), so a record reads like what the runtime reports on a GPU.
Standard library only: it runs inside toolchain environments.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIFMT_SVAL = 0x04
NT_AMDGPU_METADATA = 32


@dataclass(frozen=True)
class Resources:
    registers: int            # cuda: registers per thread; amd: VGPRs per lane
    spills: int               # local (cuda) / private (amd) bytes per thread / 4, as Triton reports
    scratch_bytes: int        # the same in bytes
    extra: dict               # vendor-specific: sgprs, agprs, vgpr/sgpr spill counts, lds bytes


class CodeObjectError(ValueError):
    pass


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    info: int


def _sections(blob: bytes) -> list[_Section]:
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        raise CodeObjectError("not a little-endian 64-bit ELF file")
    shoff = struct.unpack_from("<Q", blob, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return blob[start:blob.index(b"\0", start)].decode()

    return [_Section(name(r[0]), r[1], r[4], r[5], r[6], r[7]) for r in raw]


def _symbol_names(blob: bytes, sections: list[_Section]) -> list[str]:
    symtab = next((s for s in sections if s.type == 2), None)   # SHT_SYMTAB
    if symtab is None:
        return []
    strtab = sections[symtab.link]
    names = []
    for i in range(symtab.size // 24):
        st_name = struct.unpack_from("<I", blob, symtab.offset + i * 24)[0]
        start = strtab.offset + st_name
        names.append(blob[start:blob.index(b"\0", start)].decode())
    return names


def cubin_resources(blob: bytes, kernel: str) -> Resources:
    sections = _sections(blob)
    symbols = _symbol_names(blob, sections)
    values: dict[int, int] = {}
    for section in sections:
        if section.name != ".nv.info":
            continue
        data = blob[section.offset:section.offset + section.size]
        pos = 0
        while pos + 4 <= len(data):
            fmt, attr = data[pos], data[pos + 1]
            if fmt == EIFMT_SVAL:
                size = struct.unpack_from("<H", data, pos + 2)[0]
                if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and size == 8:
                    sym, value = struct.unpack_from("<II", data, pos + 4)
                    if sym < len(symbols) and symbols[sym] == kernel:
                        values[attr] = value
                pos += 4 + size
            else:                      # NVAL / BVAL / HVAL: value packed in the 4-byte header
                pos += 4
    if EIATTR_REGCOUNT not in values:
        raise CodeObjectError(f"cubin has no register count for kernel {kernel!r}")
    frame = values.get(EIATTR_FRAME_SIZE, 0)
    return Resources(registers=values[EIATTR_REGCOUNT], spills=frame // 4, scratch_bytes=frame, extra={})


# --------------------------------------------------------------------------- msgpack (subset)
def _unpack(data: bytes, pos: int):
    """Decode one msgpack value at `pos`; returns (value, next position). Covers what the AMDGPU
    metadata note uses: maps, arrays, strings, ints, bools, nil, binary."""
    b = data[pos]
    pos += 1
    if b <= 0x7F:
        return b, pos
    if 0x80 <= b <= 0x8F:
        return _unpack_map(data, pos, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _unpack_array(data, pos, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return data[pos:pos + n].decode(), pos + n
    if b >= 0xE0:
        return b - 0x100, pos
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if b in fixed:
        return fixed[b], pos
    sized = {0xCC: "<B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
             0xCA: ">f", 0xCB: ">d"}
    if b in sized:
        fmt = sized[b]
        return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    lengths = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}
    if b in lengths:
        fmt = lengths[b]
        n = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        raw = data[pos:pos + n]
        return (raw.decode() if b in (0xD9, 0xDA, 0xDB) else raw), pos + n
    if b in (0xDC, 0xDD, 0xDE, 0xDF):
        fmt = ">H" if b in (0xDC, 0xDE) else ">I"
        n = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return (_unpack_array if b in (0xDC, 0xDD) else _unpack_map)(data, pos, n)
    raise CodeObjectError(f"msgpack type byte 0x{b:02x} not handled")


def _unpack_map(data: bytes, pos: int, n: int):
    out = {}
    for _ in range(n):
        key, pos = _unpack(data, pos)
        out[key], pos = _unpack(data, pos)
    return out, pos


def _unpack_array(data: bytes, pos: int, n: int):
    out = []
    for _ in range(n):
        item, pos = _unpack(data, pos)
        out.append(item)
    return out, pos


def amdgpu_metadata(blob: bytes) -> dict:
    for section in _sections(blob):
        if section.type != 7:          # SHT_NOTE
            continue
        pos, end = section.offset, section.offset + section.size
        while pos + 12 <= end:
            namesz, descsz, note_type = struct.unpack_from("<III", blob, pos)
            name = blob[pos + 12:pos + 12 + namesz].rstrip(b"\0").decode()
            desc_at = pos + 12 + ((namesz + 3) & ~3)
            if name == "AMDGPU" and note_type == NT_AMDGPU_METADATA:
                return _unpack(blob[desc_at:desc_at + descsz], 0)[0]
            pos = desc_at + ((descsz + 3) & ~3)
    raise CodeObjectError("hsaco has no NT_AMDGPU_METADATA note")


def hsaco_resources(blob: bytes, kernel: str) -> Resources:
    kernels = amdgpu_metadata(blob).get("amdhsa.kernels", [])
    entry = next((k for k in kernels if k.get(".name") == kernel), None)
    if entry is None:
        raise CodeObjectError(f"hsaco metadata has no kernel {kernel!r} (has {[k.get('.name') for k in kernels]})")
    private = int(entry.get(".private_segment_fixed_size", 0))
    return Resources(
        registers=int(entry[".vgpr_count"]), spills=private // 4, scratch_bytes=private,
        extra={"sgprs": int(entry.get(".sgpr_count", 0)), "agprs": int(entry.get(".agpr_count", 0)),
               "vgpr_spill_count": int(entry.get(".vgpr_spill_count", 0)),
               "sgpr_spill_count": int(entry.get(".sgpr_spill_count", 0)),
               "lds_bytes": int(entry.get(".group_segment_fixed_size", 0))})


def code_object_resources(blob: bytes, backend: str, kernel: str) -> Resources:
    return cubin_resources(blob, kernel) if backend == "cuda" else hsaco_resources(blob, kernel)
