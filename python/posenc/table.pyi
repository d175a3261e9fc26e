# Type stubs of posenc.table (docstrings: help(posenc.table.rope) etc.).
from os import PathLike
from typing import Any, Literal, Optional, Sequence, Tuple, Union

import numpy.typing as npt

from . import ArrayLike, Arith, DTypeLike, Factors, Precision, Scaling, Style

RopeEmit = Literal["inv-freq", "angles", "cos", "sin", "cos-sin", "cos-sin-cache",
                   "inv_freq", "cos_sin", "cos_sin_cache"]
FunnelFactor = Literal["phi", "pi", "psi", "omega"]

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
             embeddings: Optional[ArrayLike] = ...,
             dtype: Optional[DTypeLike] = ...) -> Any: ...
def t5_bucket(*, q_len: Optional[int] = ..., k_len: Optional[int] = ..., buckets: int = ...,
              max_distance: int = ..., causal: bool = ...,
              dtype: Optional[DTypeLike] = ...) -> Any: ...
def xl_relative(*, dim: int, q_len: Optional[int] = ..., k_len: Optional[int] = ...,
                form: Literal["transfo-xl", "xlnet-bi", "xlnet-uni"] = ...,
                clamp_len: int = ..., base: float = ...,
                dtype: Optional[DTypeLike] = ...) -> Any: ...
def funnel_relative(*, seq_len: int, dim: int, block: int = ..., shift: int = ...,
                    separate_cls: bool = ..., truncate_seq: bool = ..., base: float = ...,
                    dtype: Optional[DTypeLike] = ...) -> Any: ...
def funnel_factorized(*, seq_len: int, dim: int,
                      emit: Union[FunnelFactor, Sequence[FunnelFactor]] = ..., block: int = ...,
                      key_block: Optional[int] = ..., separate_cls: bool = ...,
                      truncate_seq: bool = ..., base: float = ...,
                      dtype: Optional[DTypeLike] = ...) -> Any: ...
def deberta_bucket(*, q_len: Optional[int] = ..., k_len: Optional[int] = ...,
                   position_buckets: int = ..., max_relative_positions: int = ...,
                   dtype: Optional[DTypeLike] = ...) -> Any: ...
Window = Union[int, Tuple[int, int]]

def swin_index(*, window: Window, bias_table: Optional[ArrayLike] = ...,
               dtype: Optional[DTypeLike] = ...) -> Any: ...
def beit_index(*, window: Window, bias_table: Optional[ArrayLike] = ...,
               dtype: Optional[DTypeLike] = ...) -> Any: ...
def swinv2_coords(*, window: Window, pretrained_window: Optional[Window] = ...,
                  mlp: Optional[Tuple[ArrayLike, ArrayLike, ArrayLike]] = ...,
                  dtype: Optional[DTypeLike] = ...) -> Any: ...
def levit_index(*, resolution: int, stride: int = ..., bias_table: Optional[ArrayLike] = ...,
                dtype: Optional[DTypeLike] = ...) -> Any: ...
def detr_sine(*, embedding_dim: int, mask: Optional[ArrayLike] = ...,
              size: Optional[Tuple[int, int]] = ..., temperature: float = ...,
              normalize: bool = ..., scale: Optional[float] = ...,
              layout: Literal["channels", "tokens"] = ...,
              temperature_width: Optional[float] = ..., offset: float = ...,
              dtype: Optional[DTypeLike] = ...) -> Any: ...
def rt_detr_sincos(*, size: Window, embedding_dim: int = ..., temperature: float = ...,
                   dtype: Optional[DTypeLike] = ...) -> Any: ...
def fairseq_sinusoidal(*, dim: int, positions: Optional[int] = ...,
                       padding_idx: Optional[int] = ..., input_ids: Optional[ArrayLike] = ...,
                       past_length: int = ..., dtype: Optional[DTypeLike] = ...) -> Any: ...
def layoutlm_bucket(*, axis: Literal["1d", "x", "y", "xy"] = ..., seq_len: Optional[int] = ...,
                    position_ids: Optional[ArrayLike] = ..., bbox: Optional[ArrayLike] = ...,
                    buckets: Optional[int] = ..., max_distance: Optional[int] = ...,
                    bias_table: Optional[Union[ArrayLike, Tuple[ArrayLike, ArrayLike]]] = ...,
                    dtype: Optional[DTypeLike] = ...) -> Any: ...
def udop_bucket(*, axis: Literal["1d", "horizontal", "vertical", "all"] = ...,
                seq_len: Optional[int] = ..., bbox: Optional[ArrayLike] = ..., buckets: int = ...,
                max_distance: Optional[int] = ..., scaling_factor: Optional[float] = ...,
                bias_table: Union[ArrayLike, Sequence[ArrayLike], None] = ...,
                dtype: Optional[DTypeLike] = ...) -> Any: ...
def complex_order(*, frequency: ArrayLike, amplitude: Optional[ArrayLike] = ...,
                  phase: Optional[ArrayLike] = ..., positions: Optional[int] = ...,
                  start: int = ..., input_ids: Optional[ArrayLike] = ...,
                  dtype: Optional[DTypeLike] = ...) -> Any: ...
def reformer_axial(*, axial_shape: Sequence[int], weights: Sequence[ArrayLike],
                   positions: Optional[int] = ..., position_ids: Optional[ArrayLike] = ...,
                   dtype: Optional[DTypeLike] = ...) -> Any: ...
def cpmant_bucket(*, segment_ids: Optional[ArrayLike] = ...,
                  key_segment_ids: Optional[ArrayLike] = ..., seq_len: Optional[int] = ...,
                  segments: int = ..., buckets: int = ..., max_distance: int = ...,
                  bias_table: Optional[ArrayLike] = ...,
                  dtype: Optional[DTypeLike] = ...) -> Any: ...
def longt5_global(*, attention_mask: Optional[ArrayLike] = ..., seq_len: Optional[int] = ...,
                  global_block_size: int = ..., emit: str = ...,
                  dtype: Optional[DTypeLike] = ...) -> Any: ...
