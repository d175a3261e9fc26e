"""Reference ALiBi slopes and T5 buckets shared by the table and attention tests,
written from the published code (Press et al.'s repository; HF transformers'
T5Attention._relative_position_bucket), independent of posenc."""
import math


def get_slopes(n):
    """Press et al., verbatim logic of the official repository."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_2(c) + get_slopes(2 * c)[0::2][:n - c]


def t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """HF T5Attention._relative_position_bucket."""
    import torch  # here, so that users of get_slopes alone need not load torch

    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, if_large)
    return relative_buckets
