"""An independent torch reference for the Funnel Transformer's relative attention, written
from the structure of HF transformers' modeling_funnel.py (FunnelAttentionStructure:
get_position_embeds, stride_pool_pos, relative_pos, stride_pool, token_type_ids_to_mat,
the cls_mask; FunnelRelMultiheadAttention: relative_positional_attention for
attention_type "relative_shift" and "factorized", relative_token_type_attention, the
forward pass up to attn_vec). Dropout is left out (eval mode). Every function computes
in the dtype of its inputs (float64 in the tests).

`Structure` holds the config fields the position bookkeeping depends on (d_model,
separate_cls, truncate_seq); tensors use HF's layouts: q_head [b, sq, n, d], k_head and
v_head [b, sk, n, d], r_kernel [d_model, n, d], biases [n, d], seg_embed [2, n, d].
"""
import torch

INF = 1e6  # HF's masking constant: scores - INF * (1 - mask)


class Structure:
    def __init__(self, d_model, separate_cls=False, truncate_seq=False, dtype=torch.float64):
        self.d_model = d_model
        self.separate_cls = separate_cls
        self.truncate_seq = truncate_seq
        self.dtype = dtype

    def _inv_freq(self):
        half = self.d_model // 2
        idx = torch.arange(half, dtype=torch.int64).to(self.dtype)
        return 1.0 / (10000 ** (idx / half))

    # --- relative_shift position embeddings --------------------------------------
    def pool_positions(self, pos, block):
        """stride_pool_pos: every second position; with separate_cls the <cls> sits at
        1 - 2^block and the others start from pos[1] (pos[1:-1] with truncate_seq)."""
        if not self.separate_cls:
            return pos[::2]
        rest = pos[1:-1] if self.truncate_seq else pos[1:]
        cls = pos.new_tensor([1 - 2 ** block])
        return torch.cat([cls, rest[::2]])

    @staticmethod
    def rel_positions(pos, stride, pooled=None, shift=1):
        """relative_pos: from pooled[0] - pos[0] + shift * len(pooled) * stride down to
        pooled[0] - pos[-1], step -stride."""
        pooled = pos if pooled is None else pooled
        top = (pooled[0] - pos[0]) + shift * pooled.shape[0] * stride
        bottom = pooled[0] - pos[-1]
        return torch.arange(int(top), int(bottom) - 1, -stride, dtype=torch.long)

    def relative_shift_embeds(self, seq_len, num_blocks):
        """get_position_embeds for "relative_shift": per block [no pooling, pooling]
        (pooling None for block 0), each [rows, d_model], gathered from the sinusoid
        table of the relative positions -2 L .. 2 L - 1."""
        ids = torch.arange(-2 * seq_len, 2 * seq_len, dtype=torch.int64).to(self.dtype)
        angles = ids[:, None] * self._inv_freq()[None]
        table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        offset = 2 * seq_len

        def rows(rel):
            index = (rel + offset)[:, None].expand(rel.shape[0], self.d_model)
            return torch.gather(table, 0, index)

        pos = torch.arange(seq_len, dtype=torch.int64).to(self.dtype)
        pooled = pos
        out = []
        for block in range(num_blocks):
            pooling = None
            if block > 0:
                pooled = self.pool_positions(pos, block)
                pooling = rows(self.rel_positions(pos, 2 ** (block - 1), pooled, shift=2))
            pos = pooled
            out.append([rows(self.rel_positions(pos, 2 ** block)), pooling])
        return out

    # --- factorized position embeddings ----------------------------------------
    def factorized_embeds(self, seq_len):
        """get_position_embeds for "factorized": phi, pi, psi, omega [L, d_model]."""
        pos = torch.arange(seq_len, dtype=torch.int64).to(self.dtype)
        angles = pos[:, None] * self._inv_freq()[None]
        s, c = torch.sin(angles), torch.cos(angles)
        return (torch.cat([s, s], -1), torch.cat([c, c], -1), torch.cat([c, s], -1),
                torch.cat([-s, c], -1))

    # --- pooling of the attention inputs ----------------------------------------
    def stride_pool(self, t, axis):
        """stride_pool along one axis: with separate_cls the first entry is repeated in
        front before every second one is kept (the last dropped with truncate_seq)."""
        if t is None:
            return None
        axis %= t.ndim
        if self.separate_cls:
            t = torch.cat([t.narrow(axis, 0, 1), t], dim=axis)
        n = t.shape[axis]
        end = n - 1 if (self.separate_cls and self.truncate_seq) else n
        keep = torch.arange(0, end, 2)
        return t.index_select(axis, keep)

    def cls_mask(self, seq_len):
        """init_attention_inputs' cls_mask: ones with row 0 and column 0 zeroed."""
        if not self.separate_cls:
            return None
        m = torch.ones(seq_len, seq_len, dtype=self.dtype)
        m[0, :] = 0
        m[:, 0] = 0
        return m

    @staticmethod
    def token_type_mat(ids, cls_id=2):
        """token_type_ids_to_mat: same segment, or either token is <cls> (type 2)."""
        same = ids[:, :, None] == ids[:, None]
        cls = ids == cls_id
        return same | cls[:, :, None] | cls[:, None]


def relative_shift_gather(x, context_len, shift):
    """_relative_shift_gather on [b, n, sq, rlen]: read as [b, n, rlen, sq], drop the
    first `shift` rows, read as [b, n, sq, rlen - shift], keep context_len columns."""
    b, n, sq, rlen = x.shape
    x = x.reshape(b, n, rlen, sq)[:, :, shift:, :]
    return x.reshape(b, n, sq, rlen - shift)[..., :context_len]


def funnel_attention(q_head, k_head, v_head, r_w_bias, r_r_bias, r_kernel, *,
                     attention_type="relative_shift", r=None, factorized=None,
                     r_s_bias=None, seg_embed=None, token_type_mat=None,
                     attention_mask=None, cls_mask=None):
    """FunnelRelMultiheadAttention.forward up to attn_vec. `r` is the block's position
    embeddings for the shift HF picks (2 when sq != sk, else 1); `factorized` the
    (phi, pi, psi, omega) of the block. Returns the masked scores, probabilities and
    attn_vec [b, sq, n, d]."""
    d = q_head.shape[-1]
    sk = k_head.shape[1]
    scale = 1.0 / (d ** 0.5)
    q_head = q_head * scale
    content = torch.einsum("bind,bjnd->bnij", q_head + r_w_bias * scale, k_head)

    if attention_type == "factorized":
        phi, pi, psi, omega = factorized
        q_r = torch.einsum("binh,dnh->bind", q_head + r_r_bias * scale, r_kernel)
        positional = (torch.einsum("bind,jd->bnij", q_r * phi[:, None], psi)
                      + torch.einsum("bind,jd->bnij", q_r * pi[:, None], omega))
    else:
        shift = 2 if q_head.shape[1] != sk else 1
        r_head = torch.einsum("td,dnh->tnh", r, r_kernel)
        positional = torch.einsum("binh,tnh->bnit", q_head + r_r_bias * scale, r_head)
        positional = relative_shift_gather(positional, sk, shift)
    if cls_mask is not None:
        positional = positional * cls_mask

    token_type = 0
    if token_type_mat is not None:
        bias = torch.einsum("bind,snd->bnis", q_head + r_s_bias * scale, seg_embed)
        b, sq, _ = token_type_mat.shape
        mat = token_type_mat[:, None].expand(b, q_head.shape[2], sq, sk)
        diff, same = torch.split(bias, 1, dim=-1)
        token_type = torch.where(mat, same.expand(mat.shape), diff.expand(mat.shape))
        if cls_mask is not None:
            token_type = token_type * cls_mask

    score = content + positional + token_type
    if attention_mask is not None:
        score = score - INF * (1 - attention_mask[:, None, None].to(score.dtype))
    prob = torch.softmax(score, dim=-1)
    vec = torch.einsum("bnij,bjnd->bind", prob, v_head)
    return score, prob, vec
