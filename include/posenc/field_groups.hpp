#pragma once
/// \file
/// Every declared request a front end reads, by group: what a caller lists to learn the
/// fields it may give (the Python package's keyword lists, the tests that walk every
/// declared field).

#include <string>

#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/rope_ids_fields.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/attention_relative_fields.hpp"
#include "posenc/ops/compare_fields.hpp"
#include "posenc/printable.hpp"

namespace posenc {

/// Calls f(kind, request) for each request of `group`: table (the table kinds), rope
/// (RoPE's requests), rope_ids, attention (AttentionOptions' scalars and fields),
/// relative (the Transformer-XL / XLNet / Funnel and DeBERTa terms), attention_tensors
/// (attention's tensor inputs and its KV-cache step's), ops (compare, its baseline
/// verdict, combine and write). Another group is a UsageError.
template <class F>
void for_each_request_of(const std::string& group, F&& f) {
  if (group == "table") return for_each_table_kind(f);
  if (group == "rope") return for_each_rope_request(f);
  if (group == "rope_ids") return f("rope_ids", RopeIdsRequest{});
  if (group == "attention") return for_each_attention_request(f);
  if (group == "relative") return for_each_relative_request(f);
  if (group == "attention_tensors") return for_each_attention_input(f);
  if (group == "ops") return for_each_ops_request(f);
  throw UsageError("group: unknown field group '" + printable(group) +
                   "'; expected table, rope, rope_ids, attention, relative, attention_tensors "
                   "or ops");
}

}  // namespace posenc
