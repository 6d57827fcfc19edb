#!/usr/bin/python3
"""Writes the bad-file corpus of tests/ir/npy_test.cc (and seeds for tests/fuzz/npy_fuzz): .npy
files that must each give a clear error, plus expected.txt: "<file>\t<substring the error must
contain>" per line (every error also names the file). Run: /usr/bin/python3 <this file>."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
cases = []


def write(name, data, expect):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    cases.append((name, expect))


def npy(header, body=b"", major=1, minor=0, pad=True):
    """A .npy file with `header` (a str) as its dict, padded like numpy's writer."""
    h = header.encode("latin1")
    lb = 2 if major == 1 else 4
    if pad:
        h += b" " * ((64 - (8 + lb + len(h) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY" + bytes([major, minor]) + len(h).to_bytes(lb, "little") + h + body


def d(descr="'<f4'", fortran="False", shape="(2, 3)"):
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)


good = npy(d(), bytes(24))
write("empty.npy", b"", "byte 0: truncated: the file has 0 bytes")
write("short_magic.npy", b"\x93NUM", "byte 4: truncated: the file has 4 bytes")
write("bad_magic.npy", b"\x93NUMPX" + good[6:], "byte 5: bad magic")
write("no_version.npy", b"\x93NUMPY\x01", "byte 7: truncated before the version bytes")
write("version4.npy", npy(d(), bytes(24), major=4, pad=False),
      "byte 6: unsupported format version 4.0")
write("minor1.npy", npy(d(), bytes(24), minor=1), "byte 7: unsupported format version 1.1")
write("cut_length.npy", b"\x93NUMPY\x02\x00\x40\x00", "byte 10: truncated: the 4-byte header length")
write("header_too_long.npy", good[:8] + struct.pack("<H", 1000) + good[10:],
      "byte 8: header length 1000 runs past the end of the file")
write("not_a_dict.npy", npy("['descr', '<f4']", bytes(24)), "byte 10: expected the header dict '{'")
write("missing_shape.npy", npy("{'descr': '<f4', 'fortran_order': False, }"),
      "the header dict has no 'shape'")
write("duplicate_key.npy", npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }"),
      "byte 27: key 'descr' appears twice")
write("unknown_key.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}"),
      "byte 64: unknown key 'x'")
write("fortran.npy", npy(d(fortran="True"), bytes(24)), "byte 44: fortran_order True is not supported")
write("object.npy", npy(d(descr="'|O'", shape="(1,)"), bytes(8)),
      "byte 20: descr '|O': object arrays are not supported")
write("structured.npy", npy(d(descr="[('a', '<f4'), ('b', '<i4')]", shape="(1,)"), bytes(8)),
      "byte 20: structured dtypes (a descr list) are not supported")
write("unicode.npy", npy(d(descr="'<U3'", shape="(1,)"), bytes(12)),
      "descr '<U3': string and void (raw/structured) dtypes are not supported")
write("complex64.npy", npy(d(descr="'<c8'"), bytes(48)), "byte 20: descr '<c8': no kiln dtype matches")
write("pipe_f4.npy", npy(d(descr="'|f4'"), bytes(24)), "'|' (not applicable) byte order on a multi-byte type")
write("shape_list.npy", npy(d(shape="[2, 3]"), bytes(24)), "byte 60: shape must be a tuple")
write("negative_dim.npy", npy(d(shape="(-2, 3)"), bytes(24)), "byte 61: negative dimension")
write("int_not_tuple.npy", npy(d(shape="(6)"), bytes(24)), "'(n)' is an integer in Python")
write("huge_dim.npy", npy(d(shape="(99999999999999999999,)")), "byte 61: dimension larger than 2^62")
write("overflow.npy", npy(d(shape="(4611686018427387904, 4611686018427387904)")),
      "byte 10: shape [4611686018427387904,4611686018427387904] of f32 overflows 2^62 bytes")
write("truncated_data.npy", good[:-5], "truncated data: shape [2,3] of f32 needs 24 bytes")
write("trailing.npy", good + b"\x00\x00\x00", "byte 152: 3 trailing bytes after the data")
write("bad_bool.npy", npy(d(descr="'|b1'", shape="(4,)"), b"\x00\x01\x02\x00"),
      "byte 130: bool element 2 is 2")
write("unterminated.npy", npy("{'descr': '<f4}"), "byte 20: unterminated string")
write("junk_after.npy", npy(d() + " x", bytes(24)), "expected only padding")
write("missing_comma.npy", npy("{'descr': '<f4' 'fortran_order': False, 'shape': ()}"),
      "byte 26: expected ',' or '}' in the header dict")

with open(os.path.join(HERE, "expected.txt"), "w") as f:
    for name, expect in cases:
        f.write(f"{name}\t{expect}\n")
