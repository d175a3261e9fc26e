#include "posenc/encodings/rope_ids_keywords.hpp"

#include <string>


namespace posenc {

RopeIdsResolved rope_ids_by_keyword(const Keywords& k, const Keywords& tensors) {
  check_prompt_given(keyword_caller({&k, &tensors}));
  RopeIdsResolved r;
  if (auto spec = k.get<std::string>("layout")) r.layout = parse_prompt_layout(*spec, "layout");
  r.request.option_names = false;  // messages name the keywords
  r.request.hf_config = k.get<std::string>("hf_config").value_or("");
  KeywordReader(k).read(r.request);  // the declared fields (rope_ids_fields.hpp)
  if (!r.request.hf_config.empty()) r.config = read_rope_ids_config(r.request.hf_config);
  r.rules = resolve_rope_ids_rules(r.request, r.config);
  if (r.layout) return r;
  const auto tensor = [&tensors](const char* n) {
    return tensors.gives(n) ? std::optional(tensors.tensor(n)) : std::nullopt;
  };
  r.tensors = RopeIdsTensors{*tensor("input_ids"), tensor("attention_mask"),
                             tensor("image_grid_thw"), tensor("video_grid_thw"),
                             tensor("second_per_grid_ts")};
  return r;
}

}  // namespace posenc
