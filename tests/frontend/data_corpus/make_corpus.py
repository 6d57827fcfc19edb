#!/usr/bin/python3
"""Writes the bad-input corpus of data_test.cc (and seeds for tests/fuzz/): IDX, gzip and CSV
files that must each give a clear error, plus expected.txt: "<file>\t<substring the error must
contain>" per line. Run: /usr/bin/python3 <this file> (from any directory)."""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
cases = []


def write(name, data, expect):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    cases.append((name, expect))


def idx(code, dims, body):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


good = idx(0x08, [2, 3], bytes(range(6)))
write("idx_empty.idx", b"", "truncated header: the file has 0 bytes")
write("idx_truncated_header.idx", b"\x00\x00\x08", "truncated header: the file has 3 bytes")
write("idx_wrong_magic.idx", b"\x01\x02" + good[2:], "bad magic at byte 0")
write("idx_unknown_type.idx", idx(0x07, [2, 3], bytes(6)), "unknown element type code 0x07 at byte 2")
write("idx_zero_rank.idx", idx(0x08, [], b""), "bad number of dims 0 at byte 3")
write("idx_rank_too_big.idx", bytes([0, 0, 8, 200]) + bytes(800), "bad number of dims 200 at byte 3")
write("idx_truncated_dims.idx", good[:9], "truncated header: 2 dims need 12 header bytes")
write("idx_huge_dims.idx", idx(0x08, [16, 0xFFFFFFFF, 0xFFFFFFFF], bytes(64)),
      "dim 1 = 4294967295 at byte 8")
write("idx_huge_first_dim.idx", idx(0x0E, [0xFFFFFFFF] * 4, bytes(16)),
      "dim 0 = 4294967295 at byte 4")
write("idx_overflow_dims.idx", idx(0x08, [0] + [0xFFFFFFFF] * 3, b""),
      "the product of the dims overflows 62 bits at dim 2 = 4294967295 (byte 12)")
write("idx_truncated_data.idx", idx(0x0C, [4, 4], bytes(60)),
      "truncated data or bad dims: dims [4,4] of i32 (dim 1 = 4 at byte 8) need more than the 60 "
      "data bytes after the 12-byte header (the file ends at byte 72)")
write("idx_trailing_bytes.idx", good + b"\x00\x00\x00", "3 trailing bytes after the data, from byte 18")
gz = gzip.compress(idx(0x08, [100, 28], bytes(range(256)) * 10 + bytes(2800 - 2560)), mtime=0)
write("idx_truncated.gz", gz[: len(gz) // 2], "gzip: truncated stream")
corrupt = bytearray(gz)
for i in range(12, 24):
    corrupt[i] ^= 0x5A
write("idx_corrupt.gz", bytes(corrupt), "gzip: corrupt data")
write("idx_gz_trailing.gz", gz + b"junk", "gzip: 4 bytes after the end of the gzip stream, from "
      f"compressed byte {len(gz)}")
write("idx_gz_bad_inside.gz", gzip.compress(b"\x00\x00\x08\x02\x00\x00\x00\x05", mtime=0),
      "(decompressed): idx: truncated header: 2 dims need 12 header bytes")

write("csv_empty.csv", b"", "csv: no header")
write("csv_bad_number.csv", b"a,b,label\n1,2,0\n3,x4,1\n", ":3: csv: column 2 ('b'): cannot parse 'x4'")
write("csv_wrong_columns.csv", b"a,b,label\n1,2,0\n3,4\n", ":3: csv: found 2 columns, expected 3")
write("csv_bad_label.csv", b"a,b,label\n1,2,0.5\n", ":2: csv: column 3 ('label'): label '0.5' is not an integer")
write("csv_empty_field.csv", b"a,b,label\n1,,0\n", ":2: csv: column 2 ('b'): empty field")
write("csv_one_column.csv", b"label\n1\n", ":1: csv: needs at least 2 columns")

with open(os.path.join(HERE, "expected.txt"), "w") as f:
    for name, expect in cases:
        f.write(f"{name}\t{expect}\n")
