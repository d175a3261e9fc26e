#pragma once
/// \file
/// `posenc rope-ids`' request read by keyword (posenc/keywords.hpp): the prompt's layout
/// or token tensors given one way, the declared fields (rope_ids_fields.hpp) and the
/// config they fall back on, resolved into the rules, as the command resolves its options.

#include <optional>

#include "posenc/encodings/rope_ids.hpp"
#include "posenc/encodings/rope_ids_fields.hpp"
#include "posenc/keywords.hpp"

namespace posenc {

/// What computing the ids of a prompt takes.
struct RopeIdsResolved {
  std::optional<PromptLayout> layout;  ///< the prompt as a layout SPEC; none: as tensors
  RopeIdsRequest request;              ///< the fields given, members named as keywords
  RopeIdsConfig config;                ///< hf_config's, or empty
  RopeIdsRules rules;
  std::optional<RopeIdsTensors> tensors;  ///< the prompt as HF's tensors; none: as a layout
};

/// The request of keywords `k` (family, the media token ids, the timing numbers, layout,
/// hf_config), `tensors` holding the token tensors (input_ids, attention_mask,
/// image_grid_thw, video_grid_thw, second_per_grid_ts): the prompt is checked to be given
/// one way (check_prompt_given) before the layout is parsed, the config read and the
/// tensors taken (their memory may be borrowed from the caller's values).
RopeIdsResolved rope_ids_by_keyword(const Keywords& k, const Keywords& tensors);

}  // namespace posenc
