#pragma once
/// \file
/// Multimodal RoPE position ids (M-RoPE, rows t, h, w) of a prompt, as HF transformers v5
/// computes them in a model's `get_rope_index` (the layouts of modeling_rope_utils'
/// `get_mrope_index`): from the prompt's layout, a sequence of text runs, images, videos
/// and audio clips, or from HF's own token ids and grid tensors (layouts_from_tokens).
///
/// A family's rules are a small value (RopeIdsRules): how far the running position
/// advances after a vision block, how a video's time axis is scaled and in which
/// arithmetic, whether videos are laid out frame by frame. One function executes any
/// such value.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "posenc/tensor.hpp"

namespace posenc {

/// The model families whose position ids are computed.
enum class RopeIdsFamily {
  qwen2_vl,      ///< Qwen2-VL: videos step 1 per temporal grid
  qwen2_5_vl,    ///< Qwen2.5-VL: videos step tokens_per_second * int(seconds per grid)
  qwen3_vl,      ///< Qwen3-VL: videos frame by frame between timestamp text
  qwen2_5_omni,  ///< Qwen2.5-Omni TMRoPE: audio spans, time in position_id_per_seconds
  glm4v          ///< GLM-4.1V/4.5V: blocks from max id + 1, videos frame by frame
};

/// "qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen2.5-omni", "glm4v".
std::string_view rope_ids_family_name(RopeIdsFamily f) noexcept;
/// Parses a family name (also HF model_type spellings: qwen2_vl, qwen2_5_vl, qwen3_vl,
/// qwen3_vl_moe, qwen2_5_omni, qwen2_5_omni_thinker, glm4v, glm4v_moe). Throws UsageError
/// naming `what`.
RopeIdsFamily parse_rope_ids_family(std::string_view name, std::string_view what = "--family");

/// One part of a prompt.
struct PromptSegment {
  /// What the segment holds.
  enum class Kind {
    text,   ///< text tokens
    image,  ///< one image's patches
    video,  ///< one video's patches (frames in time)
    audio   ///< audio tokens
  };
  Kind kind = Kind::text;   ///< what the segment holds
  std::int64_t tokens = 0;  ///< text, audio: the number of tokens
  /// image, video: the temporal extent of the grid in patches (HF's grid_thw), before
  /// the spatial merge.
  std::int64_t t = 0;
  std::int64_t h = 0;  ///< image, video: the grid's height in patches
  std::int64_t w = 0;  ///< image, video: the grid's width in patches
  /// video: seconds per temporal grid (HF's second_per_grid_ts entry); 0 = not given.
  double seconds_per_grid = 0;
  /// video (qwen3-vl): text tokens between consecutive frames (the timestamp and the
  /// vision end/start tokens HF's processor puts there); -1 = not given.
  std::int64_t frame_gap = -1;
  /// video (qwen2.5-omni, use_audio_in_video): the audio tokens of its soundtrack, laid
  /// out with it in time chunks; 0 = a video without audio. Such a segment holds its two
  /// start and two end tokens.
  std::int64_t audio_tokens = 0;
};

/// A prompt as a sequence of segments, in order.
struct PromptLayout {
  std::vector<PromptSegment> segments;  ///< the segments, in prompt order
  /// How rope_ids' messages name the layout: parse_prompt_layout's `what`, or the row of
  /// input_ids it came from.
  std::string what = "layout";
};

/// Parses the compact layout SPEC: comma-separated segments
///   text:N | image:TxHxW | video:TxHxW[\@SECONDS][/GAP][+audio:N] | audio:N
/// (N, T, H, W, GAP decimal integers; SECONDS a decimal number, no exponent, 1e-6 to
/// 1e6). Throws UsageError
/// naming `what` and the segment for malformed text or a value out of range (counts
/// and grids 1 to 2^31-1).
PromptLayout parse_prompt_layout(std::string_view spec, std::string_view what = "--layout");

/// The layout in the canonical SPEC form (what parse_prompt_layout reads back).
std::string prompt_layout_text(const PromptLayout& layout);

/// The family's numbers (HF config keys in parentheses).
struct RopeIdsRules {
  RopeIdsFamily family = RopeIdsFamily::qwen2_vl;  ///< whose get_rope_index is followed
  std::int64_t spatial_merge_size = 2;             ///< vision_config.spatial_merge_size
  /// qwen2.5-vl: vision_config.tokens_per_second; 0 = not known (a video is then an error).
  double tokens_per_second = 0;
  /// qwen2.5-omni: position_id_per_seconds (HF default 25).
  double position_id_per_seconds = 25;
  /// qwen2.5-omni: seconds_per_chunk of audio-in-video interleaving (HF default 2).
  double seconds_per_chunk = 2;
};

/// Position ids of a layout and HF's mrope_position_delta (max id + 1 - tokens).
struct RopeIds {
  Tensor ids;               ///< [3, s] i64: rows t, h, w
  std::int64_t delta = 0;   ///< rope_deltas of get_rope_index, for decoding after the prompt
  std::int64_t tokens = 0;  ///< s
};

/// The most tokens a layout may have.
inline constexpr std::int64_t kMaxLayoutTokens = (std::int64_t{1} << 31) - 1;

/// Computes the ids as transformers v5 does:
/// - text: the running position p, p+1, ... on all three rows;
/// - image/video of grid (T, H, W), merge m: T*(H/m)*(W/m) tokens with ids
///   (p + time(k), p + i, p + j), k, i, j in C order; qwen2-vl/2.5-vl/3-vl then advance p
///   by max(H, W)/m (v5's rule; 4.x used max id + 1), qwen2.5-omni and glm4v start every
///   block (text included) at the previous max id + 1;
/// - time(k): k for images and qwen2-vl videos; qwen2.5-vl videos
///   k * (tokens_per_second * int(seconds)), in int64 when tokens_per_second is a whole
///   number, else trunc of a float32 product; qwen2.5-omni trunc(f32(k) * f32(seconds *
///   position_id_per_seconds)), seconds first rounded to float32 as HF's
///   second_per_grid_ts tensor holds it; images k * position_id_per_seconds;
/// - qwen3-vl, glm4v: a video of T grids is T frames of grid (1, H, W), GAP text tokens
///   between them, each frame's time id p (glm4v: its video start and end tokens in the
///   text before and after the video);
/// - audio (qwen2.5-omni): N tokens counting up from the previous max id + 1;
/// - video+audio (qwen2.5-omni use_audio_in_video): two start tokens at b (the previous
///   max id + 1), then from q = b + 1 the video's ids and the audio's q, q+1, ... cut at
///   every int(position_id_per_seconds * seconds_per_chunk) of time from q and emitted
///   video chunk, audio chunk, ...; two end tokens at the last chunk's max id + 1 (HF's
///   _mrope_temporal_chunks and its zip_longest).
/// Throws UsageError for a layout the family cannot have (audio outside qwen2.5-omni, a
/// grid not divisible by the merge size, two images or two videos with no text between,
/// which HF takes as one run, an omni media segment or a glm4v video without the text
/// token before and after it, seconds where the family ignores them), for a missing
/// tokens_per_second
/// and for positions or token counts out of range (ids must stay below 2^53, tokens at
/// most kMaxLayoutTokens).
RopeIds rope_ids(const PromptLayout& layout, const RopeIdsRules& rules);

/// The token ids that mark media in input_ids (-1: none).
struct MediaTokenIds {
  std::int64_t image = -1;        ///< image_token_id (image_token_index); GLM-4V: also video frames
  std::int64_t video = -1;        ///< video_token_id (video_token_index)
  std::int64_t audio = -1;        ///< audio_token_id (audio_token_index), qwen2.5-omni
  std::int64_t video_start = -1;  ///< glm4v: video_start_token_id
  std::int64_t video_end = -1;    ///< glm4v: video_end_token_id
};

/// HF's interface: token ids and the processor's grids instead of a layout.
struct RopeIdsTokens {
  Tensor input_ids;                            ///< [s] or [b, s], integer
  const Tensor* image_grid_thw = nullptr;      ///< [images, 3] integer, or none
  const Tensor* video_grid_thw = nullptr;      ///< [videos, 3] integer, or none
  const Tensor* second_per_grid_ts = nullptr;  ///< [videos], or none
  /// The shape of input_ids, 1 for tokens and 0 for padding (HF's attention_mask), or
  /// none (every token counts). Padded slots get HF's padding position: 1 for
  /// qwen2.5-omni and glm4v, 0 for the others.
  const Tensor* attention_mask = nullptr;
  MediaTokenIds tokens;  ///< which ids mark which medium
};

/// Ids of a batch: [3, s] for 1-D input_ids, [3, b, s] for 2-D, and one delta per row
/// (max id + 1 - the row's unpadded tokens; glm4v: - s, as its get_rope_index has it).
struct RopeIdsBatch {
  Tensor ids;                        ///< i64
  std::vector<std::int64_t> deltas;  ///< mrope_position_deltas, one per row
};

/// The prompt layouts the token ids describe, one per row of input_ids (its unpadded
/// tokens, with attention_mask): maximal runs of
/// a medium's token become its segments, taking the grids in order across rows as HF's
/// iterators do (qwen3-vl and glm4v: one frame of the current video per run), with the
/// seconds of second_per_grid_ts for the families that read them. Throws InputError
/// (naming the row and the token offset) for input_ids that are not 1-D or 2-D integers,
/// grids that are not [n, 3] positive integers below 2^31, a run whose length is not its
/// grid's token count, a run without a grid, grids or seconds left over, and the
/// family's rules (rope_ids) broken by a row.
std::vector<PromptLayout> layouts_from_tokens(const RopeIdsTokens& in, const RopeIdsRules& rules);

/// rope_ids of every row of layouts_from_tokens. Throws as that function does, with
/// rope_ids' errors as InputError naming the row.
RopeIdsBatch rope_ids_from_tokens(const RopeIdsTokens& in, const RopeIdsRules& rules);

/// What a caller gave for the rules (unset: not given), and how its messages name each
/// member: as an option (`--tokens-per-second`) or by the member's own name.
struct RopeIdsRequest {
  std::optional<std::string> family;               ///< a family name (--family)
  std::optional<std::int64_t> spatial_merge_size;  ///< 1 to kMaxLayoutTokens
  std::optional<double> tokens_per_second;         ///< qwen2.5-vl only; above 0, below 2^53
  std::optional<double> position_id_per_seconds;   ///< qwen2.5-omni only; likewise
  std::optional<double> seconds_per_chunk;         ///< qwen2.5-omni only; likewise
  /// The media token ids (image, video, audio, video_start, video_end); not negative.
  std::optional<std::int64_t> token_ids[5];
  std::string hf_config;     ///< the config's path, "" = none (the members' fallback)
  bool option_names = true;  ///< name members as options (the command) or as is
};

/// The name `member` (snake_case) has in a request's messages.
std::string rope_ids_name(const RopeIdsRequest& req, std::string_view member);

/// The numbers a HF config.json gives (unset: the config does not say).
struct RopeIdsConfig {
  std::string model_type;               ///< top-level model_type
  std::int64_t spatial_merge_size = 0;  ///< 0: not given
  double tokens_per_second = 0;         ///< 0: not given
  double position_id_per_seconds = 0;   ///< 0: not given
  double seconds_per_chunk = 0;         ///< 0: not given
  MediaTokenIds tokens;                 ///< -1 where not given
};

/// Reads model_type, vision_config.spatial_merge_size, vision_config.tokens_per_second,
/// position_id_per_seconds, seconds_per_chunk and the media token ids (image/video/audio_token_id
/// or _index, video_start/end_token_id; top level or thinker_config) from a HF config.json. Throws
/// InputError naming the file for an unreadable or malformed config or a value out of range.
RopeIdsConfig read_rope_ids_config(const std::string& path);

/// The rules of a request: each member given, else the config's (`cfg`, read from
/// req.hf_config), else HF's class defaults (tokens_per_second 4 for a config without the
/// key, none without a config). Throws UsageError for a member out of range or given to a
/// family that does not read it, and for no family at all; InputError for a config
/// model_type that is not a family.
RopeIdsRules resolve_rope_ids_rules(const RopeIdsRequest& req, const RopeIdsConfig& cfg);

/// The media token ids of a request: each given, else the config's. Throws UsageError for
/// a glm4v prompt with videos (`has_videos`) but without its video start and end ids.
MediaTokenIds resolve_media_token_ids(const RopeIdsRequest& req, const RopeIdsConfig& cfg,
                                      RopeIdsFamily family, bool has_videos);

}  // namespace posenc
