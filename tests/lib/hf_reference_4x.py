"""The RoPE init functions of HF transformers 4.x releases, where they differ from v5's
(hf_reference.py), written from each release's modeling_rope_utils.py, in float64 torch,
independent of posenc. 4.x releases read `rope_scaling` (never `rope_parameters`) and
take `original_max_position_embeddings` as each function reads it, with no
standardisation:

- yarn, 4.43-4.50 (form A): factor = rope_scaling["factor"]; the correction range is
  computed from config.max_position_embeddings; attention_factor = rope_scaling's, else
  0.1 * ln(factor) + 1 (mscale keys not read); low/high always floored/ceiled.
- yarn, 4.51-4.55 (form B, added with DeepSeek-V3): if "original_max_position_embeddings"
  is in rope_scaling, factor = max_position_embeddings / it, and it is the correction
  length (else max_position_embeddings); attention factor through get_mscale with
  mscale/mscale_all_dim; `truncate` read from 4.55 (gpt-oss).
- yarn, 4.56-4.57 (form C, PR #40320 "explicit factor > implicit factor"): factor =
  rope_scaling["factor"], the correction length rope_scaling's
  original_max_position_embeddings or max_position_embeddings.
- longrope, 4.45-4.57: if the config has a top-level original_max_position_embeddings,
  it is L0 and factor = max_position_embeddings / L0 (whatever rope_scaling says); else
  L0 = max_position_embeddings and factor = rope_scaling's; the long factors past L0.
- llama3, default, linear, dynamic: as in v5.
"""
import math

import torch

import hf_reference as hf


def _form(version):
    major, minor = version
    if major >= 5:
        return "D"
    return "A" if minor <= 50 else "B" if minor <= 55 else "C"


def rope_scaling(t):
    """The dict a 4.x rope init function reads: config.rope_scaling, "type" as rope_type."""
    rs = dict(t.get("rope_scaling") or {})
    rs.setdefault("rope_type", rs.get("type", "default"))
    if rs["rope_type"] == "su":
        rs["rope_type"] = "longrope"
    return rs


def rope_init(t, version, seq_len=None):
    """(inv_freq, attention_factor) as release `version` = (major, minor) computes them."""
    rs = rope_scaling(t)
    typ = rs["rope_type"]
    form = _form(version)
    if form == "D" or typ not in ("yarn", "longrope"):
        return hf.rope_init(t, seq_len=seq_len)
    base = float(t.get("rope_theta", 10000.0))
    dim = int(hf.head_dim(t) * t.get("partial_rotary_factor", 1.0))
    maxp = t["max_position_embeddings"]
    pos = hf._pow(base, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if typ == "longrope":
        if "original_max_position_embeddings" in t:
            l0 = t["original_max_position_embeddings"]
            factor = maxp / l0
        else:
            l0, factor = maxp, rs["factor"]
        att = rs.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(l0))
        ext = rs["long_factor"] if seq_len and seq_len > l0 else rs["short_factor"]
        return 1.0 / (torch.tensor(ext, dtype=torch.float64) * pos), att
    factor = rs["factor"]
    att = rs.get("attention_factor")
    truncate = True
    if form == "A":
        length = maxp
        if att is None:
            att = 0.1 * math.log(factor) + 1.0
    else:
        if form == "B" and "original_max_position_embeddings" in rs:
            factor = maxp / rs["original_max_position_embeddings"]
        length = rs.get("original_max_position_embeddings") or maxp
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        if att is None:
            att = (hf._yarn_mscale(factor, ms) / hf._yarn_mscale(factor, msa)) if ms and msa \
                else hf._yarn_mscale(factor)
        if version[1] >= 55:
            truncate = rs.get("truncate", True)
    return hf.yarn_inv_freq(base, dim, factor, length, rs.get("beta_fast") or 32,
                            rs.get("beta_slow") or 1, truncate), att
