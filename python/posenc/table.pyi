# Type stubs of posenc.table (docstrings: help(posenc.table.rope) etc.).
from os import PathLike
from typing import Any, Literal, Optional, Sequence, Union

import numpy.typing as npt

from . import ArrayLike, Arith, DTypeLike, Factors, Precision, Scaling, Style

RopeEmit = Literal["inv-freq", "angles", "cos", "sin", "cos-sin", "cos-sin-cache",
                   "inv_freq", "cos_sin", "cos_sin_cache"]

def sinusoidal(*, positions: int, dim: int, base: float = ..., start: int = ...,
               layout: Literal["interleaved", "concat"] = ...,
               dtype: Optional[DTypeLike] = ...) -> Any: ...
def rope(*, positions: Optional[int] = ..., dim: Optional[int] = ...,
         base: Optional[float] = ..., emit: Union[RopeEmit, Sequence[RopeEmit]] = ...,
         layout: Literal["full", "half"] = ..., dtype: Optional[DTypeLike] = ...,
         start: int = ..., position_ids: Optional[ArrayLike] = ...,
         cu_seqlens: Optional[ArrayLike] = ..., style: Optional[Style] = ...,
         rotary_dim: Optional[int] = ..., partial: Optional[float] = ...,
         scaling: Optional[Scaling] = ..., factor: Optional[float] = ...,
         original_max_pos: Optional[int] = ..., max_pos: Optional[int] = ...,
         seq_len: Optional[int] = ..., beta_fast: Optional[float] = ...,
         beta_slow: Optional[float] = ..., mscale: Optional[float] = ...,
         mscale_all_dim: Optional[float] = ..., attention_factor: Optional[float] = ...,
         truncate: Optional[bool] = ..., low_freq_factor: Optional[float] = ...,
         high_freq_factor: Optional[float] = ..., short_factor: Optional[Factors] = ...,
         long_factor: Optional[Factors] = ..., hf_config: Optional[Union[str, PathLike]] = ...,
         hf_version: Optional[str] = ...,
         layer_type: Optional[str] = ..., layer: Optional[int] = ..., inverse: bool = ...,
         precision: Optional[Precision] = ..., arith: Optional[Arith] = ...) -> Any: ...
def rope2d(*, height: int, width: int, dim: int, base: float = ...,
           order: Literal["xy", "yx"] = ..., style: Style = ...,
           emit: Union[RopeEmit, Sequence[RopeEmit]] = ...,
           layout: Literal["full", "half"] = ..., dtype: Optional[DTypeLike] = ...) -> Any: ...
def alibi(*, heads: int, q_len: Optional[int] = ..., k_len: Optional[int] = ...,
          variant: Optional[Literal["slopes", "causal", "symmetric", "fairseq",
                                    "bottom-right"]] = ...,
          max_bias: float = ..., dtype: Optional[DTypeLike] = ...) -> Any: ...
def relative(*, max_distance: Optional[int] = ..., q_len: Optional[int] = ...,
             k_len: Optional[int] = ..., sign: Literal["k-q", "q-k"] = ...,
             left: Optional[int] = ..., right: Optional[int] = ...,
             beyond: Literal["clamp", "zero"] = ...,
             dtype: Optional[DTypeLike] = ...) -> Any: ...
def t5_bucket(*, q_len: Optional[int] = ..., k_len: Optional[int] = ..., buckets: int = ...,
              max_distance: int = ..., causal: bool = ...,
              dtype: Optional[DTypeLike] = ...) -> Any: ...
def xl_relative(*, dim: int, q_len: Optional[int] = ..., k_len: Optional[int] = ...,
                form: Literal["transfo-xl", "xlnet-bi", "xlnet-uni"] = ...,
                clamp_len: int = ..., base: float = ...,
                dtype: Optional[DTypeLike] = ...) -> Any: ...
def deberta_bucket(*, q_len: Optional[int] = ..., k_len: Optional[int] = ...,
                   position_buckets: int = ..., max_relative_positions: int = ...,
                   dtype: Optional[DTypeLike] = ...) -> Any: ...
