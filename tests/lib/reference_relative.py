"""Independent references for Transformer-XL / XLNet relative attention, DeBERTa-v2
disentangled attention and absolute encodings, written from the published code (HF
transformers' modeling_transfo_xl.py, modeling_xlnet.py, modeling_deberta_v2.py; the
Annotated Transformer) with the same tensor operations, in torch. They take the dtype of
their inputs, so float32 inputs reproduce the frameworks' float32 arithmetic.
"""
import math

import torch


# ----------------------------------------------------------------------------------
# Transformer-XL (HF RelPartialLearnableMultiHeadAttn, PositionalEmbedding)

def transfo_xl_pos_emb(klen, d_model, clamp_len=0, dtype=torch.float32):
    """HF TransfoXLModel: pos_seq = arange(klen-1, -1, -1.0), clamp_(max=clamp_len),
    PositionalEmbedding: cat([sin, cos]) of outer(pos_seq, inv_freq)."""
    pos_seq = torch.arange(klen - 1, -1, -1.0, dtype=dtype)
    if clamp_len > 0:
        pos_seq.clamp_(max=clamp_len)
    inv_freq = 1 / (10000 ** (torch.arange(0.0, d_model, 2.0, dtype=dtype) / d_model))
    sinusoid_inp = torch.outer(pos_seq, inv_freq)
    return torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)


def transfo_xl_rel_shift(x):
    """HF RelPartialLearnableMultiHeadAttn._rel_shift on [qlen, rlen, ...]."""
    zero_pad_shape = (x.size(0), 1) + x.size()[2:]
    zero_pad = torch.zeros(zero_pad_shape, device=x.device, dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=1)
    x_padded_shape = (x.size(1) + 1, x.size(0)) + x.size()[2:]
    x_padded = x_padded.view(*x_padded_shape)
    return x_padded[1:].view_as(x)


def transfo_xl_attention(w_head_q, w_head_k, w_head_v, r_head_k, r_w_bias, r_r_bias,
                         causal=True):
    """HF RelPartialLearnableMultiHeadAttn.forward after the projections.

    w_head_q [qlen, b, n, d], w_head_k/v [klen, b, n, d], r_head_k [rlen=klen, n, d].
    Returns (attn_score [b, n, i, j] before masking, attn_prob [b, n, i, j],
    attn_vec [qlen, b, n, d])."""
    qlen, klen = w_head_q.size(0), w_head_k.size(0)
    scale = 1 / (w_head_q.size(-1) ** 0.5)
    rw_head_q = w_head_q + r_w_bias
    AC = torch.einsum("ibnd,jbnd->ijbn", (rw_head_q, w_head_k))
    rr_head_q = w_head_q + r_r_bias
    BD = torch.einsum("ibnd,jnd->ijbn", (rr_head_q, r_head_k))
    BD = transfo_xl_rel_shift(BD)
    attn_score = AC + BD
    attn_score = attn_score * scale
    raw = attn_score
    if causal:
        mlen = klen - qlen
        mask = torch.triu(torch.ones(qlen, klen, dtype=torch.uint8), diagonal=1 + mlen).bool()
        attn_score = attn_score.masked_fill(mask[:, :, None, None], torch.finfo(attn_score.dtype).min)
    attn_prob = torch.softmax(attn_score, dim=1)
    attn_vec = torch.einsum("ijbn,jbnd->ibnd", (attn_prob, w_head_v))
    return raw.permute(2, 3, 0, 1), attn_prob.permute(2, 3, 0, 1), attn_vec


# ----------------------------------------------------------------------------------
# XLNet (HF XLNetModel.relative_positional_encoding, XLNetRelativeAttention)

def xlnet_pos_emb(qlen, klen, d_model, attn_type="bi", clamp_len=-1, dtype=torch.float32):
    """HF XLNetModel.relative_positional_encoding with bi_data=False: [rlen, d_model]."""
    freq_seq = torch.arange(0, d_model, 2.0, dtype=dtype)
    inv_freq = 1 / torch.pow(10000, (freq_seq / d_model))
    if attn_type == "bi":
        beg, end = klen, -qlen
    else:
        beg, end = klen, -1
    fwd_pos_seq = torch.arange(beg, end, -1.0, dtype=dtype)
    if clamp_len > 0:
        fwd_pos_seq = fwd_pos_seq.clamp(-clamp_len, clamp_len)
    sinusoid_inp = torch.einsum("i,d->id", fwd_pos_seq, inv_freq)
    return torch.cat([torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)], dim=-1)


def rel_shift_bnij(x, klen=-1):
    """HF XLNetRelativeAttention.rel_shift_bnij."""
    x_size = x.shape
    x = x.reshape(x_size[0], x_size[1], x_size[3], x_size[2])
    x = x[:, :, 1:, :]
    x = x.reshape(x_size[0], x_size[1], x_size[2], x_size[3] - 1)
    x = torch.index_select(x, 3, torch.arange(klen, device=x.device, dtype=torch.long))
    return x


def xlnet_seg_mat(token_type_ids, mlen):
    """HF XLNetModel.forward: token_type_ids [qlen, bsz] -> one-hot seg_mat
    [qlen, klen, bsz, 2] (memory keys get segment 0)."""
    qlen, bsz = token_type_ids.shape
    if mlen > 0:
        mem_pad = torch.zeros([mlen, bsz], dtype=torch.long)
        cat_ids = torch.cat([mem_pad, token_type_ids], dim=0)
    else:
        cat_ids = token_type_ids
    seg_mat = (token_type_ids[:, None] != cat_ids[None, :]).long()
    return torch.nn.functional.one_hot(seg_mat, num_classes=2), cat_ids


def xlnet_rel_attn_core(q_head, k_head_h, v_head_h, k_head_r, r_w_bias, r_r_bias,
                        seg_mat=None, r_s_bias=None, seg_embed=None, attn_mask=None):
    """HF XLNetRelativeAttention.rel_attn_core (no dropout, no head mask).

    q_head [qlen, b, n, d], k_head_h/v_head_h [klen, b, n, d], k_head_r [rlen, b, n, d].
    Returns (attn_score [b, n, i, j] before masking, attn_prob, attn_vec [qlen, b, n, d])."""
    scale = 1 / (q_head.size(-1) ** 0.5)
    ac = torch.einsum("ibnd,jbnd->bnij", q_head + r_w_bias, k_head_h)
    bd = torch.einsum("ibnd,jbnd->bnij", q_head + r_r_bias, k_head_r)
    bd = rel_shift_bnij(bd, klen=ac.shape[3])
    if seg_mat is None:
        ef = 0
    else:
        ef = torch.einsum("ibnd,snd->ibns", q_head + r_s_bias, seg_embed)
        ef = torch.einsum("ijbs,ibns->bnij", seg_mat.to(q_head.dtype), ef)
    attn_score = (ac + bd + ef) * scale
    raw = attn_score
    if attn_mask is not None:
        attn_score = attn_score - 1e30 * torch.einsum("ijbn->bnij", attn_mask)
    attn_prob = torch.softmax(attn_score, dim=3)
    attn_vec = torch.einsum("bnij,jbnd->ibnd", attn_prob, v_head_h)
    return raw, attn_prob, attn_vec


# ----------------------------------------------------------------------------------
# DeBERTa-v2 (HF make_log_bucket_position, build_relative_position,
# DisentangledSelfAttention)

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (relative_pos < mid) & (relative_pos > -mid),
        torch.tensor(mid - 1).type_as(relative_pos),
        torch.abs(relative_pos),
    )
    log_pos = (
        torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
                   * (mid - 1)) + mid
    )
    bucket_pos = torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)
    return bucket_pos


def build_relative_position(query_size, key_size, bucket_size=-1, max_position=-1):
    q_ids = torch.arange(0, query_size)
    k_ids = torch.arange(0, key_size)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    rel_pos_ids = rel_pos_ids.to(torch.long)
    rel_pos_ids = rel_pos_ids[:query_size, :]
    return rel_pos_ids.unsqueeze(0)


def _heads_first(x):
    """[2span, n, d] projected embeddings -> transpose_for_scores layout [n, 2span, d]."""
    return x.permute(1, 0, 2).contiguous()


def deberta_attention(q, k, v, pos_key, pos_query, pos_att_type, position_buckets=256,
                      max_relative_positions=512, keep=None):
    """HF DisentangledSelfAttention.forward after the projections (no dropout).

    q [b, n, sq, d], k/v [b, n, sk, d]; pos_key/pos_query [rows, n, d] (the projected
    rel_embeddings before transpose_for_scores), rows >= 2 * span. keep: bool
    [b, n, sq, sk] or None. Returns (attention_scores [b, n, sq, sk], probs, context
    [b, n, sq, d])."""
    b, n, sq, d = q.shape
    sk = k.shape[2]
    query_layer = q.reshape(b * n, sq, d)
    key_layer = k.reshape(b * n, sk, d)
    value_layer = v.reshape(b * n, sk, v.shape[-1])
    scale_factor = 1
    if "c2p" in pos_att_type:
        scale_factor += 1
    if "p2c" in pos_att_type:
        scale_factor += 1
    scale = torch.sqrt(torch.tensor(query_layer.size(-1), dtype=torch.float) * scale_factor)
    attention_scores = torch.bmm(query_layer, key_layer.transpose(-1, -2) / scale.to(dtype=query_layer.dtype))

    att_span = position_buckets if position_buckets > 0 else max_relative_positions
    relative_pos = build_relative_position(sq, sk, bucket_size=position_buckets,
                                           max_position=max_relative_positions)
    relative_pos = relative_pos.unsqueeze(1)
    score = 0
    if "c2p" in pos_att_type:
        pos_key_layer = _heads_first(pos_key[0:att_span * 2]).repeat(b, 1, 1)
        scale = torch.sqrt(torch.tensor(pos_key_layer.size(-1), dtype=torch.float) * scale_factor)
        c2p_att = torch.bmm(query_layer, pos_key_layer.transpose(-1, -2))
        c2p_pos = torch.clamp(relative_pos + att_span, 0, att_span * 2 - 1)
        c2p_att = torch.gather(
            c2p_att, dim=-1,
            index=c2p_pos.squeeze(0).expand([query_layer.size(0), query_layer.size(1),
                                             relative_pos.size(-1)]))
        score += c2p_att / scale.to(dtype=c2p_att.dtype)
    if "p2c" in pos_att_type:
        pos_query_layer = _heads_first(pos_query[0:att_span * 2]).repeat(b, 1, 1)
        scale = torch.sqrt(torch.tensor(pos_query_layer.size(-1), dtype=torch.float) * scale_factor)
        if key_layer.size(-2) != query_layer.size(-2):
            r_pos = build_relative_position(key_layer.size(-2), key_layer.size(-2),
                                            bucket_size=position_buckets,
                                            max_position=max_relative_positions).unsqueeze(0)
        else:
            r_pos = relative_pos
        p2c_pos = torch.clamp(-r_pos + att_span, 0, att_span * 2 - 1)
        p2c_att = torch.bmm(key_layer, pos_query_layer.transpose(-1, -2))
        p2c_att = torch.gather(
            p2c_att, dim=-1,
            index=p2c_pos.squeeze(0).expand([query_layer.size(0), key_layer.size(-2),
                                             key_layer.size(-2)])).transpose(-1, -2)
        score += p2c_att / scale.to(dtype=p2c_att.dtype)
    attention_scores = attention_scores + score
    attention_scores = attention_scores.view(-1, n, sq, sk)
    if keep is None:
        keep = torch.ones_like(attention_scores, dtype=torch.bool)
    rmask = ~keep
    probs = attention_scores.masked_fill(rmask, torch.finfo(attention_scores.dtype).min)
    probs = torch.softmax(probs, -1).masked_fill(rmask, 0)
    context = torch.bmm(probs.view(-1, sq, sk), value_layer).view(b, n, sq, -1)
    return attention_scores, probs, context


# ----------------------------------------------------------------------------------
# Absolute encodings (the Annotated Transformer)

def annotated_pe(max_len, d_model, dtype=torch.float64):
    """The Annotated Transformer's PositionalEncoding buffer [max_len, d_model]
    (interleaved: pe[:, 0::2] = sin, pe[:, 1::2] = cos)."""
    pe = torch.zeros(max_len, d_model, dtype=dtype)
    position = torch.arange(0, max_len, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=dtype) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
