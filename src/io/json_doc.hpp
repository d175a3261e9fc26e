#pragma once
// JSON documents (nlohmann) parsed with a bound on their nesting and freed without
// allocating: for the inputs posenc parses whole (JSON tensors, HF configs).
//
// nlohmann's parser is iterative, but freeing a document is not free: ~basic_json
// moves the children of each array or object onto a std::vector it allocates, as
// large as the container. Out of memory, that allocation throws inside a destructor,
// typically while the half-built document is unwound after the first bad_alloc, and
// std::terminate aborts the process. A JsonDoc empties its containers leaves first,
// which needs no memory, so bad_alloc reaches the caller as an exception.

#include <nlohmann/json.hpp>

#include <string_view>

namespace posenc::json_doc {

using Json = nlohmann::json;

/// Empties every container of `j`, leaves first, without allocating. Recurses as deep
/// as the document nests, which `parse` bounds.
inline void release(Json& j) noexcept {
  if (j.is_array()) {
    auto& a = j.get_ref<Json::array_t&>();
    for (Json& x : a) release(x);
    a.clear();
  } else if (j.is_object()) {
    auto& o = j.get_ref<Json::object_t&>();
    for (auto& kv : o) release(kv.second);
    o.clear();
  }
}

/// A parsed document; see the top of this file.
class JsonDoc {
 public:
  JsonDoc() = default;
  JsonDoc(const JsonDoc&) = delete;
  JsonDoc& operator=(const JsonDoc&) = delete;
  ~JsonDoc() { release(root); }

  Json root;
};

/// Parses `text` into `doc.root`. Calls `too_deep()`, which must throw, as soon as a
/// value nests deeper than `max_depth` (the top-level value is depth 0, its elements
/// depth 1, ...), so no deeper document is ever built. Throws Json::exception for
/// malformed JSON and std::bad_alloc; `doc` stays safe to destroy either way.
template <class TooDeep>
void parse(std::string_view text, JsonDoc& doc, int max_depth, TooDeep too_deep) {
  const Json::parser_callback_t guard = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > max_depth) too_deep();
    return true;
  };
  // The DOM builder of Json::parse, into a document this function does not own (Json::parse
  // would free its half-built result itself, allocating).
  nlohmann::detail::json_sax_dom_callback_parser<Json> builder(doc.root, guard, true);
  Json::sax_parse(text.begin(), text.end(), &builder);
}

}  // namespace posenc::json_doc
