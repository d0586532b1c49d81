#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/seed_*): small valid and
nearly valid inputs, built here from the formats' definitions (no Kiln code involved).
Run from anywhere: python3 fuzz/make_seeds.py. Crash inputs found later are added by hand as
corpus/<target>/crash_*."""
import gzip
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(features):
    """features: {name: ("bytes", [b"..."]) | ("float", [1.0]) | ("int64", [3])}"""
    entries = b""
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature = field(1, b"".join(field(1, v) for v in values))
        elif kind == "float":
            feature = field(2, field(1, b"".join(struct.pack("<f", v) for v in values)))
        else:
            feature = field(3, field(1, b"".join(varint(v) for v in values)))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, "seed_" + name), "wb") as f:
        f.write(data)


# ---- tfrecord: a mode byte (0 none, 1 gzip, 2 zlib; +4 skip_corrupt), then the file ----
records = [b"", b"hello", bytes(range(40)), example({"image": ("bytes", [b"\x00\x01\x02\x03"])})]
framed = b"".join(record(r) for r in records)
write("tfrecord", "empty", b"\x00")
write("tfrecord", "one", b"\x00" + record(b"hello"))
write("tfrecord", "four", b"\x00" + framed)
write("tfrecord", "gzip", b"\x01" + gzip.compress(framed, mtime=0))
write("tfrecord", "zlib", b"\x02" + zlib.compress(framed))
bad = bytearray(framed)
bad[20] ^= 0xFF  # corrupt data of the second record
write("tfrecord", "corrupt_skip", b"\x04" + bytes(bad))
write("tfrecord", "truncated", b"\x04" + framed[:-3])

# ---- example: spec entries, then examples separated by ff fe fd ----
SEP = b"\xff\xfe\xfd"
a = example({"a": ("bytes", [b"\x01\x02\x03\x04"]), "b": ("int64", [7])})
b = example({"a": ("bytes", [b"\x05\x06", b"\x07\x08"]), "b": ("int64", [-1]),
             "c": ("float", [0.5, 1.5])})
c = example({"c": ("float", [2.0]), "d": ("int64", [1, 2, 3])})
fixed_a_u8_4 = bytes([0b00101, 0, 1, 4])   # FixedLen 'a' u8 [4]
fixed_b_i64 = bytes([0b00011, 1, 0])        # FixedLen 'b' i64 []
var_c_f32 = bytes([0b00000, 2])             # VarLen 'c' f32
var_d_i64 = bytes([0b00010, 3])             # VarLen 'd' i64
fixed_c_f32_2_default = bytes([0b11001, 2, 1, 2])  # FixedLen 'c' f32 [2], full default
write("example", "fixed", bytes([2]) + fixed_a_u8_4 + fixed_b_i64 + a + SEP + b)
write("example", "varlen", bytes([2]) + var_c_f32 + var_d_i64 + a + SEP + b + SEP + c)
write("example", "default", bytes([1]) + fixed_c_f32_2_default + a + SEP + b + SEP + a)
write("example", "no_spec", bytes([0]) + a + SEP + b + SEP + c)
write("example", "empty_batch", bytes([2]) + fixed_a_u8_4 + var_c_f32)


# ---- idx: the file ----
def idx(code, dims, payload):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


write("idx", "u8", idx(0x08, [2, 3], bytes(range(6))))
write("idx", "i8", idx(0x09, [4], bytes([0, 1, 0x80, 0xFF])))
write("idx", "i16", idx(0x0B, [2], struct.pack(">hh", -2, 300)))
write("idx", "i32", idx(0x0C, [1, 2], struct.pack(">ii", -7, 1 << 20)))
write("idx", "f32", idx(0x0D, [2], struct.pack(">ff", 1.5, -0.25)))
write("idx", "f64", idx(0x0E, [1], struct.pack(">d", 3.0)))
write("idx", "u8_gzip", gzip.compress(idx(0x08, [2, 2, 2], bytes(range(8))), mtime=0))
write("idx", "zero_dim", idx(0x08, [0, 5], b""))
