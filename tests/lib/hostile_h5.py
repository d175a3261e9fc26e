"""Crafted HDF5 files that break libhdf5 1.10.8 (Debian 12's), for the tests of posenc's
HDF5 sandbox.

Each file is an h5py-written seed of the fuzz corpus (tests/fuzz/corpus/hdf5/, made by
tests/fuzz/make_seeds.py) with a few bytes changed. The changes come from inputs that
a libFuzzer harness calling libhdf5 in-process found, reduced to the bytes that still
produce the effect. What each does to libhdf5 when read directly:

- list_crash: segfault while visiting the links of the file (listing datasets);
- open_crash: segfault while opening dataset /a/d;
- attr_hang: an endless loop reading the attributes of /a/d (the data read fine);
- enum_alloc: an enum type of /m whose member count makes libhdf5 allocate and copy
  gigabytes (a >1 GiB memcpy past its buffer under AddressSanitizer);
- type_precision: the 1-byte integers of /i declare 16392 bits of precision, and
  libhdf5 converts them by reading past each element (values change from read to read);
- chunk_overread: the chunks of the fixed-size /c are 8388612 elements long for 12,
  and libhdf5 reads past the stored chunk (garbage values, as h5py and h5dump show).
"""
import hashlib
import os

SOURCE_DIR = os.environ.get(
    "POSENC_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
SEEDS = os.path.join(SOURCE_DIR, "tests", "fuzz", "corpus", "hdf5")

# Seed files and their digests: a seed written differently (another h5py) would move
# the bytes the edits apply to.
SEED_MD5 = {
    "attrs_links": "a5cc8bb2e1b093267eba6c8abee1c932",
    "bool_int": "c7157fcecdf15f6b2868c91662b3f476",
    "compact_fletcher": "e0cb8ab0aeb6ab2f30439fe5591e3828",
}

_HEADER_EDITS = [(1869, 1873, bytes.fromhex("07")), (1880, 1881, b""),
                 (1882, 1882, bytes.fromhex("0000fffc"))]

# name: (seed, [(start, end, replacement)]) — seed[start:end] becomes replacement.
EDITS = {
    "list_crash": ("attrs_links", _HEADER_EDITS + [(6835, 6836, bytes.fromhex("54"))]),
    "attr_hang": ("attrs_links", _HEADER_EDITS + [
        (2458, 2498, b""), (6153, 6153, bytes.fromhex("9e") + bytes(39))]),
    "open_crash": ("attrs_links", [
        (2063, 2063, bytes.fromhex("10")), (2064, 2065, b""),
        (3896, 3896, bytes.fromhex("95") + bytes(226) + bytes.fromhex("40")),
        (4957, 4957, bytes.fromhex("fd")), (5574, 5574, bytes.fromhex("0f3601003060")),
        (6182, 6421, bytes.fromhex("7374796c")), (6560, 6562, b""),
        (6563, 6564, bytes.fromhex("74796c"))]),
    "enum_alloc": ("bool_int", [(863, 864, bytes.fromhex("2a"))]),
    "type_precision": ("bool_int", [(1467, 1468, bytes.fromhex("40"))]),
    "chunk_overread": ("compact_fletcher", [(957, 958, bytes.fromhex("80"))]),
}


def hostile_bytes(name):
    """The bytes of the crafted file `name` (a key of EDITS)."""
    seed_name, edits = EDITS[name]
    with open(os.path.join(SEEDS, seed_name), "rb") as f:
        seed = f.read()
    digest = hashlib.md5(seed).hexdigest()
    if digest != SEED_MD5[seed_name]:
        raise RuntimeError(f"seed {seed_name} changed (md5 {digest}); the edits no longer apply")
    out, pos = bytearray(), 0
    for start, end, new in sorted(edits, key=lambda e: e[0]):
        out += seed[pos:start] + new
        pos = end
    return bytes(out + seed[pos:])


def write_hostile(name, path):
    with open(path, "wb") as f:
        f.write(hostile_bytes(name))
    return path
