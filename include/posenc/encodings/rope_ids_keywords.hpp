#pragma once
/// \file
/// `posenc rope-ids`' request read by keyword (posenc/keywords.hpp): the prompt's layout
/// or token tensors given one way, the declared fields (rope_ids_fields.hpp) and the
/// config they fall back on, resolved into the rules, as the command resolves its options.

#include <optional>

#include "posenc/encodings/rope_ids.hpp"
#include "posenc/keywords.hpp"

namespace posenc {

/// What computing the ids of a prompt takes, its tensors aside.
struct RopeIdsResolved {
  std::optional<PromptLayout> layout;  ///< the prompt as a layout SPEC; none: as tensors
  RopeIdsRequest request;              ///< the fields given, members named as keywords
  RopeIdsConfig config;                ///< hf_config's, or empty
  RopeIdsRules rules;
};

/// The request of keywords `k` (family, the media token ids, the timing numbers, layout,
/// hf_config), `tensors` holding the token tensors (input_ids, attention_mask,
/// image_grid_thw, video_grid_thw, second_per_grid_ts), which are not read: the prompt is
/// checked to be given one way (check_prompt_given) before the layout is parsed and the
/// config read.
RopeIdsResolved rope_ids_by_keyword(const Keywords& k, const Keywords& tensors);

}  // namespace posenc
