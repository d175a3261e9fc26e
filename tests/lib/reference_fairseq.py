"""fairseq's sinusoidal positions as HF's M2M-100 port forms them (get_embedding,
create_position_ids_from_input_ids, the module's forward), in torch float64: the
references of test_table_vision (table fairseq-sinusoidal) and test_add_rows (posenc add
with its weights)."""
import math

import torch


def get_embedding(num_embeddings, embedding_dim, padding_idx=None):
    """HF M2M100SinusoidalPositionalEmbedding.get_embedding, torch.float -> float64."""
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float64) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float64).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        # zero pad
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1, dtype=torch.float64)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


def create_position_ids_from_input_ids(input_ids, padding_idx, past_key_values_length=0):
    """HF (M2M-100, from fairseq's utils.make_positions)."""
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
    return incremental_indices.long() + padding_idx


def fairseq_forward(input_ids, embedding_dim, padding_idx, past_key_values_length=0):
    """The module's forward for input ids: weights large enough, index_select."""
    bsz, seq_len = input_ids.size()
    position_ids = create_position_ids_from_input_ids(input_ids, padding_idx,
                                                      past_key_values_length)
    weights = get_embedding(int(position_ids.max()) + 1, embedding_dim, padding_idx)
    return weights.index_select(0, position_ids.view(-1)).view(bsz, seq_len, -1), position_ids
