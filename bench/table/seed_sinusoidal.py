"""The seeds' PositionalEncoding table (torch.zeros, arange, div_term, sin/cos), written
as a user would run it, saved with np.save. Usage: seed_sinusoidal.py N D OUT.npy"""
import math
import sys

import numpy as np
import torch

max_len, d_model, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
pe = torch.zeros(max_len, d_model)
position = torch.arange(0, max_len).unsqueeze(1)
div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
pe[:, 0::2] = torch.sin(position * div_term)
pe[:, 1::2] = torch.cos(position * div_term)
np.save(out, pe.numpy())
