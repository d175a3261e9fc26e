# Type stubs of the package posenc (docstrings: help(posenc.rope) etc.).
from os import PathLike
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

from . import table as table

ArrayLike = Any  # numpy arrays, CPU torch tensors, BF16, FP8, buffer / DLPack objects
DTypeLike = Union[str, np.dtype, type, Any]  # "f32", np.float32, torch.bfloat16, ...
Ref = Union[str, PathLike]
Style = Literal["neox", "half", "gptj", "interleaved", "tiled"]
Scaling = Literal["none", "default", "linear", "dynamic", "yarn", "longrope", "llama3",
                  "proportional"]
Arith = Literal["exact", "hf", "meta", "ggml"]
Precision = Literal["f64", "f32", "float64", "float32"]
Factors = Union[Sequence[float], npt.ArrayLike, str]
Emit = Literal["logits", "probs", "output", "lse"]

__version__: str

class Error(Exception):
    status: int
class UsageError(Error): ...
class InputError(Error): ...
class OutputError(Error): ...
class DifferError(Error): ...

class BF16:
    bits: npt.NDArray[np.uint16]
    def __init__(self, bits: npt.ArrayLike) -> None: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...

class FP8:
    codes: npt.NDArray[np.uint8]
    dtype: str  # "float8_e4m3fn" or "float8_e5m2"
    def __init__(self, codes: npt.ArrayLike, dtype: str) -> None: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...

def bf16_to_float32(bits: Union[npt.ArrayLike, BF16]) -> npt.NDArray[np.float32]: ...
def float32_to_bf16(x: npt.ArrayLike) -> npt.NDArray[np.uint16]: ...
def kernel_variant() -> str: ...
def set_threads(n: int) -> None: ...  # 0 (all cores) or 1 to 4096, as -j

def rope(x: ArrayLike, *, axes: Optional[str] = ..., dtype: Optional[DTypeLike] = ...,
         out: Optional[ArrayLike] = ..., inverse: bool = ..., style: Optional[Style] = ...,
         base: Optional[float] = ..., rotary_dim: Optional[int] = ...,
         partial: Optional[float] = ..., rotary_last: Optional[bool] = ...,
         rope_interleave: Optional[bool] = ..., start: int = ...,
         position_ids: Optional[ArrayLike] = ..., cu_seqlens: Optional[ArrayLike] = ...,
         scaling: Optional[Scaling] = ..., factor: Optional[float] = ...,
         original_max_pos: Optional[int] = ..., max_pos: Optional[int] = ...,
         seq_len: Optional[int] = ..., beta_fast: Optional[float] = ...,
         beta_slow: Optional[float] = ..., mscale: Optional[float] = ...,
         mscale_all_dim: Optional[float] = ..., attention_factor: Optional[float] = ...,
         truncate: Optional[bool] = ..., low_freq_factor: Optional[float] = ...,
         high_freq_factor: Optional[float] = ..., short_factor: Optional[Factors] = ...,
         long_factor: Optional[Factors] = ..., hf_config: Optional[Ref] = ..., hf_version: Optional[str] = ...,
         layer_type: Optional[str] = ..., layer: Optional[int] = ...,
         precision: Optional[Precision] = ..., arith: Optional[Arith] = ...,
         rope2d: Optional[Tuple[int, int]] = ..., rope2d_ids: bool = ...,
         order: Optional[Literal["xy", "yx"]] = ...,
         mrope_section: Optional[Union[Sequence[int], str]] = ...,
         mrope_interleaved: bool = ..., layout: Optional[str] = ...,
         inv_freq: Optional[ArrayLike] = ..., freq_scale: Union[float, str, None] = ...,
         coords: Optional[str] = ..., prefix_tokens: Optional[int] = ...,
         merge_window: Optional[int] = ..., angles: Optional[ArrayLike] = ...,
         allow_nonfinite: bool = ..., cos: Optional[ArrayLike] = ...,
         sin: Optional[ArrayLike] = ...,
         seqlen_offsets: Optional[ArrayLike] = ...,
         torch_ops: bool = ...) -> Any: ...

RopeIdsFamily = Literal["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni", "glm4v",
                        "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2_5_omni",
                        "qwen2_5_omni_thinker", "glm4v_moe"]

def rope_ids(family: Optional[RopeIdsFamily] = ..., layout: Optional[str] = ..., *,
             input_ids: Optional[ArrayLike] = ..., image_grid_thw: Optional[ArrayLike] = ...,
             video_grid_thw: Optional[ArrayLike] = ...,
             second_per_grid_ts: Optional[ArrayLike] = ...,
             attention_mask: Optional[ArrayLike] = ..., image_token_id: Optional[int] = ...,
             video_token_id: Optional[int] = ..., audio_token_id: Optional[int] = ...,
             video_start_token_id: Optional[int] = ..., video_end_token_id: Optional[int] = ...,
             hf_config: Optional[Union[str, PathLike]] = ...,
             spatial_merge_size: Optional[int] = ..., tokens_per_second: Optional[float] = ...,
             position_id_per_seconds: Optional[float] = ...,
             seconds_per_chunk: Optional[float] = ...) -> Tuple[Any, Union[int, list]]: ...

@overload
def attention(q: ArrayLike, k: ArrayLike, v: Optional[ArrayLike] = ..., *, emit: Emit,
              **options: Any) -> Any: ...
@overload
def attention(q: ArrayLike, k: ArrayLike, v: Optional[ArrayLike] = ..., *,
              emit: Optional[Sequence[Emit]] = ..., **options: Any) -> Tuple[Any, ...]: ...
def attention(q: ArrayLike, k: ArrayLike, v: Optional[ArrayLike] = ..., *,
              axes: Optional[str] = ..., emit: Union[Emit, Sequence[Emit], None] = ...,
              scale: Optional[float] = ...,
              causal: Union[bool, Literal["bottom-right", "top-left"]] = ...,
              window: Union[int, Tuple[int, int], None] = ...,
              sliding_window: Optional[int] = ..., chunk_size: Optional[int] = ...,
              sink_tokens: Optional[int] = ...,
              attn_temperature: Optional[Tuple[float, float]] = ...,
              llama4_scaling: Optional[Tuple[float, int]] = ...,
              key_lengths: Optional[ArrayLike] = ..., mask: Optional[ArrayLike] = ...,
              seqused_q: Optional[ArrayLike] = ..., seqused_k: Optional[ArrayLike] = ...,
              cu_seqlens_q: Optional[ArrayLike] = ..., cu_seqlens_k: Optional[ArrayLike] = ...,
              alibi: Union[bool, Literal["causal", "symmetric", "bottom-right", "fairseq",
                                         "bloom", "falcon"], None] = ...,
              alibi_max_bias: Optional[float] = ..., alibi_slopes: Optional[ArrayLike] = ...,
              t5_bias: Optional[ArrayLike] = ...,
              t5_buckets: Optional[int] = ..., t5_max_distance: Optional[int] = ...,
              t5_causal: bool = ..., relative_k: Optional[ArrayLike] = ...,
              relative_v: Optional[ArrayLike] = ..., max_distance: Optional[int] = ...,
              decomposed_rel_pos: Optional[Tuple[ArrayLike, ArrayLike]] = ...,
              grid: Optional[Tuple[int, int]] = ..., key_grid: Optional[Tuple[int, int]] = ...,
              clipped_bias: Optional[ArrayLike] = ..., clipped_symmetric: bool = ...,
              relative_left: Optional[int] = ..., relative_right: Optional[int] = ...,
              relative_sign: Optional[str] = ..., relative_beyond: Optional[str] = ...,
              relative_proj: Optional[ArrayLike] = ..., per_dim_scale: Optional[ArrayLike] = ...,
              wavlm_gate: Optional[Tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]] = ...,
              global_kv: Optional[Tuple[ArrayLike, ArrayLike]] = ...,
              global_block_size: Optional[int] = ..., global_bias: Optional[ArrayLike] = ...,
              softcap: Optional[float] = ..., sinks: Optional[ArrayLike] = ...,
              qv: Optional[ArrayLike] = ..., q_descale: Optional[ArrayLike] = ...,
              k_descale: Optional[ArrayLike] = ..., v_descale: Optional[ArrayLike] = ...,
              k_scale: Optional[float] = ..., v_scale: Optional[float] = ...,
              p_dtype: Optional[Literal["f32", "f16", "bf16", "e4m3fn", "e5m2"]] = ...,
              masked_rows: Optional[Literal["zero", "nan"]] = ...,
              dtype: Optional[DTypeLike] = ..., max_memory: Optional[int] = ...,
              allow_nonfinite: bool = ..., precision: Optional[Precision] = ...,
              arith: Optional[Literal["exact", "hf", "fa-baseline"]] = ..., hf_config: Optional[Ref] = ..., hf_version: Optional[str] = ...,
              layer_type: Optional[str] = ..., layer: Optional[int] = ...,
              cu_seqlens: Optional[ArrayLike] = ..., rope: bool = ..., start: int = ...,
              position_ids: Optional[ArrayLike] = ..., inverse: bool = ...,
              style: Optional[Style] = ..., base: Optional[float] = ...,
              rotary_dim: Optional[int] = ..., partial: Optional[float] = ...,
              rotary_last: Optional[bool] = ..., rope_interleave: Optional[bool] = ...,
              scaling: Optional[Scaling] = ..., factor: Optional[float] = ...,
              original_max_pos: Optional[int] = ..., max_pos: Optional[int] = ...,
              seq_len: Optional[int] = ..., beta_fast: Optional[float] = ...,
              beta_slow: Optional[float] = ..., mscale: Optional[float] = ...,
              mscale_all_dim: Optional[float] = ..., attention_factor: Optional[float] = ...,
              truncate: Optional[bool] = ..., low_freq_factor: Optional[float] = ...,
              high_freq_factor: Optional[float] = ..., short_factor: Optional[Factors] = ...,
              long_factor: Optional[Factors] = ..., rel_keys: Optional[ArrayLike] = ...,
              content_bias: Optional[ArrayLike] = ..., position_bias: Optional[ArrayLike] = ...,
              segment_ids: Optional[ArrayLike] = ..., segment_embed: Optional[ArrayLike] = ...,
              segment_bias: Optional[ArrayLike] = ...,
              segment_index: Optional[ArrayLike] = ..., rel_shift: Optional[int] = ...,
              rel_kernel: Optional[ArrayLike] = ...,
              factorized: Optional[Tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike]] = ...,
              separate_cls: bool = ..., pos_key: Optional[ArrayLike] = ...,
              pos_query: Optional[ArrayLike] = ..., pos_att_type: Optional[str] = ...,
              position_buckets: Optional[int] = ...,
              max_relative_positions: Optional[int] = ...,
              grad_output: Optional[ArrayLike] = ...,
              forward_output: Optional[ArrayLike] = ...,
              forward_lse: Optional[ArrayLike] = ...,
              cache_seqlens: Optional[ArrayLike] = ...,
              cache_batch_idx: Optional[ArrayLike] = ...,
              cache_leftpad: Optional[ArrayLike] = ..., page_table: Optional[ArrayLike] = ...,
              k_new: Optional[ArrayLike] = ..., v_new: Optional[ArrayLike] = ...,
              rotary_cos: Optional[ArrayLike] = ..., rotary_sin: Optional[ArrayLike] = ...,
              rotary_seqlens: Optional[ArrayLike] = ..., rotary_interleaved: bool = ...,
              update_cache: bool = ...,
              cu_seqlens_k_new: Optional[ArrayLike] = ...) -> Any: ...

class CompareResult:
    match: bool
    shapes_equal: bool
    shape_a: Sequence[int]
    shape_b: Sequence[int]
    total: int
    mismatches: int
    first_mismatch: Optional[int]
    first_mismatch_index: Optional[Sequence[int]]
    max_abs: Mapping[str, Any]
    max_rel: Mapping[str, Any]
    max_ulp: Optional[int]
    nan_a: int
    nan_b: int
    nan_mismatches: int
    rtol: Optional[float]  # None when a ULP bound given alone decides alone
    atol: Optional[float]
    ulp: Optional[int]
    ulp_type: str
    def __bool__(self) -> bool: ...
    def summary(self) -> str: ...
    def rule(self) -> str: ...
    def check(self) -> "CompareResult": ...

class VerdictResult(CompareResult):
    factor: float
    atol_rule: str
    error: float
    error_index: Optional[Sequence[int]]
    baseline_error: float
    baseline_error_index: Optional[Sequence[int]]
    bound: float

def compare(a: ArrayLike, b: ArrayLike, *, rtol: Optional[float] = ...,
            atol: Optional[float] = ..., ulp: Optional[int] = ..., equal_nan: bool = ...,
            slice: Optional[str] = ..., baseline: Optional[ArrayLike] = ...,
            factor: Optional[float] = ..., atol_rule: Optional[str] = ...) -> CompareResult: ...
def combine(out_partial: ArrayLike, lse_partial: ArrayLike, *, axis: int = ...,
            lse_layout: str = ..., dtype: Optional[DTypeLike] = ...) -> Tuple[Any, Any]: ...
def read(ref: Ref, *, torch: bool = ...) -> Any: ...
def write(ref: Ref, x: ArrayLike, *, attrs: Optional[Mapping[str, Any]] = ...,
          force: bool = ..., compression: int = ..., no_clobber: bool = ...,
          sync: bool = ..., to: Optional[Literal["npy", "h5", "csv", "tsv", "json", "text"]] = ...
          ) -> None: ...
