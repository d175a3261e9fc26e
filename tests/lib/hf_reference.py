"""References written from HF transformers v5's own code, in float64 torch, independent
of posenc:
- config reading: PreTrainedConfig's text_config, the configuration classes' defaults
  and layer_types rules (configuration_gemma2/gemma3/gemma4/llama4/qwen2/deepseek_v3.py),
  RotaryEmbeddingConfigMixin.standardize_rope_params (modeling_rope_utils.py);
- the rope init functions of modeling_rope_utils.py (default, linear, dynamic, yarn,
  longrope, llama3, proportional) and dynamic_rope_update's stateful updates;
- model-specific rotary embeddings: PhimoeRotaryEmbedding (short_mscale / long_mscale),
  HunYuanDenseV1RotaryEmbedding (dynamic NTK-alpha);
- the applies: rotate_half apply_rotary_pos_emb, GLM's interleaved apply_rotary_pos_emb
  (glm, glm4, helium, ernie4_5, ernie4_5_moe, moonshine), DeepSeek-V3
  apply_rotary_pos_emb_interleave, Llama-4 / DeepSeek-V2 complex apply_rotary_emb,
  Qwen2-VL apply_multimodal_rotary_pos_emb, Qwen3-VL apply_interleaved_mrope, Qwen2-VL
  VisionRotaryEmbedding + apply_rotary_pos_emb_vision;
- masking_utils.py mask functions (causal_mask_function, sliding_window_overlay,
  chunked_overlay, sliding_window_bidirectional_overlay) on absolute cache positions,
  and the models' eager attention (Gemma-2 softcapping, gpt-oss sinks, Falcon and
  BLOOM ALiBi, Llama-4 temperature tuning, DeepSeek MLA scaling).
HF computes inv_freq in float32; these references compute everything in float64 so
that posenc's float64 results can be compared at rounding level.
"""
import json
import math

import torch

# --- configs ------------------------------------------------------------------------

# The defaults of HF's configuration classes for the keys the references read.
CLASS_DEFAULTS = {
    "gemma2": {"rope_theta": 10000.0, "head_dim": 256, "query_pre_attn_scalar": 256,
               "attn_logit_softcapping": 50.0, "sliding_window": 4096,
               "max_position_embeddings": 8192},
    "gemma3_text": {"rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
                    "head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "max_position_embeddings": 131_072},
    # Gemma3nTextConfig: default_theta {"global": 1e6, "local": 1e4}.
    "gemma3n_text": {"rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
                     "head_dim": 256, "sliding_window": 512, "max_position_embeddings": 32_768},
    "gemma4_text": {"head_dim": 256, "global_head_dim": 512, "sliding_window": 512,
                    "max_position_embeddings": 131_072},
    "llama4_text": {"rope_theta": 500000.0, "attention_chunk_size": 8192,
                    "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1,
                    "no_rope_layer_interval": 4},
    "deepseek_v3": {"rope_interleave": True},
    "phimoe": {"rope_theta": 1_000_000.0},  # PhimoeConfig.default_theta
    "olmo3": {"sliding_window": 4096, "max_position_embeddings": 2048},  # Olmo3Config
    "smollm3": {"rope_theta": 2_000_000.0, "num_hidden_layers": 36,  # SmolLM3Config
                "no_rope_layer_interval": 4},
    "exaone4": {"sliding_window": 4096, "sliding_window_pattern": 4,  # Exaone4Config
                "max_position_embeddings": 2048},
    "ernie4_5": {"rope_theta": 500_000.0},  # Ernie4_5Config.default_theta
    "ernie4_5_moe": {"rope_theta": 500_000.0},  # Ernie4_5_MoeConfig.default_theta
    "moonshine": {"partial_rotary_factor": 0.9, "max_position_embeddings": 512,
                  "hidden_size": 288, "encoder_num_attention_heads": 8},
}

# The configuration classes' attribute_map: attribute -> the key the file holds.
ATTRIBUTE_MAP = {
    "moonshine": {"num_attention_heads": "encoder_num_attention_heads",
                  "num_key_value_heads": "encoder_num_key_value_heads",
                  "num_hidden_layers": "encoder_num_hidden_layers"},
}


def load_text_config(path):
    """The text model's config (get_text_config), with its class defaults filled in."""
    with open(path) as f:
        root = json.load(f)
    t = dict(root.get("text_config", root))
    t.setdefault("model_type", root.get("model_type"))
    for k, v in CLASS_DEFAULTS.get(t["model_type"], {}).items():
        t.setdefault(k, v)
    for attr, key in ATTRIBUTE_MAP.get(t["model_type"], {}).items():
        if key in t:
            t.setdefault(attr, t[key])
    if t.get("qk_rope_head_dim") is not None:  # DeepseekV3Config
        t["head_dim"] = t["qk_rope_head_dim"]
        t["qk_head_dim"] = t["qk_nope_head_dim"] + t["qk_rope_head_dim"]
    return t


def layer_types(t):
    """config.layer_types as the configuration classes' __post_init__ builds it."""
    if t.get("layer_types"):
        return list(t["layer_types"])
    n, mt = t["num_hidden_layers"], t["model_type"]
    if mt == "gemma2":
        return ["sliding_attention" if bool((i + 1) % 2) else "full_attention" for i in range(n)]
    if mt == "smollm3":  # SmolLM3Config: NoPE layers slide with use_sliding_window
        slide = t.get("use_sliding_window") and t.get("sliding_window") is not None
        return ["sliding_attention" if slide and not layer_rotates(t, i) else "full_attention"
                for i in range(n)]
    if mt == "exaone4":  # Exaone4Config.__init__ (no window: pattern 0, every layer full)
        if t.get("sliding_window") is None:
            return ["full_attention"] * n
        p = t["sliding_window_pattern"]
        return ["sliding_attention" if (i + 1) % p != 0 else "full_attention" for i in range(n)]
    if mt == "afmoe":  # AfmoeConfig: every global_attn_every_n_layers-th layer full
        p = t.get("global_attn_every_n_layers", 4)
        return ["sliding_attention" if (i + 1) % p != 0 else "full_attention" for i in range(n)]
    if mt == "olmo3":  # Olmo3Config.__post_init__
        return ["sliding_attention" if (i + 1) % 4 != 0 else "full_attention" for i in range(n)]
    if mt == "gemma3n_text":  # Gemma3nTextConfig.__post_init__
        return ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(n)]
    if mt == "gemma3_text":
        p = t["sliding_window_pattern"]
        return ["sliding_attention" if bool((i + 1) % p) else "full_attention" for i in range(n)]
    if mt == "llama4_text":
        nr = t.get("no_rope_layers") or [int((i + 1) % t["no_rope_layer_interval"] != 0)
                                         for i in range(n)]
        return ["chunked_attention" if x else "full_attention" for x in nr]
    if mt in ("qwen2", "qwen2_vl"):
        sw = t.get("sliding_window") if t.get("use_sliding_window") else None
        return ["sliding_attention" if sw is not None and i >= t["max_window_layers"]
                else "full_attention" for i in range(n)]
    return ["sliding_attention" if t.get("sliding_window") else "full_attention"] * n


def rope_parameters(t, layer_type="full_attention"):
    """standardize_rope_params, then the layer type's dict (Gemma-3's legacy keys as its
    convert_rope_params_to_dict maps them)."""
    rp = dict(t.get("rope_parameters") or t.get("rope_scaling") or {})
    types = layer_types(t)
    # Gemma3nTextConfig.convert_rope_params_to_dict does the same as Gemma-3's.
    if t["model_type"] in ("gemma3_text", "gemma3n_text") and not (rp and set(rp) <= set(types)):
        full = dict(rp) if rp else {"rope_type": "default"}
        full.setdefault("rope_theta", t["rope_theta"])
        rp = {"full_attention": full,
              "sliding_attention": {"rope_type": "default",
                                    "rope_theta": t["rope_local_base_freq"]}}
    if t["model_type"] == "olmo3" and not (rp and set(rp) <= set(types)):
        # Olmo3Config.convert_rope_params_to_dict: rope_scaling updates full_attention
        # only; kwargs.pop("rope_theta", default_theta) gives full the file's rope_theta
        # and sliding (the key being gone by then) default_theta.
        full = {"rope_type": "default"}
        full.update(rp)
        full.setdefault("rope_theta", t.get("rope_theta", 500000.0))
        rp = {"full_attention": full,
              "sliding_attention": {"rope_type": "default", "rope_theta": 500000.0}}
    # The configuration classes' own renames: Phi3Config "su" -> "longrope", Qwen2-VL's
    # "mrope" -> the default frequencies.
    for key in ("type", "rope_type"):
        if rp.get(key) == "su":
            rp[key] = "longrope"
        if rp.get(key) == "mrope":
            rp[key] = "default"
    top_partial = t.get("partial_rotary_factor")
    if rp and set(rp) <= set(types) | {"full_attention", "sliding_attention"}:  # case 2
        d = dict(rp[layer_type])
        d.setdefault("rope_type", d.get("type", "default"))
        d.setdefault("rope_theta", t.get("rope_theta", 10000.0))
        if top_partial is not None:
            d["partial_rotary_factor"] = top_partial
        if d["rope_type"] in ("llama3", "yarn", "longrope"):
            d.setdefault("original_max_position_embeddings", t["max_position_embeddings"])
        return d
    d = rp  # case 1: one global dict
    d.setdefault("rope_type", d.get("type", "default"))
    d.setdefault("rope_theta", t.get("rope_theta", 10000.0))
    if top_partial is not None:
        d["partial_rotary_factor"] = top_partial
    if d["rope_type"] in ("llama3", "yarn", "longrope"):
        if "original_max_position_embeddings" in t:
            d["original_max_position_embeddings"] = t["original_max_position_embeddings"]
        else:
            d.setdefault("original_max_position_embeddings", t["max_position_embeddings"])
    return d


def head_dim(t, layer_type="full_attention"):
    if t["model_type"] == "gemma4_text" and layer_type == "full_attention":
        return t["global_head_dim"]  # per_layer_config of full layers
    return t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]


# --- rope init functions (modeling_rope_utils.py) --------------------------------------

def _pow(base, e):
    return torch.tensor([math.pow(base, float(x)) for x in e], dtype=torch.float64)


def _default(base, dim):
    return 1.0 / _pow(base, torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def _yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(base, dim, factor, length, beta_fast, beta_slow, truncate):
    """_compute_yarn_parameters' frequencies, the correction range computed from
    `length` (original_max_position_embeddings, or max_position_embeddings before 4.51)."""
    def corr(n):
        return (dim * math.log(length / (n * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    pos = _pow(base, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extra = 1 - ramp
    return (1 / (factor * pos)) * (1 - extra) + (1 / pos) * extra


def rope_init(t, layer_type="full_attention", seq_len=None):
    """(inv_freq, attention_factor) of ROPE_INIT_FUNCTIONS[rope_type](config, seq_len)."""
    d = rope_parameters(t, layer_type)
    typ, base = d["rope_type"], float(d["rope_theta"])
    hd = head_dim(t, layer_type)
    dim = int(hd * d.get("partial_rotary_factor", 1.0))
    maxp = t["max_position_embeddings"]
    if typ == "default":
        return _default(base, dim), 1.0
    if typ == "linear":
        return _default(base, dim) / d["factor"], 1.0
    if typ == "dynamic":
        seq = maxp if seq_len is None else max(seq_len, maxp)
        f = d["factor"]
        base = base * ((f * seq / maxp) - (f - 1)) ** (dim / (dim - 2))
        return _default(base, dim), 1.0
    if typ == "proportional":
        angles = int(d.get("partial_rotary_factor", 1.0) * hd // 2)
        inv = 1.0 / _pow(base, torch.arange(0, 2 * angles, 2, dtype=torch.float64) / hd)
        inv = torch.cat([inv, torch.zeros(hd // 2 - angles, dtype=torch.float64)])
        return inv / d.get("factor", 1.0), 1.0
    if typ == "llama3":
        inv = _default(base, dim)
        f, lff, hff = d["factor"], d["low_freq_factor"], d["high_freq_factor"]
        l0 = d["original_max_position_embeddings"]
        low_wl, high_wl = l0 / lff, l0 / hff
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > low_wl, inv / f, inv)
        with torch.no_grad():
            smooth = (l0 / wavelen - lff) / (hff - lff) if hff != lff else torch.zeros_like(inv)
        smoothed = (1 - smooth) * out / f + smooth * out
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, out), 1.0
    l0 = d["original_max_position_embeddings"]
    factor = d.get("factor") or maxp / l0
    if typ == "yarn":
        att = d.get("attention_factor")
        ms, msa = d.get("mscale"), d.get("mscale_all_dim")
        if att is None:
            att = (_yarn_mscale(factor, ms) / _yarn_mscale(factor, msa)) if ms and msa \
                else _yarn_mscale(factor)
        return yarn_inv_freq(base, dim, factor, l0, d.get("beta_fast") or 32,
                             d.get("beta_slow") or 1, d.get("truncate", True)), att
    if typ == "longrope":
        att = d.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(l0))
        ext = d["long_factor"] if seq_len and seq_len > l0 else d["short_factor"]
        ext = torch.tensor(ext, dtype=torch.float64)
        return 1.0 / (ext * _pow(base, torch.arange(0, dim, 2, dtype=torch.float64) / dim)), att
    raise ValueError(typ)


def phimoe_cos_sin(t, positions):
    """PhimoeRotaryEmbedding.forward (modular_phimoe.py): seq_len = max(position_ids) + 1;
    for a rope_type other than "default", mscale = long_mscale if seq_len >
    original_max_position_embeddings else short_mscale, and cos, sin are multiplied by
    it instead of the init function's attention_scaling; inv_freq is recomputed from
    the init function at that seq_len on every call."""
    positions = torch.as_tensor(positions)
    seq_len = int(positions.max()) + 1
    d = rope_parameters(t)
    inv, att = rope_init(t, seq_len=seq_len)
    mscale = None
    if d["rope_type"] != "default":
        mscale = d["long_mscale"] if seq_len > d["original_max_position_embeddings"] \
            else d["short_mscale"]
    return cos_sin(inv, positions, att if mscale is None else mscale)


def hunyuan_inv_freq(t, seq_len=None):
    """(inv_freq, attention_scaling) of HunYuanDenseV1RotaryEmbedding (modular_hunyuan_v1_dense.py,
    HunYuanMoEV1 the same) for one call whose largest position is seq_len - 1. Its
    __init__ ("DynamicNTKAlphaRotary"): rope_type "dynamic" with a truthy alpha gives
    base = rope_theta * alpha ** (head_dim / (head_dim - 2)) and attention_scaling 1.
    Its forward keeps Llama's @dynamic_rope_update, so a call with seq_len >
    max_position_embeddings grows to ROPE_INIT_FUNCTIONS["dynamic"] (plain dynamic NTK
    with the config's factor), and a shorter call afterwards resets to the alpha
    frequencies (original_inv_freq)."""
    d = rope_parameters(t)
    if d["rope_type"] == "dynamic" and d.get("alpha"):
        if seq_len is None or seq_len <= t["max_position_embeddings"]:
            dim = head_dim(t)
            base = float(d["rope_theta"]) * d["alpha"] ** (dim / (dim - 2))
            return _default(base, dim), 1.0
    return rope_init(t, seq_len=seq_len)


class StatefulRotary:
    """A rotary embedding module with dynamic_rope_update: `inv_freq` for each forward
    call from its position ids, keeping state across calls as HF does."""

    def __init__(self, t):
        self.t = t
        self.type = rope_parameters(t)["rope_type"]
        self.inv_freq, self.att = rope_init(t)
        self.original_inv_freq = self.inv_freq
        self.max_seq_len_cached = self.original_max_seq_len = t["max_position_embeddings"]

    def forward(self, position_ids):
        seq_len = int(max(position_ids)) + 1
        if self.type == "dynamic":
            if seq_len > self.max_seq_len_cached:  # growth
                self.inv_freq, self.att = rope_init(self.t, seq_len=seq_len)
                self.max_seq_len_cached = seq_len
            if seq_len < self.original_max_seq_len and \
                    self.max_seq_len_cached > self.original_max_seq_len:  # reset
                self.inv_freq = self.original_inv_freq
                self.max_seq_len_cached = self.original_max_seq_len
        elif self.type == "longrope":
            l0 = rope_parameters(self.t)["original_max_position_embeddings"]
            self.inv_freq = rope_init(self.t, seq_len=l0 + 1)[0] if seq_len > l0 \
                else self.original_inv_freq
        return cos_sin(self.inv_freq, torch.as_tensor(position_ids), self.att)


# --- applies ---------------------------------------------------------------------------

def cos_sin(inv_freq, positions, att=1.0):
    """The rotary embedding's forward: emb = cat(freqs, freqs); cos, sin * attention_scaling."""
    freqs = positions.to(torch.float64)[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos() * att, emb.sin() * att


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    """x [b, h, s, d], cos/sin [s, d] or [b, s, d] (unsqueezed at dim 1)."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return x * cos + rotate_half(x) * sin


def apply_partial(x, cos, sin, rotary_dim):
    """Models with partial rotary: rotate x[..., :R], pass the rest."""
    return torch.cat([apply_rotary_pos_emb(x[..., :rotary_dim], cos, sin), x[..., rotary_dim:]], -1)


def rotate_half_interleaved(x):
    """GLM's rotate_half (modeling_glm.py; Helium's and ERNIE-4.5's are copies): pairs
    (2i, 2i+1) become (-x[2i+1], x[2i])."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb_glm(x, cos, sin):
    """GLM's apply_rotary_pos_emb (modeling_glm.py), which Moonshine imports and Helium
    (HeliumModel) and ERNIE-4.5 (Ernie4_5 / Ernie4_5_Moe, in float32) copy: the NeoX
    table's first half repeat_interleave(2), then the interleaved rotate_half on
    x[..., :rotary_dim] and the rest passed through (Helium and ERNIE rotate the whole
    head). cos/sin [s, R] or [b, s, R] as the rotary embedding returns them."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    return torch.cat([xr * cos + rotate_half_interleaved(xr) * sin, xp], -1)


def apply_rotary_pos_emb_interleave(x, cos, sin):
    """DeepSeek-V3: de-interleave the pairs, then rotate_half."""
    b, h, s, d = x.shape
    x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return x * cos + rotate_half(x) * sin


def apply_rotary_emb_complex(x, inv_freq, positions):
    """Llama-4 / DeepSeek-V2 apply_rotary_emb: pairs (2i, 2i+1) as complex numbers, x of
    shape [b, s, h, d] as Llama-4 has it."""
    freqs = positions.to(torch.float64)[:, None] * inv_freq
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # [s, d/2]
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis[None, :, None, :]).flatten(3)


def mrope_cos_sin(inv_freq, position_ids, mrope_section, interleaved):
    """Qwen2-VL (chunked, apply_multimodal_rotary_pos_emb) or Qwen3-VL
    (apply_interleaved_mrope) cos/sin for position_ids [3, s]."""
    freqs = position_ids.to(torch.float64)[..., None] * inv_freq  # [3, s, R/2]
    if interleaved:
        f = freqs[0].clone()
        for dim, offset in enumerate((1, 2), start=1):
            length = mrope_section[dim] * 3
            f[..., offset:length:3] = freqs[dim, ..., offset:length:3]
        emb = torch.cat([f, f], -1)
        return emb.cos(), emb.sin()
    emb = torch.cat([freqs, freqs], -1)  # [3, s, R]
    sec = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(emb.cos().split(sec, dim=-1))], -1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(emb.sin().split(sec, dim=-1))], -1)
    return cos, sin


def vision_rope(x, pos_hw, theta=10000.0):
    """Qwen2-VL VisionRotaryEmbedding(head_dim / 2) on (h, w) ids [n, 2], then
    apply_rotary_pos_emb_vision on x [n, heads, d]."""
    d = x.shape[-1]
    dim = d // 2
    inv = 1.0 / _pow(theta, torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    seq = torch.arange(int(pos_hw.max()) + 1, dtype=torch.float64)
    freqs = torch.outer(seq, inv)
    rpe = freqs[pos_hw].flatten(1)  # [n, d/2]: h freqs then w freqs
    emb = torch.cat([rpe, rpe], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    return x * cos + rotate_half(x) * sin


# --- masks (masking_utils.py) and eager attention -------------------------------------------

def hf_mask(q_pos, kv_len, sliding_window=None, chunk_size=None, causal=True):
    """bool [sq, sk]: the and of causal_mask_function, sliding_window_overlay (or the
    bidirectional one without causal) and chunked_overlay, on absolute positions."""
    q = torch.as_tensor(q_pos)[:, None]
    kv = torch.arange(kv_len)[None, :]
    m = (kv <= q) if causal else torch.ones(len(q_pos), kv_len, dtype=torch.bool)
    if sliding_window is not None:
        m = m & (kv > q - sliding_window)
        if not causal:
            m = m & (kv < q + sliding_window)
    if chunk_size is not None:
        m = m & (kv // chunk_size == q // chunk_size)
    return m


def eager_attention(q, k, v, scaling, mask=None, softcap=None, sinks=None, bias=None):
    """HF eager_attention_forward (+ Gemma-2 softcapping, gpt-oss sinks) in float64.
    q [b, hq, sq, d], k/v [b, hk, sk, d]; mask bool [sq, sk]; bias [b|1, hq, sq, sk]."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # repeat_kv
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    if softcap is not None:
        w = torch.tanh(w / softcap) * softcap
    if bias is not None:
        w = w + bias
    if mask is not None:
        w = w.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        s = sinks.reshape(1, -1, 1, 1).expand(w.shape[0], -1, w.shape[-2], -1)
        comb = torch.cat([w, s], -1)
        comb = comb - comb.max(-1, keepdim=True).values
        p = torch.softmax(comb, -1)[..., :-1]
    else:
        p = torch.softmax(w, -1)
    return w, p, torch.matmul(p, v)


def bloom_alibi(slopes, kv_len):
    """build_alibi_tensor for an all-ones mask: slope * key position, [1, h, 1, sk]."""
    pos = torch.arange(kv_len, dtype=torch.float64)
    return (torch.as_tensor(slopes, dtype=torch.float64)[:, None] * pos)[None, :, None, :]


def falcon_alibi_attention(q, k, v, slopes, mask):
    """FalconAttention with alibi: (q k^T + alibi) * inv_norm_factor, mask, softmax."""
    s = torch.matmul(q, k.transpose(-1, -2))
    logits = (s + bloom_alibi(slopes, k.shape[2])) * (1.0 / math.sqrt(q.shape[-1]))
    logits = logits.masked_fill(~mask, float("-inf"))
    p = torch.softmax(logits, -1)
    return logits, p, torch.matmul(p, v)


def llama4_temperature(q, positions, attn_scale, floor_scale):
    """Llama4TextAttention on NoPE layers: q [b, s, h, d] times
    log1p(floor((pos + 1) / floor_scale)) * attn_scale + 1."""
    pos = torch.as_tensor(positions, dtype=torch.float64)
    scales = torch.log1p(torch.floor((pos + 1.0) / floor_scale)) * attn_scale + 1.0
    return q * scales.view(1, -1, 1, 1)


def llama4_attn_scale(q, positions, beta, period):
    """Ministral3Attention after RoPE: q [b, s, h, d] times _get_llama_4_attn_scale =
    1 + beta * log(1 + floor(cache_position / original_max_position_embeddings))."""
    pos = torch.as_tensor(positions, dtype=torch.float64)
    scales = 1 + beta * torch.log(1 + torch.floor(pos / period))
    return q * scales.view(1, -1, 1, 1)


def layer_rotates(t, layer_idx):
    """Whether the attention module of layer `layer_idx` applies RoPE:
    Exaone4Attention.forward `if self.sliding_window is None or self.is_sliding`,
    AfmoeAttention.forward `if self.is_local_attention`, SmolLM3Attention
    `self.use_rope = config.no_rope_layers[layer_idx]` (default: every
    no_rope_layer_interval-th layer NoPE); every layer elsewhere."""
    mt = t["model_type"]
    if mt == "smollm3":
        nr = t.get("no_rope_layers") or [
            int((i + 1) % t.get("no_rope_layer_interval", 4) != 0)
            for i in range(t["num_hidden_layers"])]
        return bool(nr[layer_idx])
    lt = layer_types(t)[layer_idx]
    if mt == "exaone4":
        return t.get("sliding_window") is None or lt == "sliding_attention"
    if mt == "afmoe":
        return lt == "sliding_attention"
    return True


def attention_scaling(t):
    """The attention modules' self.scaling: 1.0 for Gemma3nTextAttention and
    Gemma4TextAttention (q and k are RMS-normalised), query_pre_attn_scalar ** -0.5
    for Gemma-2/3, else head_dim ** -0.5."""
    if t["model_type"] in ("gemma3n_text", "gemma4_text"):
        return 1.0
    if t.get("query_pre_attn_scalar"):
        return t["query_pre_attn_scalar"] ** -0.5
    return head_dim(t) ** -0.5


def deepseek_scaling(t):
    """DeepseekV3Attention.scaling: qk_head_dim^-0.5, times mscale^2 when scaled."""
    scaling = t["qk_head_dim"] ** -0.5
    rp = rope_parameters(t)
    if rp.get("rope_type", "default") != "default":
        msa = rp.get("mscale_all_dim", 0)
        if msa:
            m = _yarn_mscale(rp["factor"], msa)
            scaling = scaling * m * m
    return scaling
