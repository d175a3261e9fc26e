"""Every option means the same in every arithmetic mode: honoured, or refused.

For `attention`, `rope` and `table rope`, every long option of `--help` has a row below.
A row that changes numbers is run in every `--arith` mode the command has, with and
without the option (over a base that makes the option meaningful): the result must
differ from the run without it, or the run must be refused with exit status 2 and a
message naming the mode. In the framework modes (hf, meta, ggml) the option must also
move the result towards its meaning: nearer to the exact mode's result with the option
than the run without it is (the exact mode being checked against independent references
in tests/reference/). Options that do not change numbers (where the output goes,
budgets) are listed with the reason. A new option without a row fails
`test_every_option_has_a_row`. The values themselves are checked against independent
references in tests/reference/ (test_arith_hf.py, test_hf_parity.py, ...).
"""
import io
import json
import os
import re
import subprocess

import numpy as np

from posenc_testlib import BIN, PosencTestCase, run

# Options that do not change the numbers, with the reason.
NOT_NUMBERS = {
    "--to": "output format", "--compression": "HDF5 storage", "--no-clobber": "output policy",
    "--sync": "output durability", "--max-memory": "memory budget (same bytes: "
    "test_attention_stream)", "--part": "a share of the same numbers (test_part_join)",
    "--emit": "which tensors are written", "--allow-nonfinite": "what non-finite inputs do "
    "(test_attention_errors)", "--arith": "the mode itself", "--layout": "table layout",
    "--half-width": "table layout", "--positions": "table size", "--dim": "table size",
    "--rope": "switches RoPE on: the base of every RoPE row",
    "--page-table": "where the cache rows live: the bytes of the contiguous cache "
    "(test_attention_kvcache)",
    "--cache-batch-idx": "which cache row an entry uses: the numbers of that row "
    "(test_attention_kvcache)",
    "--cache-out": "where the updated caches go",
    "--input-dtype": "how 1-byte inputs are read: fp8 Q/K/V give the numbers of their widened "
    "f32 values, --arith hf refuses them (test_fp8_io)",
    "--t5-bidirectional": "the default T5 buckets; --t5-causal is the row that changes them",
    "--max-distance": "must agree with the Shaw tables' 2M+1 rows; a check, not a number",
    "--pos-att-type": "names the DeBERTa terms, which must be the ones whose tensors are given "
    "(rows --pos-key, --pos-query); a check, not a number",
}
# The layout of the inputs: the same numbers in another order where the shapes allow
# (test_rope_apply, test_attention_reference).
NOT_NUMBERS_ATTENTION = {"--axes"}

ROPE_ROWS = {
    # option: (base, with)
    "--style": (["--style", "gptj"], ["--style", "neox"]),
    "--base": ([], ["--base", "500"]),
    "--rotary-dim": ([], ["--rotary-dim", "4"]),
    "--rotary-last": (["--rotary-dim", "4"], ["--rotary-dim", "4", "--rotary-last"]),
    "--rope-interleave": ([], ["--rope-interleave"]),
    # The negations restore the default: given with the flag, they are refused.
    "--no-rotary-last": (["--rotary-dim", "4", "--rotary-last"],
                         ["--rotary-dim", "4", "--rotary-last", "--no-rotary-last"]),
    "--no-rope-interleave": (["--style", "neox", "--rope-interleave"],
                             ["--style", "neox", "--rope-interleave", "--no-rope-interleave"]),
    "--partial": ([], ["--partial", "0.5"]),
    "--start": ([], ["--start", "5"]),
    "--position-ids": ([], ["--position-ids", "{ids}"]),
    "--cu-seqlens": ([], ["--cu-seqlens", "{cu}"]),
    "--scaling": ([], ["--scaling", "linear", "--factor", "2"]),
    "--factor": (["--scaling", "linear", "--factor", "2"], ["--scaling", "linear", "--factor", "4"]),
    "--original-max-pos": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "64"],
                           ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"]),
    "--max-pos": (["--scaling", "dynamic", "--factor", "4", "--max-pos", "64", "--seq-len", "256"],
                  ["--scaling", "dynamic", "--factor", "4", "--max-pos", "32", "--seq-len", "256"]),
    "--seq-len": (["--scaling", "dynamic", "--factor", "4", "--max-pos", "8", "--seq-len", "64"],
                  ["--scaling", "dynamic", "--factor", "4", "--max-pos", "8", "--seq-len", "256"]),
    "--beta-fast": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"],
                    ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                     "--beta-fast", "8"]),
    "--beta-slow": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"],
                    ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                     "--beta-slow", "4"]),
    "--mscale": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"],
                 ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                  "--mscale", "2", "--mscale-all-dim", "1"]),
    "--mscale-all-dim": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                          "--mscale", "1"],
                         ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                          "--mscale", "1", "--mscale-all-dim", "0.5"]),
    "--attention-factor": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"],
                           ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                            "--attention-factor", "1.5"]),
    "--no-truncate": (["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192"],
                      ["--scaling", "yarn", "--factor", "4", "--original-max-pos", "8192",
                       "--no-truncate"]),
    "--low-freq-factor": (["--scaling", "llama3", "--factor", "8", "--original-max-pos", "16"],
                          ["--scaling", "llama3", "--factor", "8", "--original-max-pos", "16",
                           "--low-freq-factor", "2"]),
    "--high-freq-factor": (["--scaling", "llama3", "--factor", "8", "--original-max-pos", "16"],
                           ["--scaling", "llama3", "--factor", "8", "--original-max-pos", "16",
                            "--high-freq-factor", "2"]),
    "--short-factor": (["--scaling", "longrope", "--original-max-pos", "8192", "--max-pos", "256",
                        "--short-factor", "1,1,1,1", "--long-factor", "2,2,2,2"],
                       ["--scaling", "longrope", "--original-max-pos", "8192", "--max-pos", "256",
                        "--short-factor", "1.5,3,1,1", "--long-factor", "2,2,2,2"]),
    "--long-factor": (["--scaling", "longrope", "--original-max-pos", "4", "--max-pos", "256",
                       "--short-factor", "1,1,1,1", "--long-factor", "2,2,2,2"],
                      ["--scaling", "longrope", "--original-max-pos", "4", "--max-pos", "256",
                       "--short-factor", "1,1,1,1", "--long-factor", "3,5,2,2"]),
    "--hf-config": ([], ["--hf-config", "{rope_cfg}"]),
    # 4.51-4.55 take YaRN's factor as max_position_embeddings / L0 (2 here, not 4).
    "--hf-version": (["--hf-config", "{yarn_cfg}"],
                     ["--hf-config", "{yarn_cfg}", "--hf-version", "4.51"]),
    "--layer-type": (["--hf-config", "{typed_cfg}"],
                     ["--hf-config", "{typed_cfg}", "--layer-type", "sliding_attention"]),
    "--layer": (["--hf-config", "{typed_cfg}"], ["--hf-config", "{typed_cfg}", "--layer", "0"]),
    "--inverse": ([], ["--inverse"]),
    "--precision": ([], ["--precision", "f32"]),
    "--dtype": ([], ["--dtype", "f64"]),
    "--axes": ([], ["--axes", "bshd"]),
    "--rope2d": ([], ["--rope2d", "2", "5"]),
    "--rope2d-ids": (["--position-ids", "{ids}"], ["--position-ids", "{ids2}", "--rope2d-ids"]),
    "--order": (["--rope2d", "2", "5"], ["--rope2d", "2", "5", "--order", "yx"]),
    "--mrope-section": (["--position-ids", "{ids}"],
                        ["--position-ids", "{ids3}", "--mrope-section", "1,1,2"]),
    "--mrope-interleaved": (["--position-ids", "{ids3}", "--mrope-section", "1,1,2"],
                            ["--position-ids", "{ids3}", "--mrope-section", "1,1,2",
                             "--mrope-interleaved"]),
    "--layout": (["--coords", "grid:2,5", "--layout", "axial"],
                 ["--coords", "grid:2,5", "--layout", "even-odd"]),
    "--coords": ([], ["--coords", "centres:10"]),
    "--freq-scale": (["--coords", "centres:10"], ["--coords", "centres:10", "--freq-scale", "2pi"]),
    "--prefix-tokens": (["--coords", "grid:10"], ["--coords", "grid:8", "--prefix-tokens", "2"]),
    "--merge-window": (["--coords", "grid:2,4", "--prefix-tokens", "2", "--layout", "axial"],
                       ["--coords", "grid:2,4", "--prefix-tokens", "2", "--layout", "axial",
                        "--merge-window", "2"]),
    "--inv-freq": ([], ["--inv-freq", "{invf}"]),
    "--angles": ([], ["--angles", "{angles}"]),
    # The caller's cos/sin tables (one row for the pair), refused by the framework modes;
    # the offsets of the batch's one entry.
    "--cos": ([], ["--cos", "{tcos}", "--sin", "{tsin}"]),
    "--sin": ([], ["--sin", "{tsin}", "--cos", "{tcos}"]),
    "--seqlen-offsets": ([], ["--seqlen-offsets", "{offs}"]),
    "--torch-ops": (["--cos", "{tcos}", "--sin", "{tsin}"],
                    ["--cos", "{tcos}", "--sin", "{tsin}", "--torch-ops"]),
}
# Options of `posenc rope` alone (the layout, coordinates and angles).
ROPE_ONLY = ("--rope2d", "--rope2d-ids", "--order", "--mrope-section", "--mrope-interleaved",
             "--layout", "--coords", "--freq-scale", "--prefix-tokens", "--merge-window",
             "--inv-freq", "--angles", "--cos", "--sin", "--seqlen-offsets",
             "--torch-ops")

KV_NEW = ["--cache-seqlens", "{cs1}", "--k-new", "{kn}", "--v-new", "{vn}"]
KV_ROT = KV_NEW + ["--rotary-cos", "{rcos}", "--rotary-sin", "{rsin}"]
ATTENTION_ROWS = {
    "--scale": ([], ["--scale", "0.5"]),
    "--causal": ([], ["--causal"]),
    "--window": ([], ["--window", "2"]),
    "--sliding-window": ([], ["--sliding-window", "3"]),
    "--chunk-size": ([], ["--chunk-size", "4"]),
    # StreamingLLM sink tokens: the first keys seen left of a window.
    "--sink-tokens": (["--window", "1"], ["--window", "1", "--sink-tokens", "2"]),
    "--attn-temperature": ([], ["--attn-temperature", "0.5", "2"]),
    "--llama4-scaling": ([], ["--llama4-scaling", "0.5", "2"]),
    "--key-lengths": ([], ["--key-lengths", "{klen}"]),
    # FlashAttention's per-entry lengths: causal aligned to each entry's own; refused by
    # --arith hf.
    "--seqused-q": (["--causal"], ["--causal", "--seqused-q", "{qlen}"]),
    "--seqused-k": (["--causal"], ["--causal", "--seqused-k", "{klen}"]),
    # FlashAttention's varlen form (packed q [6, 4, 8], k, v [10, 2, 8]): one sequence
    # against two, and other key boundaries; refused by --arith hf.
    "--cu-seqlens-q": (["--cu-seqlens-q", "{cuq1}", "--cu-seqlens-k", "{cuk1}", "--causal"],
                       ["--cu-seqlens-q", "{cuq}", "--cu-seqlens-k", "{cuk}", "--causal"]),
    "--cu-seqlens-k": (["--cu-seqlens-q", "{cuq}", "--cu-seqlens-k", "{cuk}", "--causal"],
                       ["--cu-seqlens-q", "{cuq}", "--cu-seqlens-k", "{cuk2}", "--causal"]),
    "--mask": ([], ["--mask", "{mask}"]),
    "--alibi": ([], ["--alibi"]),
    "--alibi-max-bias": (["--alibi"], ["--alibi", "--alibi-max-bias", "4"]),
    # FlashAttention's alibi_slopes [hq] (tests/reference/test_attention_alibi_slopes.py
    # checks the numbers), refused by --arith hf.
    "--alibi-slopes": ([], ["--alibi-slopes", "{slopes}"]),
    "--t5-bias": ([], ["--t5-bias", "{t5}"]),
    "--t5-buckets": (["--t5-bias", "{t5_8}", "--t5-buckets", "8"],
                     ["--t5-bias", "{t5_6}", "--t5-buckets", "6"]),
    "--t5-max-distance": (["--t5-bias", "{t5}"], ["--t5-bias", "{t5}", "--t5-max-distance", "9"]),
    "--t5-causal": (["--t5-bias", "{t5}"], ["--t5-bias", "{t5}", "--t5-causal"]),
    # Phi-4 audio's clipped distances: 12 rows, M 6 (asymmetric) or M 12 (symmetric).
    "--clipped-bias": ([], ["--clipped-bias", "{clip}"]),
    "--clipped-symmetric": (["--clipped-bias", "{clip}"],
                            ["--clipped-bias", "{clip}", "--clipped-symmetric"]),
    "--wavlm-gate": (["--t5-bias", "{t5}"], ["--t5-bias", "{t5}", "--wavlm-gate", "{gx}", "{gw}",
                                              "{gb}", "{gc}"]),
    # LongT5's side keys (square queries): 10 keys in 3 blocks of 3, or 2 of 4 or 5
    # (token 4 in block 1, then 0: the bias by block distance moves).
    "--global-kv": ([], ["--global-kv", "{kg}", "{vg}", "--global-block-size", "3"]),
    "--global-block-size": (["--global-kv", "{kg2}", "{vg2}", "--global-block-size", "4",
                             "--global-bias", "{gbias}"],
                            ["--global-kv", "{kg2}", "{vg2}", "--global-block-size", "5",
                             "--global-bias", "{gbias}"]),
    "--global-bias": (["--global-kv", "{kg}", "{vg}", "--global-block-size", "3"],
                      ["--global-kv", "{kg}", "{vg}", "--global-block-size", "3",
                       "--global-bias", "{gbias}"]),
    "--relative-k": ([], ["--relative-k", "{rk}"]),
    "--per-dim-scale": ([], ["--per-dim-scale", "{pds}"]),
    "--relative-proj": ([], ["--relative-proj", "{rproj}", "--relative-left", "2",
                             "--relative-right", "1"]),
    "--relative-v": ([], ["--relative-v", "{rv}"]),
    "--relative-sign": (["--relative-k", "{rk}"], ["--relative-k", "{rk}", "--relative-sign", "q-k"]),
    "--relative-beyond": (["--relative-k", "{rk}"],
                          ["--relative-k", "{rk}", "--relative-beyond", "zero"]),
    "--relative-left": (["--relative-k", "{rk}", "--relative-left", "2", "--relative-right", "2"],
                        ["--relative-k", "{rk}", "--relative-left", "3", "--relative-right", "1"]),
    "--relative-right": (["--relative-k", "{rk}", "--relative-left", "2", "--relative-right", "2"],
                         ["--relative-k", "{rk}", "--relative-left", "1", "--relative-right", "3"]),
    # SAM's decomposed relative positions: q (6 queries) on a 2 x 3 grid, k (10 keys)
    # on a 2 x 5 grid; the tables are resized (7 and 9 rows to 3 and 9).
    "--decomposed-rel-pos": ([], ["--decomposed-rel-pos", "{rph}", "{rpw}", "--grid", "2", "3",
                                  "--key-grid", "2", "5"]),
    "--grid": (["--decomposed-rel-pos", "{rph}", "{rpw}", "--grid", "2", "3",
                "--key-grid", "2", "5"],
               ["--decomposed-rel-pos", "{rph}", "{rpw}", "--grid", "3", "2",
                "--key-grid", "2", "5"]),
    "--key-grid": (["--decomposed-rel-pos", "{rph}", "{rpw}", "--grid", "2", "3",
                    "--key-grid", "2", "5"],
                   ["--decomposed-rel-pos", "{rph}", "{rpw}", "--grid", "2", "3",
                    "--key-grid", "5", "2"]),
    "--softcap": ([], ["--softcap", "0.5"]),
    "--sinks": ([], ["--sinks", "{sinks}"]),
    # FlashAttention-3's qv, fp8 descales [b, hk] and P rounding (tests/reference/
    # test_attention_qv_descale.py checks the numbers), refused by --arith hf.
    "--qv": ([], ["--qv", "{qvx}"]),
    "--q-descale": ([], ["--q-descale", "{dsq}"]),
    "--k-descale": ([], ["--k-descale", "{dsq}"]),
    "--v-descale": ([], ["--v-descale", "{dsq}"]),
    # vLLM's per-tensor fp8 KV-cache scales (tests/python/test_attention_kv_scale.py
    # checks the numbers), refused by --arith hf.
    "--k-scale": ([], ["--k-scale", "0.5"]),
    "--v-scale": ([], ["--v-scale", "2"]),
    "--p-dtype": ([], ["--p-dtype", "e4m3fn"]),
    "--masked-rows": (["--key-lengths", "{klen0}"], ["--key-lengths", "{klen0}",
                                                     "--masked-rows", "nan"]),
    "--dtype": ([], ["--dtype", "f64"]),
    "--rel-keys": ([], ["--rel-keys", "{relk}"]),
    "--content-bias": (["--rel-keys", "{relk}"], ["--rel-keys", "{relk}", "--content-bias", "{u}"]),
    "--position-bias": (["--rel-keys", "{relk}"],
                        ["--rel-keys", "{relk}", "--position-bias", "{u}"]),
    # XLNet's segment term needs both: one row for the pair.
    "--segment-ids": (["--rel-keys", "{relk}"], ["--rel-keys", "{relk}", "--segment-embed",
                                                 "{segemb}", "--segment-ids", "{segids}"]),
    "--segment-embed": (["--rel-keys", "{relk}"], ["--rel-keys", "{relk}", "--segment-ids",
                                                   "{segids}", "--segment-embed", "{segemb}"]),
    "--segment-bias": (["--rel-keys", "{relk}", "--segment-ids", "{segids}", "--segment-embed",
                        "{segemb}"],
                       ["--rel-keys", "{relk}", "--segment-ids", "{segids}", "--segment-embed",
                        "{segemb}", "--segment-bias", "{u}"]),
    # Funnel: the shift over 6 pooled queries and 10 keys (22 rows), the projection of
    # unprojected rows [10, d_model 6], the factorized tables, token_type_mat, cls_mask.
    "--rel-shift": (["--rel-keys", "{relf}"], ["--rel-keys", "{relf}", "--rel-shift", "2"]),
    "--rel-kernel": (["--rel-keys", "{relk}"], ["--rel-keys", "{relraw}", "--rel-kernel",
                                                "{rker}"]),
    "--factorized": ([], ["--factorized", "{phi}", "{phi}", "{psi}", "{psi}", "--rel-kernel",
                          "{rker}"]),
    "--segment-index": (["--rel-keys", "{relk}"], ["--rel-keys", "{relk}", "--segment-index",
                                                   "{segidx}", "--segment-embed", "{segemb}"]),
    "--separate-cls": (["--rel-keys", "{relk}"], ["--rel-keys", "{relk}", "--separate-cls"]),
    "--pos-key": ([], ["--pos-key", "{posk}"]),
    "--pos-query": ([], ["--pos-query", "{posk}"]),
    "--position-buckets": (["--pos-key", "{posk}"],
                           ["--pos-key", "{posk}", "--position-buckets", "2"]),
    "--max-relative-positions": (["--pos-key", "{posk}", "--position-buckets", "0"],
                                 ["--pos-key", "{posk}", "--position-buckets", "0",
                                  "--max-relative-positions", "2"]),
    "--hf-config": ([], ["--hf-config", "{attn_cfg}"]),
    "--layer-type": (["--hf-config", "{typed_cfg}"],
                     ["--hf-config", "{typed_cfg}", "--layer-type", "sliding_attention"]),
    "--layer": (["--hf-config", "{typed_cfg}"], ["--hf-config", "{typed_cfg}", "--layer", "0"]),
    "--precision": ([], ["--precision", "f32"]),
    # The gradients (dq is emitted in place of the output; tests/reference/
    # test_attention_backward.py checks them), refused under --arith hf.
    "--grad-output": ([], ["--grad-output", "{do}"]),
    # A given forward (FlashAttention's out and softmax_lse, which go together: one row for
    # the pair) instead of the recomputed one: values other than the forward's move dq
    # (tests/python/test_attention_grad_forward.py checks them against torch, and that
    # posenc's own forward gives the recomputing run's bytes).
    "--forward-output": (["--grad-output", "{do}"],
                         ["--grad-output", "{do}", "--forward-output", "{fout}",
                          "--forward-lse", "{flse}"]),
    "--forward-lse": (["--grad-output", "{do}"],
                      ["--grad-output", "{do}", "--forward-lse", "{flse}",
                       "--forward-output", "{fout}"]),
    # FlashAttention's KV-cache step (-k/-v the caches [1, 2, 10, 8], Q [1, 4, 10, 8] bshd;
    # tests/reference/test_attention_kvcache.py checks the numbers), refused by --arith hf.
    "--cache-seqlens": ([], ["--cache-seqlens", "{cs1}"]),
    "--cache-leftpad": (["--cache-seqlens", "{cs2}"],
                        ["--cache-seqlens", "{cs2}", "--cache-leftpad", "{cs1}"]),
    "--k-new": (["--cache-seqlens", "{cs1}"],
                ["--cache-seqlens", "{cs1}", "--k-new", "{kn}", "--v-new", "{vn}"]),
    "--v-new": (["--cache-seqlens", "{cs1}"],
                ["--cache-seqlens", "{cs1}", "--v-new", "{vn}", "--k-new", "{kn}"]),
    "--rotary-cos": (KV_NEW, KV_NEW + ["--rotary-cos", "{rcos}", "--rotary-sin", "{rsin}"]),
    "--rotary-sin": (KV_NEW, KV_NEW + ["--rotary-sin", "{rsin}", "--rotary-cos", "{rcos}"]),
    "--rotary-seqlens": (KV_ROT, KV_ROT + ["--rotary-seqlens", "{cs0}"]),
    "--rotary-interleaved": (KV_ROT, KV_ROT + ["--rotary-interleaved"]),
    # Packed new keys (two, [2, hk, d]) against one batched.
    "--cu-seqlens-k-new": (KV_NEW, ["--cache-seqlens", "{cs0}", "--k-new", "{knp}", "--v-new",
                                    "{vnp}", "--cu-seqlens-k-new", "{cun}"]),
}
# The RoPE options of `attention --rope`, over a base of --rope.
ATTENTION_ROPE = {k: (["--rope"] + b, ["--rope"] + w) for k, (b, w) in ROPE_ROWS.items()
                  if k not in ROPE_ONLY + ("--inverse", "--axes", "--dtype", "--precision",
                                           "--hf-config", "--layer-type", "--layer")}
ATTENTION_ROPE["--inverse"] = (["--rope"], ["--rope", "--inverse"])
# Scores depend on position differences alone: in the exact (f64) arithmetic --start moves
# only bits that an f32 output rounds away, so the row writes f64.
ATTENTION_ROPE["--start"] = (["--rope", "--dtype", "f64"], ["--rope", "--dtype", "f64",
                                                            "--start", "5"])

# The options the backward honours beyond the forward's rows, over a base of
# --grad-output (dq emitted; tests/reference/test_attention_backward_qv.py checks dqv).
ATTENTION_GRADIENTS = {
    "--qv": (["--grad-output", "{do}"], ["--grad-output", "{do}", "--qv", "{qvx}"]),
    # Packed sequences (tests/reference/test_attention_backward_varlen.py checks them).
    "--cu-seqlens-q": (["--grad-output", "{dop}", "--cu-seqlens-q", "{cuq1}", "--cu-seqlens-k",
                        "{cuk1}", "--causal"],
                       ["--grad-output", "{dop}", "--cu-seqlens-q", "{cuq}", "--cu-seqlens-k",
                        "{cuk}", "--causal"]),
    # The relative score terms through the backward (tests/python/
    # test_attention_grad_relative.py checks them and their tensors' gradients against
    # torch autograd).
    "--rel-keys": (["--grad-output", "{do}"], ["--grad-output", "{do}", "--rel-keys", "{relk}"]),
    "--content-bias": (["--grad-output", "{do}", "--rel-keys", "{relk}"],
                       ["--grad-output", "{do}", "--rel-keys", "{relk}", "--content-bias", "{u}"]),
    "--pos-key": (["--grad-output", "{do}"], ["--grad-output", "{do}", "--pos-key", "{posk}"]),
    # Score terms through the backward (tests/python/test_attention_grad_terms.py checks
    # them and their tables' gradients against torch autograd).
    "--clipped-bias": (["--grad-output", "{do}"],
                       ["--grad-output", "{do}", "--clipped-bias", "{clip}"]),
    "--decomposed-rel-pos": (["--grad-output", "{do}"],
                             ["--grad-output", "{do}", "--decomposed-rel-pos", "{rph}", "{rpw}",
                              "--grid", "2", "3", "--key-grid", "2", "5"]),
    "--per-dim-scale": (["--grad-output", "{do}"],
                        ["--grad-output", "{do}", "--per-dim-scale", "{pds}"]),
    "--relative-proj": (["--grad-output", "{do}"],
                        ["--grad-output", "{do}", "--relative-proj", "{rproj}",
                         "--relative-left", "2", "--relative-right", "1"]),
    "--wavlm-gate": (["--grad-output", "{do}", "--t5-bias", "{t5}"],
                     ["--grad-output", "{do}", "--t5-bias", "{t5}", "--wavlm-gate", "{gx}", "{gw}",
                      "{gb}", "{gc}"]),
    # LongT5's side keys (tests/python/test_attention_grad_global.py checks them and
    # their gradients against torch autograd).
    "--global-kv": (["--grad-output", "{dos}"],
                    ["--grad-output", "{dos}", "--global-kv", "{kg}", "{vg}",
                     "--global-block-size", "3"]),
    "--global-bias": (["--grad-output", "{dos}", "--global-kv", "{kg}", "{vg}",
                       "--global-block-size", "3"],
                      ["--grad-output", "{dos}", "--global-kv", "{kg}", "{vg}",
                       "--global-block-size", "3", "--global-bias", "{gbias}"]),
}

TABLE_ROWS = {k: v for k, v in ROPE_ROWS.items()
              if k not in ROPE_ONLY + ("--axes",)}
# Refused by table rope (they place the rotation in an input): over a base that works.
TABLE_ROWS["--rotary-last"] = (["--rotary-dim", "4"], ["--rotary-dim", "4", "--rotary-last"])
TABLE_ROWS["--rope-interleave"] = ([], ["--rope-interleave"])
TABLE_ROWS["--no-rotary-last"] = ([], ["--no-rotary-last"])
TABLE_ROWS["--no-rope-interleave"] = ([], ["--no-rope-interleave"])


def array(data):
    return np.load(io.BytesIO(data)).astype(np.float64)


def distance(a, b):
    """Largest absolute difference, NaN where exactly one side is NaN counting as inf;
    arrays of other shapes are infinitely far apart."""
    if a.shape != b.shape:
        return np.inf
    both = np.isnan(a) & np.isnan(b)
    d = np.abs(np.where(both, 0, a) - np.where(both, 0, b))
    return float(np.nan_to_num(d, nan=np.inf).max(initial=0.0))


def long_options(*command):
    out = subprocess.run([BIN, *command, "--help"], capture_output=True, text=True).stdout
    return sorted(set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", out, re.M)) - {"--help"})


class OptionMatrix(PosencTestCase):
    rng = np.random.default_rng(3)

    def setUp(self):
        super().setUp()
        r = self.rng
        f = {}
        def save(name, a):
            f[name] = self.npy(f"{name}.npy", a)
        # attention: q [1, 4, 6, 8], k/v [1, 2, 10, 8] (GQA 2:1); square [1, 4, 10, 8].
        save("q", r.standard_normal((1, 4, 6, 8)).astype(np.float32))
        save("k", r.standard_normal((1, 2, 10, 8)).astype(np.float32))
        save("v", r.standard_normal((1, 2, 10, 8)).astype(np.float32))
        save("qs", r.standard_normal((1, 4, 10, 8)).astype(np.float32))
        save("ids", np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], np.int64))
        save("ids2", np.stack([np.arange(10) // 3, np.arange(10) % 3]).astype(np.int64))
        save("ids3", np.stack([np.zeros(10), np.arange(10) // 3, np.arange(10) % 3]).astype(np.int64))
        save("cu", np.array([0, 4, 10], np.int64))
        save("klen", np.array([7], np.int64))
        save("qlen", np.array([4], np.int64))
        # Packed Q, K, V (shd) and their boundaries (--cu-seqlens-q/-k).
        save("qp", r.standard_normal((6, 4, 8)).astype(np.float32))
        save("kp", r.standard_normal((10, 2, 8)).astype(np.float32))
        save("vp", r.standard_normal((10, 2, 8)).astype(np.float32))
        for name, cu in (("cuq1", [0, 6]), ("cuk1", [0, 10]), ("cuq", [0, 2, 6]),
                         ("cuk", [0, 5, 10]), ("cuk2", [0, 3, 10])):
            save(name, np.array(cu, np.int32))
        save("klen0", np.array([0], np.int64))
        save("mask", r.standard_normal((6, 10)) > 0)
        save("t5", r.standard_normal((32, 4)).astype(np.float32))
        save("t5_8", r.standard_normal((8, 4)).astype(np.float32))
        save("t5_6", r.standard_normal((6, 4)).astype(np.float32))
        save("rk", r.standard_normal((5, 8)).astype(np.float32))
        save("rv", r.standard_normal((5, 8)).astype(np.float32))
        save("sinks", r.standard_normal(4).astype(np.float32))
        save("slopes", (r.random(4) * 0.3).astype(np.float32))
        save("qvx", r.standard_normal((1, 4, 6, 8)).astype(np.float32))
        save("dop", r.standard_normal((6, 4, 8)).astype(np.float32))  # packed dO
        save("dsq", np.array([[0.5, 2.0]], np.float32))
        save("rph", r.standard_normal((7, 8)).astype(np.float32))
        save("clip", r.standard_normal((12, 4)).astype(np.float32))
        # Gemma-3n audio: per_dim_scale [d], pos_proj.weight [4 heads x 8, 6].
        save("pds", r.standard_normal(8).astype(np.float32))
        save("rproj", r.standard_normal((32, 6)).astype(np.float32))
        # WavLM's gate: hidden states [1, 6, 4 heads x 5], gru_rel_pos_linear, const.
        save("gx", r.standard_normal((1, 6, 20)).astype(np.float32))
        save("gw", r.standard_normal((8, 5)).astype(np.float32))
        save("gb", r.standard_normal(8).astype(np.float32))
        save("gc", r.standard_normal((1, 4, 1, 1)).astype(np.float32))
        save("rpw", r.standard_normal((9, 8)).astype(np.float32))
        for n in (3, 2):  # LongT5's side keys and values of n global blocks
            save(f"kg{'' if n == 3 else n}", r.standard_normal((1, 2, n, 8)).astype(np.float32))
            save(f"vg{'' if n == 3 else n}", r.standard_normal((1, 2, n, 8)).astype(np.float32))
        save("gbias", r.standard_normal((32, 4)).astype(np.float32))
        save("relk", r.standard_normal((10, 4, 8)).astype(np.float32))
        save("u", r.standard_normal((4, 8)).astype(np.float32))
        save("segemb", r.standard_normal((2, 4, 8)).astype(np.float32))
        save("segids", np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 1], np.int64))
        save("posk", r.standard_normal((1024, 4, 8)).astype(np.float32))
        save("relf", r.standard_normal((22, 4, 8)).astype(np.float32))
        save("relraw", r.standard_normal((10, 6)).astype(np.float32))
        save("rker", r.standard_normal((6, 4, 8)).astype(np.float32))
        save("phi", r.standard_normal((6, 6)).astype(np.float32))
        save("psi", r.standard_normal((10, 6)).astype(np.float32))
        save("segidx", r.standard_normal((6, 10)) > 0)
        # rope: x [1, 4, 10, 8].
        save("x", r.standard_normal((1, 4, 10, 8)).astype(np.float32))
        save("invf", r.uniform(0.1, 1, (1, 4)))
        save("angles", r.uniform(-3, 3, (10, 4)))
        save("tcos", r.uniform(-1, 1, (13, 4)).astype(np.float16))
        save("tsin", r.uniform(-1, 1, (13, 4)).astype(np.float16))
        save("offs", np.array([3], np.int64))
        save("do", r.standard_normal((1, 4, 6, 8)).astype(np.float32))  # attention's dO
        # Square Q's dO, drawn apart so that the fixtures after it keep their values.
        save("dos", np.random.default_rng(1).standard_normal((1, 4, 10, 8)).astype(np.float32))
        for n in (0, 1, 2):  # KV cache: cache_seqlens (and leftpad, rotary_seqlens) [1]
            save(f"cs{n}", np.array([n], np.int32))
        save("kn", r.standard_normal((1, 1, 10, 8)).astype(np.float32))
        save("vn", r.standard_normal((1, 1, 10, 8)).astype(np.float32))
        save("knp", r.standard_normal((2, 10, 8)).astype(np.float32))  # packed new keys
        save("vnp", r.standard_normal((2, 10, 8)).astype(np.float32))
        save("cun", np.array([0, 2], np.int64))
        save("rcos", r.standard_normal((4, 2)).astype(np.float32))
        save("rsin", r.standard_normal((4, 2)).astype(np.float32))
        # A forward's out [1, 4, 6, 8] and lse [1, 4, 6] for the gradients, drawn apart so
        # that the fixtures above keep their values.
        f2 = np.random.default_rng(2)
        save("fout", f2.standard_normal((1, 4, 6, 8)).astype(np.float32))
        save("flse", (f2.standard_normal((1, 4, 6)) + 3).astype(np.float32))
        base = {"model_type": "mistral", "num_attention_heads": 4, "num_key_value_heads": 2,
                "hidden_size": 32, "head_dim": 8}
        f["rope_cfg"] = self.config("rope.json", dict(base, rope_theta=77.0))
        f["attn_cfg"] = self.config("attn.json", dict(base, sliding_window=3))
        f["yarn_cfg"] = self.config("yarn.json", dict(
            base, max_position_embeddings=64,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}))
        f["typed_cfg"] = self.config("typed.json", dict(
            base, model_type="gemma3_text", sliding_window=3, num_hidden_layers=2,
            layer_types=["sliding_attention", "full_attention"], rope_local_base_freq=100.0,
            query_pre_attn_scalar=8))
        self.files = f

    def config(self, name, cfg):
        with open(self.path(name), "w") as fh:
            json.dump(cfg, fh)
        return self.path(name)

    def fill(self, args):
        return [a.format(**self.files) if "{" in a else a for a in args]

    def result(self, command, args, mode, square=False):
        """(exit status, stderr, output bytes or None)."""
        out = self.path("out.npy")
        if os.path.exists(out):
            os.remove(out)
        f = self.files
        if command == "attention":
            head = ["attention", "-q", f["qs"] if square else f["q"], "-k", f["k"], "-v", f["v"],
                    "--emit", "dq" if "--grad-output" in args else "output"]
            if "--cu-seqlens-q" in args:  # packed Q, K and V
                head[1:7] = ["-q", f["qp"], "-k", f["kp"], "-v", f["vp"]]
        elif command == "rope":
            head = ["rope", f["x"]]
        else:
            head = ["table", "rope", "--positions", "10", "--dim", "8", "--emit", "cos-sin"]
        p = run(*head, *self.fill(args), "--arith", mode, "-o", out)
        data = None
        if p.returncode == 0:
            with open(out, "rb") as fh:
                data = fh.read()
        return p.returncode, p.stderr, data

    def check_rows(self, command, rows, modes):
        for option, (base, with_option) in rows.items():
            square = any(o in with_option for o in ("--cu-seqlens", "--pos-query", "--global-kv",
                                                    "--cache-seqlens"))
            exact = {}
            for mode in modes:
                with self.subTest(command=command, option=option, mode=mode):
                    b = self.result(command, base, mode, square)
                    w = self.result(command, with_option, mode, square)
                    if w[0] == 2 and b[0] == 0:
                        # Refused for the mode, or (table rope) as meaningless there.
                        self.assertRegex(w[1], r"--arith|arith " + mode + "|" + option,
                                         f"{option} refused without naming the mode")
                        continue
                    if b[0] == 2 and w[0] == 2:
                        # The base itself is refused in this mode (e.g. --rope2d under hf).
                        self.assertRegex(b[1], r"--arith|arith")
                        continue
                    self.assertEqual(b[0], 0, b[1])
                    self.assertEqual(w[0], 0, w[1])
                    self.assertTrue(b[2] != w[2], f"{option} ignored under --arith {mode}")
                    if mode == "exact":
                        continue
                    # The option moves the framework's result towards what it means: the
                    # exact result with the option (which tests/reference checks against
                    # independent references) under the mode's own conventions (Meta's
                    # code pairs (2i, 2i+1)): nearer than without it, or equal to it
                    # within float32 rounding where the option barely moves the numbers
                    # (--start under attention, whose RoPE terms are relative).
                    ref_args = list(with_option)
                    if mode == "meta" and "--style" not in ref_args:
                        ref_args += ["--style", "gptj"]
                    key = tuple(ref_args)
                    if key not in exact:
                        exact[key] = self.result(command, ref_args, "exact", square)
                    if exact[key][0] != 0:
                        continue
                    ref, wa, ba = array(exact[key][2]), array(w[2]), array(b[2])
                    if wa.shape == ba.shape and np.array_equal(wa, ba, equal_nan=True):
                        continue  # the same values in another dtype (--dtype)
                    near = 1e-5 * max(1.0, float(np.nanmax(np.abs(ref), initial=0.0)))
                    dw, db = distance(wa, ref), distance(ba, ref)
                    self.assertTrue(dw < db or dw <= near,
                                    f"{option} under --arith {mode}: {dw} from the exact result "
                                    f"with it, {db} without it")

    def test_every_option_has_a_row(self):
        for command, rows in ((("attention",), {**ATTENTION_ROWS, **ATTENTION_ROPE}),
                              (("rope",), ROPE_ROWS), (("table", "rope"), TABLE_ROWS)):
            exempt = NOT_NUMBERS_ATTENTION if command == ("attention",) else set()
            missing = [o for o in long_options(*command)
                       if o not in rows and o not in NOT_NUMBERS and o not in exempt
                       and o not in ("--output", "--force", "--threads", "--quiet", "--verbose")]
            self.assertEqual(missing, [], f"{' '.join(command)}: options without a row")

    def test_attention(self):
        self.check_rows("attention", ATTENTION_ROWS, ("exact", "hf"))

    def test_attention_rope(self):
        self.check_rows("attention", ATTENTION_ROPE, ("exact", "hf"))

    def test_attention_gradients(self):
        self.check_rows("attention", ATTENTION_GRADIENTS, ("exact", "hf"))

    def test_rope(self):
        self.check_rows("rope", ROPE_ROWS, ("exact", "hf", "meta", "ggml"))

    def test_table_rope(self):
        self.check_rows("table", TABLE_ROWS, ("exact", "hf", "meta", "ggml"))
