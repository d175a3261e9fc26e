"""Every option of the command reaches the module: for each ROPE OPTION, table kind and
attention option, posenc.* with the keyword gives the bytes `posenc` gives with the
flag (the numbers themselves are checked against independent references in
test_rope.py, test_table.py, test_attention.py and the CLI's own tests)."""
import os
import subprocess

import numpy as np
import pytest

import posenc

BIN = os.environ.get("POSENC_BIN")
DATA = os.path.join(os.environ.get("POSENC_SOURCE_DIR", ""), "tests", "data")
pytestmark = pytest.mark.skipif(not BIN, reason="POSENC_BIN is not set")


def run(*args):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def same(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)


X = np.random.default_rng(11).standard_normal((2, 4, 12, 64))
IDS = np.array([[0, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]] * 2)
CU = np.array([0, 5, 12])
MIDS = np.stack([IDS[0], IDS[0] // 2, IDS[0] // 3])  # [3, s] M-RoPE
# RoPE layouts: a [2, R/2] frequency matrix with real [2, s] coordinates, explicit angles.
INVF = np.random.default_rng(5).uniform(-1, 1, (2, 32))
COORDS = np.random.default_rng(6).uniform(-2, 2, (2, 12))
ANGLES = np.random.default_rng(7).uniform(-4, 4, (2, 12, 32))

ROPE_CASES = [
    ([], {}),
    (["--style", "gptj", "--base", "500"], dict(style="gptj", base=500.0)),
    (["--rotary-dim", "32", "--rotary-last"], dict(rotary_dim=32, rotary_last=True)),
    (["--partial", "0.5", "--inverse"], dict(partial=0.5, inverse=True)),
    (["--rope-interleave"], dict(rope_interleave=True)),
    (["--start", "100"], dict(start=100)),
    (["--position-ids", "ids.npy"], dict(position_ids=IDS)),
    (["--cu-seqlens", "cu.npy"], dict(cu_seqlens=CU)),
    (["--scaling", "linear", "--factor", "2"], dict(scaling="linear", factor=2.0)),
    (["--scaling", "dynamic", "--factor", "2", "--max-pos", "8", "--seq-len", "40"],
     dict(scaling="dynamic", factor=2.0, max_pos=8, seq_len=40)),
    (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "16", "--beta-fast", "16",
      "--beta-slow", "2", "--mscale", "1", "--mscale-all-dim", "0.5", "--no-truncate"],
     dict(scaling="yarn", factor=4.0, original_max_pos=16, beta_fast=16.0, beta_slow=2.0,
          mscale=1.0, mscale_all_dim=0.5, truncate=False)),
    (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "16",
      "--attention-factor", "1.5"],
     dict(scaling="yarn", factor=4.0, original_max_pos=16, attention_factor=1.5)),
    (["--scaling", "llama3", "--factor", "8", "--original-max-pos", "8",
      "--low-freq-factor", "2", "--high-freq-factor", "3"],
     dict(scaling="llama3", factor=8.0, original_max_pos=8, low_freq_factor=2.0,
          high_freq_factor=3.0)),
    (["--scaling", "longrope", "--original-max-pos", "4", "--max-pos", "16",
      "--short-factor", ",".join(["1"] * 32), "--long-factor", ",".join(["2"] * 32)],
     dict(scaling="longrope", original_max_pos=4, max_pos=16, short_factor=[1.0] * 32,
          long_factor=np.full(32, 2.0))),
    (["--precision", "f32"], dict(precision="f32")),
    (["--arith", "hf"], dict(arith="hf")),
    (["--arith", "meta"], dict(arith="meta")),
    (["--arith", "ggml"], dict(arith="ggml")),
    (["--rope2d", "3", "4", "--order", "yx"], dict(rope2d=(3, 4), order="yx")),
    (["--mrope-section", "8,12,12", "--mrope-interleaved", "--position-ids", "mids.npy"],
     dict(mrope_section=(8, 12, 12), mrope_interleaved=True, position_ids=MIDS)),
    (["--dtype", "f16"], dict(dtype=np.float16)),
    (["--axes", "bshd"], dict(axes="bshd")),
    (["--layout", "even-odd", "--coords", "grid:3,4"], dict(layout="even-odd", coords="grid:3,4")),
    (["--layout", "axial", "--coords", "centres:2,5", "--prefix-tokens", "2", "--freq-scale",
      "2pi", "--base", "100"],
     dict(layout="axial", coords="centres:2,5", prefix_tokens=2, freq_scale="2pi", base=100.0)),
    (["--layout", "axial", "--coords", "grid:2,4", "--prefix-tokens", "4", "--merge-window", "2"],
     dict(layout="axial", coords="grid:2,4", prefix_tokens=4, merge_window=2)),
    (["--layout", "chunks:2", "--coords", "grid:3,4"], dict(layout="chunks:2", coords="grid:3,4")),
    (["--style", "tiled", "--precision", "f32"], dict(style="tiled", precision="f32")),
    (["--inv-freq", "invf.npy", "--position-ids", "coords.npy"],
     dict(inv_freq=INVF, position_ids=COORDS)),
    (["--angles", "angles.npy"], dict(angles=ANGLES)),
]


@pytest.mark.parametrize("args,kw", ROPE_CASES, ids=[" ".join(a) or "default" for a, _ in ROPE_CASES])
def test_rope_options(tmp_path, args, kw):
    os.chdir(tmp_path)
    x = X.astype(np.float32) if "arith" in kw else X
    np.save("x.npy", x)
    np.save("ids.npy", IDS)
    np.save("cu.npy", CU)
    np.save("mids.npy", MIDS)
    np.save("invf.npy", INVF)
    np.save("coords.npy", COORDS)
    np.save("angles.npy", ANGLES)
    run("rope", "x.npy", "-o", "y.npy", *args)
    same(posenc.rope(x, **kw), np.load("y.npy"))


def test_rope_hf_config_layer_type(tmp_path):
    os.chdir(tmp_path)
    cfg = os.path.join(DATA, "gemma-3-27b-it.json")
    x = np.random.default_rng(2).standard_normal((1, 2, 8, 128))
    np.save("x.npy", x)
    for layer_type in ("sliding_attention", "full_attention"):
        run("rope", "x.npy", "-o", "y.npy", "--hf-config", cfg, "--layer-type", layer_type)
        same(posenc.rope(x, hf_config=cfg, layer_type=layer_type), np.load("y.npy"))
    run("rope", "x.npy", "-o", "y.npy", "--hf-config", cfg, "--layer", "5", "--base", "1000")
    same(posenc.rope(x, hf_config=cfg, layer=5, base=1000.0), np.load("y.npy"))
    cfg = os.path.join(DATA, "deepseek-v3.json")
    x = np.random.default_rng(3).standard_normal((1, 2, 8, 64))
    np.save("x.npy", x)
    for version in ("4.45", "5"):
        run("table", "rope", "--positions", "8", "--hf-config", cfg, "--hf-version", version,
            "--dtype", "f64", "-o", "t.npy")
        same(posenc.table.rope(positions=8, hf_config=cfg, hf_version=version, dtype="f64"),
             np.load("t.npy"))
        run("rope", "x.npy", "-o", "y.npy", "--hf-config", cfg, "--hf-version", version)
        same(posenc.rope(x, hf_config=cfg, hf_version=version), np.load("y.npy"))


TABLE_CASES = [
    (["sinusoidal", "--positions", "9", "--dim", "8", "--base", "100", "--start", "2",
      "--layout", "concat"],
     lambda: posenc.table.sinusoidal(positions=9, dim=8, base=100.0, start=2, layout="concat")),
    (["rope", "--positions", "9", "--dim", "16", "--emit", "cos-sin-cache", "--scaling", "yarn",
      "--factor", "4", "--original-max-pos", "4", "--dtype", "f64"],
     lambda: posenc.table.rope(positions=9, dim=16, emit="cos-sin-cache", scaling="yarn",
                               factor=4.0, original_max_pos=4, dtype=np.float64)),
    (["rope", "--dim", "16", "--position-ids", "ids.npy", "--emit", "angles", "--layout",
      "half", "--inverse", "--precision", "f32"],
     lambda: posenc.table.rope(dim=16, position_ids=IDS, emit="angles", layout="half",
                               inverse=True, precision="f32")),
    (["rope", "--dim", "16", "--cu-seqlens", "cu.npy", "--emit", "sin", "--arith", "hf"],
     lambda: posenc.table.rope(dim=16, cu_seqlens=CU, emit="sin", arith="hf")),
    (["rope", "--positions", "5", "--hf-config", os.path.join(DATA, "llama-3.1-8b.json"),
      "--emit", "inv-freq"],
     lambda: posenc.table.rope(positions=5, hf_config=os.path.join(DATA, "llama-3.1-8b.json"),
                               emit="inv-freq")),
    (["rope2d", "--height", "3", "--width", "5", "--dim", "16", "--base", "50", "--order", "yx",
      "--style", "neox", "--emit", "cos", "--layout", "half", "--dtype", "bf16"],
     lambda: posenc.table.rope2d(height=3, width=5, dim=16, base=50.0, order="yx",
                                 style="neox", emit="cos", layout="half", dtype="bf16")),
    (["alibi", "--heads", "6", "--q-len", "4", "--k-len", "7", "--variant", "bottom-right",
      "--max-bias", "4"],
     lambda: posenc.table.alibi(heads=6, q_len=4, k_len=7, variant="bottom-right",
                                max_bias=4.0)),
    (["relative", "--q-len", "4", "--k-len", "9", "--max-distance", "2", "--sign", "q-k",
      "--dtype", "i8"],
     lambda: posenc.table.relative(q_len=4, k_len=9, max_distance=2, sign="q-k", dtype="i8")),
    (["relative", "--q-len", "12", "--left", "4", "--right", "2", "--beyond", "zero"],
     lambda: posenc.table.relative(q_len=12, left=4, right=2, beyond="zero")),
    (["t5-bucket", "--q-len", "4", "--buckets", "16", "--max-distance", "20", "--causal"],
     lambda: posenc.table.t5_bucket(q_len=4, buckets=16, max_distance=20, causal=True)),
    (["xl-relative", "--q-len", "3", "--k-len", "5", "--dim", "8", "--form", "xlnet-bi",
      "--clamp-len", "2", "--base", "100"],
     lambda: posenc.table.xl_relative(q_len=3, k_len=5, dim=8, form="xlnet-bi", clamp_len=2,
                                      base=100.0)),
    (["funnel-relative", "--seq-len", "16", "--dim", "8", "--block", "2", "--shift", "2",
      "--separate-cls", "--truncate-seq", "--base", "100"],
     lambda: posenc.table.funnel_relative(seq_len=16, dim=8, block=2, shift=2,
                                          separate_cls=True, truncate_seq=True, base=100.0)),
    (["funnel-factorized", "--seq-len", "13", "--dim", "6", "--block", "2", "--key-block", "1",
      "--separate-cls", "--emit", "omega"],
     lambda: posenc.table.funnel_factorized(seq_len=13, dim=6, block=2, key_block=1,
                                            separate_cls=True, emit="omega")),
    (["deberta-bucket", "--q-len", "40", "--position-buckets", "8",
      "--max-relative-positions", "32"],
     lambda: posenc.table.deberta_bucket(q_len=40, position_buckets=8,
                                         max_relative_positions=32)),
]

# Inputs of the kinds that read tensors: saved as the files the command is given.
T = np.random.default_rng(13)
SIDE = {
    "swbt.npy": T.standard_normal((35, 2)),           # swin 3 x 4: (2*3-1)(2*4-1) entries
    "bebt.npy": T.standard_normal((12, 3)).astype(np.float32),  # beit 2 x 2: 3*3 + 3
    "lvbt.npy": T.standard_normal((2, 16)),           # levit R = 4
    "mask.npy": np.arange(24).reshape(2, 3, 4) % 5 != 0,
    "fsids.npy": np.array([[5, 6, 7, 1, 1], [1, 9, 9, 9, 9]]),
    "pids.npy": np.array([[0, 2, 5, 9, 30], [4, 3, 2, 1, 0]]),
    "bbox.npy": T.integers(0, 1000, (2, 5, 4)),
    "lwx.npy": T.standard_normal((2, 16)),
    "lwy.npy": T.standard_normal((2, 16)).astype(np.float16),
    "freq.npy": T.uniform(0, 2, (5, 4)),
    "amp.npy": T.uniform(0.5, 1.5, (5, 4)),
    "phase.npy": T.uniform(-1, 1, (5, 4)),
    "cids.npy": np.array([[0, 4, 2], [1, 1, 3]], dtype=np.int32),
    "vfreq.npy": T.uniform(0, 2, 4),
    "ax0.npy": T.standard_normal((3, 1, 2)),
    "ax1.npy": T.standard_normal((1, 4, 3)).astype(np.float32),
    "axids.npy": np.array([[0, 11, 5], [7, 7, 2]]),
    "cseg.npy": np.array([[0, 0, 1, 1, 2], [0, 1, 0, 2, 2]], dtype=np.int32),
    "ckseg.npy": np.array([[0, 2, 1], [1, 1, 0]]),
    "cbt.npy": T.standard_normal((9 + 8, 2)),
}
TABLE_CASES += [
    (["swin-index", "--window", "3", "4", "--dtype", "i16"],
     lambda: posenc.table.swin_index(window=(3, 4), dtype="i16")),
    (["swin-index", "--window", "3", "4", "--bias-table", "swbt.npy", "--dtype", "f64"],
     lambda: posenc.table.swin_index(window=(3, 4), bias_table=SIDE["swbt.npy"], dtype="f64")),
    (["beit-index", "--window", "3"], lambda: posenc.table.beit_index(window=3)),
    (["beit-index", "--window", "2", "--bias-table", "bebt.npy"],
     lambda: posenc.table.beit_index(window=2, bias_table=SIDE["bebt.npy"])),
    (["swinv2-coords", "--window", "3", "5", "--pretrained-window", "4", "6", "--dtype", "f64"],
     lambda: posenc.table.swinv2_coords(window=(3, 5), pretrained_window=(4, 6), dtype="f64")),
    (["swinv2-coords", "--window", "1", "4"],
     lambda: posenc.table.swinv2_coords(window=(1, 4))),
    (["levit-index", "--resolution", "5", "--stride", "2"],
     lambda: posenc.table.levit_index(resolution=5, stride=2)),
    (["levit-index", "--resolution", "4", "--bias-table", "lvbt.npy", "--dtype", "f64"],
     lambda: posenc.table.levit_index(resolution=4, bias_table=SIDE["lvbt.npy"], dtype="f64")),
    (["detr-sine", "--mask", "mask.npy", "--embedding-dim", "8", "--temperature", "100",
      "--scale", "3", "--layout", "tokens", "--dtype", "f64"],
     lambda: posenc.table.detr_sine(mask=SIDE["mask.npy"], embedding_dim=8, temperature=100.0,
                                    scale=3.0, layout="tokens", dtype="f64")),
    (["detr-sine", "--size", "3", "2", "--embedding-dim", "6", "--no-normalize"],
     lambda: posenc.table.detr_sine(size=(3, 2), embedding_dim=6, normalize=False)),
    (["fairseq-sinusoidal", "--positions", "6", "--dim", "8", "--padding-idx", "0"],
     lambda: posenc.table.fairseq_sinusoidal(positions=6, dim=8, padding_idx=0)),
    (["fairseq-sinusoidal", "--input-ids", "fsids.npy", "--dim", "9", "--padding-idx", "1",
      "--past-length", "2", "--dtype", "f64"],
     lambda: posenc.table.fairseq_sinusoidal(input_ids=SIDE["fsids.npy"], dim=9, padding_idx=1,
                                             past_length=2, dtype="f64")),
    (["layoutlm-bucket", "--seq-len", "7", "--buckets", "8", "--max-distance", "16"],
     lambda: posenc.table.layoutlm_bucket(seq_len=7, buckets=8, max_distance=16)),
    (["layoutlm-bucket", "--position-ids", "pids.npy", "--dtype", "i8"],
     lambda: posenc.table.layoutlm_bucket(position_ids=SIDE["pids.npy"], dtype="i8")),
    (["layoutlm-bucket", "--axis", "y", "--bbox", "bbox.npy", "--buckets", "16",
      "--bias-table", "lwx.npy"],
     lambda: posenc.table.layoutlm_bucket(axis="y", bbox=SIDE["bbox.npy"], buckets=16,
                                          bias_table=SIDE["lwx.npy"])),
    (["layoutlm-bucket", "--axis", "xy", "--bbox", "bbox.npy", "--buckets", "16",
      "--max-distance", "300", "--bias-table", "lwx.npy", "lwy.npy", "--dtype", "f64"],
     lambda: posenc.table.layoutlm_bucket(axis="xy", bbox=SIDE["bbox.npy"], buckets=16,
                                          max_distance=300,
                                          bias_table=(SIDE["lwx.npy"], SIDE["lwy.npy"]),
                                          dtype="f64")),
    (["complex-order", "--frequency", "freq.npy", "--amplitude", "amp.npy", "--phase",
      "phase.npy", "--input-ids", "cids.npy", "--start", "2", "--dtype", "f64"],
     lambda: posenc.table.complex_order(frequency=SIDE["freq.npy"], amplitude=SIDE["amp.npy"],
                                        phase=SIDE["phase.npy"], input_ids=SIDE["cids.npy"],
                                        start=2, dtype="f64")),
    (["complex-order", "--frequency", "vfreq.npy", "--positions", "6"],
     lambda: posenc.table.complex_order(frequency=SIDE["vfreq.npy"], positions=6)),
    (["reformer-axial", "--axial-shape", "3,4", "--weights", "ax0.npy", "ax1.npy", "--dtype",
      "f64"],
     lambda: posenc.table.reformer_axial(axial_shape=(3, 4),
                                         weights=[SIDE["ax0.npy"], SIDE["ax1.npy"]],
                                         dtype="f64")),
    (["reformer-axial", "--axial-shape", "3,4", "--weights", "ax0.npy", "ax1.npy",
      "--position-ids", "axids.npy"],
     lambda: posenc.table.reformer_axial(axial_shape=(3, 4),
                                         weights=[SIDE["ax0.npy"], SIDE["ax1.npy"]],
                                         position_ids=SIDE["axids.npy"])),
    (["reformer-axial", "--axial-shape", "3,4", "--weights", "ax0.npy", "ax1.npy",
      "--positions", "5", "--dtype", "f64"],
     lambda: posenc.table.reformer_axial(axial_shape=(3, 4),
                                         weights=[SIDE["ax0.npy"], SIDE["ax1.npy"]],
                                         positions=5, dtype="f64")),
    (["cpmant-bucket", "--segment-ids", "cseg.npy", "--segments", "3", "--buckets", "8",
      "--max-distance", "10", "--dtype", "i16"],
     lambda: posenc.table.cpmant_bucket(segment_ids=SIDE["cseg.npy"], segments=3, buckets=8,
                                        max_distance=10, dtype="i16")),
    (["cpmant-bucket", "--segment-ids", "cseg.npy", "ckseg.npy", "--segments", "3",
      "--buckets", "8", "--max-distance", "10", "--bias-table", "cbt.npy"],
     lambda: posenc.table.cpmant_bucket(segment_ids=SIDE["cseg.npy"],
                                        key_segment_ids=SIDE["ckseg.npy"], segments=3,
                                        buckets=8, max_distance=10, bias_table=SIDE["cbt.npy"])),
    (["cpmant-bucket", "--seq-len", "40"],
     lambda: posenc.table.cpmant_bucket(seq_len=40)),
]


@pytest.mark.parametrize("args,call", TABLE_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in TABLE_CASES])
def test_table_kinds(tmp_path, args, call):
    os.chdir(tmp_path)
    np.save("ids.npy", IDS)
    np.save("cu.npy", CU)
    for name, a in SIDE.items():
        np.save(name, a)
    if "bf16" in args:
        run("table", *args, "-o", "t.h5:/t")
        same(call(), posenc.read("t.h5:/t"))
    else:
        run("table", *args, "-o", "t.npy")
        same(call(), np.load("t.npy"))


def test_table_rope_emit_list(tmp_path):
    os.chdir(tmp_path)
    run("table", "rope", "--positions", "6", "--dim", "8", "--emit", "cos,sin", "-o",
        "{}.npy")
    cos, sin = posenc.table.rope(positions=6, dim=8, emit=("cos", "sin"))
    same(cos, np.load("cos.npy"))
    same(sin, np.load("sin.npy"))


def test_table_bf16_and_torch_inputs(tmp_path):
    # bf16 tables and a torch mask read as the command reads their files
    torch = pytest.importorskip("torch")
    os.chdir(tmp_path)
    bits = posenc.float32_to_bf16(SIDE["lvbt.npy"].astype(np.float32))
    posenc.write("w.h5:/w", posenc.BF16(bits))
    run("table", "levit-index", "--resolution", "4", "--bias-table", "w.h5:/w", "-o", "t.npy")
    same(posenc.table.levit_index(resolution=4, bias_table=posenc.BF16(bits)), np.load("t.npy"))
    tw = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    got = posenc.table.levit_index(resolution=4, bias_table=tw, dtype=torch.float32)
    assert isinstance(got, torch.Tensor)
    same(got.numpy(), np.load("t.npy"))
    np.save("mask.npy", SIDE["mask.npy"])
    run("table", "detr-sine", "--mask", "mask.npy", "--embedding-dim", "4", "-o", "d.npy")
    same(posenc.table.detr_sine(mask=torch.from_numpy(SIDE["mask.npy"]), embedding_dim=4,
                                dtype=np.float32), np.load("d.npy"))


QWEN2_VL = os.path.join(DATA, "qwen2-vl-7b-instruct.json")
IMG, VID = 151655, 151656


def _h5_ids(path):
    import h5py
    with h5py.File(path, "r") as f:
        d = f["/position_ids"]
        return d[()], dict(d.attrs)


@pytest.mark.parametrize("args,kw", [
    (["--family", "qwen2-vl", "--layout", "text:5,image:1x4x6,text:3,video:2x4x4,text:1"],
     dict(family="qwen2-vl", layout="text:5,image:1x4x6,text:3,video:2x4x4,text:1")),
    (["--family", "qwen2.5-vl", "--layout", "text:2,video:4x4x4@1.5,text:2",
      "--tokens-per-second", "2", "--spatial-merge-size", "1"],
     dict(family="qwen2.5-vl", layout="text:2,video:4x4x4@1.5,text:2", tokens_per_second=2.0,
          spatial_merge_size=1)),
    (["--family", "qwen2.5-omni", "--layout", "text:2,audio:5,text:2,image:1x2x2,text:1",
      "--position-id-per-seconds", "13", "--seconds-per-chunk", "1"],
     dict(family="qwen2.5-omni", layout="text:2,audio:5,text:2,image:1x2x2,text:1",
          position_id_per_seconds=13.0, seconds_per_chunk=1.0)),
    (["--hf-config", QWEN2_VL, "--layout", "text:1,image:2x2x4,text:2"],
     dict(hf_config=QWEN2_VL, layout="text:1,image:2x2x4,text:2")),
], ids=["qwen2-vl", "qwen2.5-vl", "qwen2.5-omni", "hf-config"])
def test_rope_ids_layout(tmp_path, args, kw):
    os.chdir(tmp_path)
    run("rope-ids", *args, "-o", "ids.h5")
    want, attrs = _h5_ids("ids.h5")
    ids, delta = posenc.rope_ids(**kw)
    same(ids, want)
    assert ids.shape[0] == 3 and delta == attrs["mrope_position_delta"]


def test_rope_ids_tokens(tmp_path):
    os.chdir(tmp_path)
    row = [1, 2, IMG, IMG, IMG, IMG, 3, VID, VID, VID, VID, VID, VID, VID, VID, 4]
    # the second row: 3 padding slots, an image, then a video of 1x2x4 patches (2 tokens)
    ids_b = np.array([row, [0, 0, 0, 1, 2, IMG, IMG, IMG, IMG, 3, VID, VID, 4, 5, 6, 7]])
    mask = np.array([[1] * 16, [0, 0, 0] + [1] * 13])
    grids_i = np.array([[1, 4, 4], [1, 4, 4]])
    grids_v = np.array([[2, 4, 4], [1, 2, 4]])
    for name, a in (("in.npy", ids_b), ("mask.npy", mask), ("gi.npy", grids_i),
                    ("gv.npy", grids_v), ("in1.npy", ids_b[0]), ("gi1.npy", grids_i[:1]),
                    ("gv1.npy", grids_v[:1])):
        np.save(name, a)
    run("rope-ids", "--hf-config", QWEN2_VL, "--input-ids", "in.npy", "--attention-mask",
        "mask.npy", "--image-grid-thw", "gi.npy", "--video-grid-thw", "gv.npy", "-o", "b.h5")
    want, attrs = _h5_ids("b.h5")
    ids, deltas = posenc.rope_ids(hf_config=QWEN2_VL, input_ids=ids_b, attention_mask=mask,
                                  image_grid_thw=grids_i, video_grid_thw=grids_v)
    same(ids, want)
    assert ids.shape == (3, 2, 16)
    assert deltas == list(attrs["mrope_position_deltas"])
    run("rope-ids", "--family", "qwen2-vl", "--input-ids", "in1.npy", "--image-token-id",
        str(IMG), "--video-token-id", str(VID), "--image-grid-thw", "gi1.npy",
        "--video-grid-thw", "gv1.npy", "-o", "one.h5")
    want, attrs = _h5_ids("one.h5")
    # the first row alone takes the first image and the first video
    ids, delta = posenc.rope_ids("qwen2-vl", input_ids=ids_b[0], image_token_id=IMG,
                                 video_token_id=VID, image_grid_thw=grids_i[:1],
                                 video_grid_thw=grids_v[:1])
    same(ids, want)
    assert isinstance(delta, int) and delta == attrs["mrope_position_delta"]


G = np.random.default_rng(5)
Q, K, V = G.standard_normal((2, 4, 6, 16)), G.standard_normal((2, 2, 9, 16)), G.standard_normal((2, 2, 9, 16))
ATT_CASES = [
    (["--causal"], dict(causal=True)),
    (["--causal", "top-left", "--scale", "0.3"], dict(causal="top-left", scale=0.3)),
    (["--window", "2,1"], dict(window=(2, 1))),
    (["--sliding-window", "3", "--causal"], dict(sliding_window=3, causal=True)),
    (["--chunk-size", "4"], dict(chunk_size=4)),
    (["--attn-temperature", "0.1", "2"], dict(attn_temperature=(0.1, 2.0))),
    (["--llama4-scaling", "0.1", "3"], dict(llama4_scaling=(0.1, 3))),
    (["--key-lengths", "kl.npy"], dict(key_lengths=np.array([5, 9]))),
    (["--mask", "mask.npy"], dict(mask=np.arange(54).reshape(6, 9) % 4 != 0)),
    (["--alibi", "falcon", "--alibi-max-bias", "4"], dict(alibi="falcon", alibi_max_bias=4.0)),
    (["--alibi"], dict(alibi=True)),
    (["--t5-bias", "t5.npy", "--t5-buckets", "8", "--t5-max-distance", "16", "--t5-causal"],
     dict(t5_bias=np.linspace(-1, 1, 32).reshape(8, 4), t5_buckets=8, t5_max_distance=16,
          t5_causal=True)),
    (["--relative-k", "rk.npy", "--relative-v", "rv.npy", "--max-distance", "2"],
     dict(relative_k=G.standard_normal((5, 16)), relative_v=G.standard_normal((5, 16)),
          max_distance=2)),
    (["--decomposed-rel-pos", "rph.npy", "rpw.npy", "--grid", "2", "3", "--key-grid", "3", "3"],
     dict(decomposed_rel_pos=(G.standard_normal((5, 16)), G.standard_normal((4, 16))),
          grid=(2, 3), key_grid=(3, 3))),
    (["--clipped-bias", "clip.npy"], dict(clipped_bias=G.standard_normal((6, 4)))),
    (["--clipped-bias", "clip.npy", "--clipped-symmetric"],
     dict(clipped_bias=G.standard_normal((9, 4)), clipped_symmetric=True)),
    (["--t5-bias", "t5.npy", "--wavlm-gate", "gx.npy", "gw.npy", "gb.npy", "gc.npy"],
     dict(t5_bias=np.linspace(-1, 1, 128).reshape(32, 4),
          wavlm_gate=(G.standard_normal((2, 6, 12)), G.standard_normal((8, 3)),
                      G.standard_normal(8), G.standard_normal(4)))),
    (["--relative-k", "rkh.npy", "--relative-left", "2", "--relative-right", "1",
      "--relative-beyond", "zero"],
     dict(relative_k=G.standard_normal((4, 4, 16)), relative_left=2, relative_right=1,
          relative_beyond="zero")),
    (["--per-dim-scale", "pds.npy", "--relative-proj", "rproj.npy", "--relative-left", "3",
      "--relative-right", "0", "--window", "3,0", "--softcap", "5"],
     dict(per_dim_scale=G.standard_normal(16), relative_proj=G.standard_normal((64, 8)),
          relative_left=3, relative_right=0, window=(3, 0), softcap=5.0)),
    (["--softcap", "2"], dict(softcap=2.0)),
    (["--sinks", "sinks.npy"], dict(sinks=np.array([0.5, -1.0, 2.0, 0.0]))),
    (["--key-lengths", "kl0.npy", "--masked-rows", "nan", "--causal", "top-left"],
     dict(key_lengths=np.array([0, 9]), masked_rows="nan", causal="top-left")),
    (["--dtype", "f32", "--precision", "f32"], dict(dtype=np.float32, precision="f32")),
    (["--rope", "--base", "100", "--start", "3", "--style", "gptj", "--inverse"],
     dict(rope=True, base=100.0, start=3, style="gptj", inverse=True)),
    (["--rope", "--position-ids", "kids.npy"], dict(rope=True, position_ids=np.arange(9) * 2)),
    (["--max-memory", "1000000"], dict(max_memory=1000000)),
]


def save_side(kw):
    names = {"key_lengths": "kl.npy", "mask": "mask.npy", "t5_bias": "t5.npy",
             "relative_k": "rk.npy", "relative_v": "rv.npy", "sinks": "sinks.npy",
             "position_ids": "kids.npy"}
    names.update(clipped_bias="clip.npy", per_dim_scale="pds.npy", relative_proj="rproj.npy")
    if "relative_k" in kw and kw["relative_k"].ndim == 3:
        names["relative_k"] = "rkh.npy"
    pairs = {"decomposed_rel_pos": ("rph.npy", "rpw.npy"),
             "wavlm_gate": ("gx.npy", "gw.npy", "gb.npy", "gc.npy")}
    for key, files in pairs.items():
        for name, a in zip(files, kw.get(key, ())):
            np.save(name, a)
    for key, name in names.items():
        if key in kw:
            if key == "key_lengths" and kw[key][0] == 0:
                name = "kl0.npy"
            np.save(name, kw[key])


@pytest.mark.parametrize("args,kw", ATT_CASES, ids=[" ".join(a) for a, _ in ATT_CASES])
def test_attention_options(tmp_path, args, kw):
    os.chdir(tmp_path)
    q, k, v = (a.astype(np.float32) for a in (Q, K, V)) if "precision" in kw else (Q, K, V)
    if "sinks" in kw:
        k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    np.save("q.npy", q), np.save("k.npy", k), np.save("v.npy", v)
    save_side(kw)
    run("attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--emit",
        "logits,probs,output,lse", "-o", "{}.npy", *args)
    got = posenc.attention(q, k, v, emit=("logits", "probs", "output", "lse"), **kw)
    for name, g in zip(("logits", "probs", "output", "lse"), got):
        same(g, np.load(f"{name}.npy"))


def test_attention_hf_config_arith_hf_and_relative(tmp_path):
    os.chdir(tmp_path)
    g = np.random.default_rng(8)
    cfg = os.path.join(DATA, "gemma-2-27b.json")
    q = g.standard_normal((1, 32, 5, 128)).astype(np.float32)
    k = g.standard_normal((1, 16, 5, 128)).astype(np.float32)
    v = g.standard_normal((1, 16, 5, 128)).astype(np.float32)
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        np.save(f"{n}.npy", a)
    run("attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--emit", "output", "-o",
        "o.npy", "--rope", "--hf-config", cfg, "--layer-type", "sliding_attention",
        "--causal")
    same(posenc.attention(q, k, v, emit="output", rope=True, hf_config=cfg,
                          layer_type="sliding_attention", causal=True), np.load("o.npy"))
    cfg = os.path.join(DATA, "llama-3.1-8b.json")
    k, v = k[:, :8], v[:, :8]
    np.save("k.npy", k), np.save("v.npy", v)
    run("attention", "-q", "q.npy", "-k", "k.npy", "-v", "v.npy", "--emit", "output", "-o",
        "o.npy", "--rope", "--hf-config", cfg, "--causal", "--arith", "hf", "--start", "7")
    same(posenc.attention(q, k, v, emit="output", rope=True, hf_config=cfg, causal=True,
                          arith="hf", start=7), np.load("o.npy"))
    # Transformer-XL and DeBERTa terms
    q2, k2, v2 = (g.standard_normal((1, 2, 4, 8)) for _ in range(3))
    r, u, w = g.standard_normal((4, 2, 8)), g.standard_normal((2, 8)), g.standard_normal((2, 8))
    for a, n in ((q2, "q2"), (k2, "k2"), (v2, "v2"), (r, "r"), (u, "u"), (w, "w")):
        np.save(f"{n}.npy", a)
    run("attention", "-q", "q2.npy", "-k", "k2.npy", "-v", "v2.npy", "--emit", "output", "-o",
        "o2.npy", "--rel-keys", "r.npy", "--content-bias", "u.npy", "--position-bias", "w.npy")
    same(posenc.attention(q2, k2, v2, emit="output", rel_keys=r, content_bias=u,
                          position_bias=w), np.load("o2.npy"))
    # Funnel: pooled queries over unpooled keys (shift 2), r_kernel, token_type_mat,
    # cls_mask; and the factorized tables
    q3 = g.standard_normal((1, 2, 3, 8))
    r3, kr = g.standard_normal((4 + 2 * 3, 6)), g.standard_normal((6, 2, 8))
    tt, se = g.standard_normal((3, 4)) > 0, g.standard_normal((2, 2, 8))
    fa, fb = g.standard_normal((3, 6)), g.standard_normal((4, 6))
    for a, n in ((q3, "q3"), (r3, "r3"), (kr, "kr"), (tt, "tt"), (se, "se"), (fa, "fa"),
                 (fb, "fb")):
        np.save(f"{n}.npy", a)
    run("attention", "-q", "q3.npy", "-k", "k2.npy", "-v", "v2.npy", "--emit", "output", "-o",
        "o4.npy", "--rel-keys", "r3.npy", "--rel-kernel", "kr.npy", "--rel-shift", "2",
        "--content-bias", "u.npy", "--position-bias", "w.npy", "--segment-index", "tt.npy",
        "--segment-embed", "se.npy", "--separate-cls")
    same(posenc.attention(q3, k2, v2, emit="output", rel_keys=r3, rel_kernel=kr, rel_shift=2,
                          content_bias=u, position_bias=w, segment_index=tt, segment_embed=se,
                          separate_cls=True), np.load("o4.npy"))
    run("attention", "-q", "q3.npy", "-k", "k2.npy", "-v", "v2.npy", "--emit", "output", "-o",
        "o5.npy", "--factorized", "fa.npy", "fa.npy", "fb.npy", "fb.npy", "--rel-kernel",
        "kr.npy", "--position-bias", "w.npy")
    same(posenc.attention(q3, k2, v2, emit="output", factorized=(fa, fa, fb, fb), rel_kernel=kr,
                          position_bias=w), np.load("o5.npy"))
    pk = g.standard_normal((8, 2, 8))
    np.save("pk.npy", pk)
    run("attention", "-q", "q2.npy", "-k", "k2.npy", "-v", "v2.npy", "--emit", "output", "-o",
        "o3.npy", "--pos-key", "pk.npy", "--pos-query", "pk.npy", "--position-buckets", "4",
        "--max-relative-positions", "8", "--pos-att-type", "c2p,p2c")
    same(posenc.attention(q2, k2, v2, emit="output", pos_key=pk, pos_query=pk,
                          position_buckets=4, max_relative_positions=8,
                          pos_att_type="c2p,p2c"), np.load("o3.npy"))


def test_compare_matches_command(tmp_path):
    os.chdir(tmp_path)
    a = np.linspace(0, 1, 50, dtype=np.float32)
    b = a + np.float32(1e-6)
    np.save("a.npy", a), np.save("b.npy", b)
    for args, kw in (([], {}), (["--atol", "1e-7", "--rtol", "0"], dict(atol=1e-7, rtol=0.0)),
                     (["--max-ulp", "20"], dict(ulp=20))):
        r = subprocess.run([BIN, "compare", "a.npy", "b.npy", *args], capture_output=True)
        assert posenc.compare(a, b, **kw).match == (r.returncode == 0)
