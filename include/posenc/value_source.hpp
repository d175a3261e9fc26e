#pragma once
/// \file
/// Where a parameter's value came from, so that a range check names what the user wrote:
/// a key of a config file (a bad input, exit 3) or the caller's own option or keyword (a
/// usage error, exit 2). The readers of config files record the parameters they set
/// (apply_hf_config); the checks throw through `fail`.

#include <string>
#include <utility>
#include <vector>

#include "posenc/error.hpp"

namespace posenc {

/// A parameter's value as read from a file: the file and the key that held it.
struct ValueSource {
  std::string file;  ///< the config file, as the caller named it
  std::string key;   ///< the key in that file (HF's name: head_dim, rope_theta, ...)
};

/// The parameters (by member name: head_dim, base, ...) whose values a file gave. A
/// parameter not listed is the caller's own.
class ValueSources {
 public:
  /// Records that `param` was read from `key` of `file` (replacing an earlier record).
  void set(const std::string& param, const std::string& file, const std::string& key) {
    erase(param);
    list_.emplace_back(param, ValueSource{file, key});
  }
  /// `param` is the caller's own again (given explicitly over the file's value).
  void erase(const std::string& param) {
    for (auto it = list_.begin(); it != list_.end(); ++it) {
      if (it->first == param) {
        list_.erase(it);
        return;
      }
    }
  }
  /// Where `param` came from; nullptr when it is the caller's.
  const ValueSource* find(const std::string& param) const {
    for (const auto& [name, source] : list_) {
      if (name == param) return &source;
    }
    return nullptr;
  }
  bool empty() const { return list_.empty(); }

  /// Throws the error for a bad value of `param`. `msg` is the message in the caller's
  /// terms, "<name>: <why>": thrown as UsageError when the caller gave the value, or as
  /// InputError "<file>: '<key>': <why>" when a file did (the key quoted, as the other
  /// errors about a config's keys have it).
  [[noreturn]] void fail(const std::string& param, const std::string& msg) const {
    const ValueSource* s = find(param);
    if (s == nullptr) throw UsageError(msg);
    const std::size_t colon = msg.find(": ");
    const std::string why = colon == std::string::npos ? msg : msg.substr(colon + 2);
    throw InputError(s->file + ": '" + s->key + "': " + why);
  }

 private:
  std::vector<std::pair<std::string, ValueSource>> list_;
};

}  // namespace posenc
