"""The tolerance of the gradient tests: each of posenc's tensors against torch float64
autograd of an independent reference, the largest difference at most `rel` times the
reference's largest value."""
import torch


def check(got, want, names, rel=1e-12):
    for name, x, ref in zip(names, got, want):
        x = torch.as_tensor(x)
        assert x.shape == ref.shape, name
        err = float((x - ref).abs().max())
        assert err <= rel * float(ref.abs().max()), (name, err)
