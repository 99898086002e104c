"""ptc tensor files (.bin) read and written with torch: weights of exported
packages (ptc.export), inputs and outputs of ptc-run.

The format (compiler/ir/ir.h): b"PTCT", u32 version 1 or 2, u32 count, then
per tensor u32 name length, name, u8 dtype, u8 ndim, u16 pad, i64 sizes[ndim],
i64 strides[ndim], u64 nbytes, (version 2: zero bytes up to a multiple of 64
from the file's start) the elements in row-major order; finally a u32 CRC-32
(zlib) of everything before it. Version 2 is for files that are mapped rather
than read (an exported package's weights). Works with torch 1.13 and 2.x.
"""
import struct
import zlib

import torch

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
NAMES = ["bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"]
CODE = {dt: i for i, dt in enumerate(DTYPES)}
PTIR_NAME = dict(zip(DTYPES, NAMES))


def _raw_bytes(t):
    """Row-major element bytes of t (any layout)."""
    c = t.detach().cpu().contiguous()
    if c.dtype in (torch.float16, torch.bfloat16):
        c = c.view(torch.int16)
    elif c.dtype == torch.bool:
        c = c.to(torch.uint8)
    return c.numpy().tobytes() if c.numel() else b""


ALIGN = 64  # version 2's alignment of each tensor's bytes


def write_tensors(path, tensors, aligned=False):
    """tensors: list of (name, tensor) or a dict name -> tensor; aligned
    writes version 2."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    out = bytearray(b"PTCT")
    out += struct.pack("<II", 2 if aligned else 1, len(items))
    for name, t in items:
        nb = name.encode()
        out += struct.pack("<I", len(nb)) + nb
        out += struct.pack("<BBH", CODE[t.dtype], t.dim(), 0)
        out += struct.pack("<%dq" % t.dim(), *t.shape)
        out += struct.pack("<%dq" % t.dim(), *t.stride())
        raw = _raw_bytes(t)
        out += struct.pack("<Q", len(raw))
        if aligned:
            out += bytes(-len(out) % ALIGN)
        out += raw
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(out)


def read_tensors(path):
    """-> list of (name, tensor), contiguous CPU tensors."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"PTCT":
        raise ValueError("%s: not a ptc tensor file" % path)
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if crc != zlib.crc32(data[:-4]) & 0xffffffff:
        raise ValueError("%s: checksum mismatch" % path)
    version, count = struct.unpack_from("<II", data, 4)
    pos, result = 12, []
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + nlen].decode()
        pos += nlen
        code, ndim, _ = struct.unpack_from("<BBH", data, pos)
        pos += 4
        sizes = struct.unpack_from("<%dq" % ndim, data, pos)
        pos += 16 * ndim  # sizes and strides
        (nbytes,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if version == 2:
            pos += -pos % ALIGN
        raw = bytearray(data[pos:pos + nbytes])
        pos += nbytes
        dt = DTYPES[code]
        store = {torch.float16: torch.int16, torch.bfloat16: torch.int16,
                 torch.bool: torch.uint8}.get(dt, dt)
        if nbytes:
            t = torch.frombuffer(raw, dtype=store).clone()
        else:
            t = torch.empty(0, dtype=store)
        if store is not dt:
            t = t.view(dt) if dt is not torch.bool else t.to(torch.bool)
        result.append((name, t.reshape(sizes)))
    return result
