#!/usr/bin/python3
"""Writes the seed corpus of the fuzz harnesses into corpus/<harness>/ next to this
script: small NPY files from numpy.save, HDF5 files from h5py, and text, references
and option values in the layout each harness reads (see the comment at the top of each
fuzz_<name>.cpp). Deterministic: running it again gives the same files.

    /usr/bin/python3 tests/fuzz/make_seeds.py
"""
import io
import os
import shutil

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def npy_bytes(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def npy_seeds():
    r = np.arange(12, dtype=np.float64) * 0.37 - 1.5
    arrays = {
        "f32_2d": r.astype(np.float32).reshape(3, 4),
        "f16_1d": r.astype(np.float16),
        "f64_be": r.astype(">f8").reshape(2, 6),
        "fortran": np.asfortranarray(r.reshape(3, 4)),
        "bool": np.array([True, False, True]),
        "i64_scalar": np.array(-(2**62), dtype=np.int64),
        "u8": np.arange(7, dtype=np.uint8),
        "empty": np.zeros((0, 4), np.float32),
        "unit_lead": r[:10].astype(np.float32).reshape(1, 5, 1, 2),
        "i16_3d": np.arange(24, dtype=np.int16).reshape(2, 3, 4),
    }
    for pattern, (name, a) in enumerate(arrays.items()):
        put("npy", name, bytes([pattern]) + npy_bytes(a))
    put("npy", "v2", bytes([1]) + npy_bytes(r.astype(np.float32), (2, 0)))
    put("npy", "v3", bytes([2]) + npy_bytes(r.astype(np.float32), (3, 0)))
    # A header claiming far more data than follows (the stream must not allocate it).
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        b, {"descr": "<f2", "fortran_order": False, "shape": (1, 2**27, 1, 2)})
    put("npy", "lying_header", bytes([3]) + b.getvalue() + bytes(8))
    # fp8 as np.save writes ml_dtypes' float8 arrays ('<V1'), numpy's own void ('|V1'),
    # early ml_dtypes' float8_e5m2 ('<f1'), and a void of another size (refused).
    codes = np.arange(0, 256, 16, dtype=np.uint8).reshape(4, 4)
    for name, descr, data in [("fp8_v1", "<V1", codes), ("void_v1", "|V1", codes),
                              ("fp8_f1", "<f1", codes), ("void_v2", "<V2", codes[:2])]:
        b = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            b, {"descr": descr, "fortran_order": False, "shape": data.shape})
        put("npy", name, bytes([len(name)]) + b.getvalue() + data.tobytes())


def text_seeds():
    csv, tsv, js = 0, 1, 2
    put("text", "csv_2d", bytes([csv]) + b"1,2.5,-3\n4e10,nan,-inf\n")
    put("text", "csv_comment", bytes([csv]) + b"# x\n\n0.1\n-0\n1e-320\n")
    put("text", "tsv", bytes([tsv]) + b"1\t2\n3\t4\n")
    put("text", "json_obj", bytes([js]) + b'{"shape": [2, 2], "dtype": "f32", "data": [[1, 2.5], ["NaN", "-Infinity"]]}')
    put("text", "json_flat", bytes([js]) + b'{"shape": [2, 3], "dtype": "i64", "data": [1, 2, 3, 4, 5, -9223372036854775808]}')
    put("text", "json_list", bytes([js]) + b"[[0.1, -0.0], [1e300, 5e-324]]")
    put("text", "json_bool", bytes([js]) + b'{"dtype": "bool", "data": [true, false]}')
    put("text", "json_u64", bytes([js]) + b'{"dtype": "u64", "data": [18446744073709551615, 0]}')
    put("text", "json_f16", bytes([js]) + b'{"dtype": "f16", "shape": [], "data": 65504}')
    # nested far deeper than any tensor (refused as it is parsed)
    put("text", "json_deep", bytes([js]) + b"[" * 5000 + b"]" * 5000)
    put("text", "json_deep_obj", bytes([js]) + b'{"data": ' + b"[" * 9 + b"1" + b"]" * 9 + b"}")


def hdf5_seeds():
    tmp = os.path.join(CORPUS, "tmp.h5")
    r = np.arange(12, dtype=np.float64) * 0.37 - 1.5

    def make(name, fill):
        with h5py.File(tmp, "w") as f:
            fill(f)
        with open(tmp, "rb") as f:
            put("hdf5", name, f.read())
        os.remove(tmp)

    make("f32", lambda f: f.create_dataset("x", data=r.astype(np.float32).reshape(3, 4)))
    make("gzip", lambda f: f.create_dataset("g/x", data=r.reshape(3, 4), chunks=(2, 2),
                                            compression="gzip", shuffle=True))
    make("f16_be", lambda f: (f.create_dataset("h", data=r.astype(np.float16)),
                              f.create_dataset("b", data=r.astype(">f8"))))
    make("bool_int", lambda f: (f.create_dataset("m", data=np.array([True, False])),
                                f.create_dataset("i", data=np.arange(5, dtype=np.int8))))
    make("scalar_empty", lambda f: (f.create_dataset("s", data=np.float64(2.5)),
                                    f.create_dataset("e", data=np.zeros((0, 3), np.float32))))

    def attrs(f):
        d = f.create_dataset("a/d", data=r[:4].astype(np.float32).reshape(1, 4, 1))
        d.attrs["style"] = "neox"
        d.attrs["base"] = 10000.0
        d.attrs["dims"] = np.array([1, 2, 3])
        d.attrs["n"] = np.int64(7)
        f["link"] = h5py.SoftLink("/a/d")
        f["ext"] = h5py.ExternalLink("other.h5", "/x")
    make("attrs_links", attrs)
    make("compact_fletcher", lambda f: f.create_dataset(
        "c", data=r.astype(np.float32), chunks=(4,), fletcher32=True))


def ref_seeds():
    for i, s in enumerate([b"x.npy", b"x.h5:/g/d", b"-", b"dir:x.h5:/a/b", b"x\x00h5\x00/data",
                           b"f.hdf5:", b"x.npz", b"x.csv\x00json", b"a.H5:g//d/", b"x.txt"]):
        put("ref", f"ref{i}", s)


def option_seeds():
    seeds = [
        (0, b"\x02\x08|0,:,1::2"), (0, b"\x04\x03\x05|...,-1"), (0, b"\x01|::-9223372036854775808"),
        (0, b"\x03\x03|[1:-1, ::9223372036854775807]"),
        (1, b"128,0"), (1, b"-1"), (1, b"9007199254740992,-1"),
        (2, b"512M"), (2, b"1.5GiB"), (2, b"18446744073709551616"),
        (3, b"1.0, 1.1,2"), (3, b"1e308,4"),
        (4, b"+010"), (4, b"-9223372036854775808"), (4, b"18446744073709551615"),
        (5, b"1e-3"), (5, b"1e400"), (6, b"16,24,24"),
        (7, b'{"rope_theta": 500000, "head_dim": 128, "rope_scaling": {"rope_type": "yarn", '
            b'"factor": 4, "original_max_position_embeddings": 4096, "beta_fast": 0}}'),
        (7, b'{"hidden_size": 4096, "num_attention_heads": 32, "rope_scaling": {"type": "llama3",'
            b' "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, '
            b'"original_max_position_embeddings": 8192}}'),
        (7, b'{"partial_rotary_factor": 0.5, "rope_scaling": {"type": "longrope", '
            b'"short_factor": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], '
            b'"long_factor": [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2], '
            b'"original_max_position_embeddings": 4096}, "max_position_embeddings": 131072}'),
        # index lists: outer indexing, negatives, repeats, empty, whole-text brackets
        (0, b"\x03\x08\x05|1,[1,7,-8,1],0"), (0, b"\x04\x04|[[3,0,-1]]"),
        (0, b"\x02\x03|[],[0,2]"), (0, b"\x03\x03|[0,[1,2]]"),
        (0, b"\x02|[-9223372036854775808,0]"), (0, b"\x02\x02|[0,[1,,2]"),
        # hostile configs: nesting past the depth limit (once a stack overflow), and
        # values out of range (InputError naming the key)
        (7, b'{"a":' * 5000 + b"1" + b"}" * 5000), (7, b"[" * 5000 + b"]" * 5000),
        (7, b'{"rope_theta": 0}'), (7, b'{"partial_rotary_factor": 1.5}'),
        (7, b'{"rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": -1, '
            b'"original_max_position_embeddings": 32}}'),
        (7, b'{"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 8, '
            b'"high_freq_factor": 4, "original_max_position_embeddings": 32}}'),
        (7, b'{"rope_scaling": {"rope_type": "mrope", "mrope_section": [2, 2, 2]}}'),
        # RoPE layouts and generated coordinates
        (8, b"grid:2,16,16"), (8, b"centres:37,37"), (8, b"grid:2147483648,1,1,1,1,1,1,1,1"),
        (9, b"sections:16,8,8"), (9, b"interleaved:24,4,4"), (9, b"chunks:3"), (9, b"even-odd"),
        (9, b"chunks:99999999999999999999"), (10, b"2pi"), (10, b"-0"), (10, b"1e308"),
        # ERNIE-4.5-VL and HunYuan-VL layouts, from options and from configs
        (9, b"ernie-vl:8,8,16"), (9, b"ernie-vl:8,6,18"), (9, b"xdrope:8,8,8,8"),
        (9, b"xdrope:32"),
        (7, b'{"model_type": "ernie4_5_vl_moe", "text_config": {"model_type": '
            b'"ernie4_5_vl_moe_text", "rope_parameters": {"rope_type": "default", '
            b'"rope_theta": 500000, "mrope_section": [8, 8, 16]}}}'),
        (7, b'{"model_type": "hunyuan_vl", "head_dim": 64, "rope_scaling": {"type": "xdrope", '
            b'"alpha": 1000, "xdrope_section": [8, 8, 8, 8]}}'),
    ]
    for i, (which, text) in enumerate(seeds):
        put("options", f"opt{i:02d}", bytes([which]) + text)


def rope_ids_seeds():
    # byte 0: family (0 qwen2-vl, 1 qwen2.5-vl, 2 qwen3-vl, 3 qwen2.5-omni, 4 glm4v); byte 1: merge
    # size - 1 in its low 2 bits, tokens_per_second choice above; then the SPEC.
    seeds = [
        (0, 1, b"text:5,image:1x4x6,text:3,video:2x4x4,text:1"),
        (1, 1, b"text:4,video:4x4x6@0.5,text:2,video:2x2x2@3.7,text:1"),
        (1, 9, b"text:1,video:3x4x4@2.0,text:1"),
        (2, 1, b"text:3,video:3x4x6/5,text:2"),
        (3, 1, b"text:2,video:4x4x4@0.04,text:2,image:1x2x2,text:1,audio:7,text:1"),
        (3, 1, b"image:1x4x4,text:1"),
        (0, 1, b"image:2147483647x2147483646x2147483646"),
        (0, 0, b"text:0,text:99999999999,image:1x-4x4,video:1x2x2@nan/"),
        (1, 1, b"text:1,video:4x2x2@1000000,text:1"),
        (2, 3, b"video:1x8x8/0,video:2x8x8/1"),
        (4, 1, b"text:2,video:3x4x4/2,text:1,image:2x4x6,text:1"),
        (3, 1, b"text:1,video:4x4x2@1.0+audio:50,video:2x2x2@2+audio:8,text:2,audio:3,text:1"),
        (3, 1, b"video:1x60x60@2+audio:10"),
    ]
    for i, (family, knobs, spec) in enumerate(seeds):
        put("rope_ids", f"layout{i:02d}", bytes([family, knobs]) + spec)


def main():
    for h in ("npy", "text", "hdf5", "ref", "options", "rope_ids"):
        shutil.rmtree(os.path.join(CORPUS, h), ignore_errors=True)
    npy_seeds()
    text_seeds()
    hdf5_seeds()
    ref_seeds()
    option_seeds()
    rope_ids_seeds()


if __name__ == "__main__":
    main()
