#include "cli/suggest.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "posenc/error.hpp"

namespace posenc::cli {

namespace {

// Optimal string alignment distance (Damerau-Levenshtein with adjacent swaps).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(s->get_name());
  }
  return names;
}

// Long option names (with --) of `cmd` and the parents whose options fall through.
std::vector<std::string> option_names(const CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    for (const CLI::Option* o : a->get_options()) {
      for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    }
  }
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  const std::string c = closest(word, names);
  return c.empty() ? "" : fmt::format(" (did you mean {}?)", c);
}

// HF's names (config keys, rotary classes' arguments) of what posenc's options call
// otherwise: an option spelt after one of them is pointed to posenc's, where `names`
// has it.
std::string hf_name_hint(const std::string& flag, const std::vector<std::string>& names) {
  struct HfName {
    const char* spelt;   // the option's name, dashes as underscores
    const char* hf;      // HF's key
    const char* option;  // posenc's
  };
  static const HfName kHfNames[] = {
      {"theta", "rope_theta", "--base"},
      {"rope_theta", "rope_theta", "--base"},
      {"max_position_embeddings", "max_position_embeddings", "--max-pos"},
      {"original_max_position_embeddings", "original_max_position_embeddings",
       "--original-max-pos"},
      {"partial_rotary_factor", "partial_rotary_factor", "--partial"},
      {"rope_type", "rope_type", "--scaling"},
      {"head_dim", "head_dim", "--dim"},
  };
  const std::size_t at = flag.find_first_not_of('-');
  std::string key = at == std::string::npos ? "" : flag.substr(at);
  std::replace(key.begin(), key.end(), '-', '_');
  for (const HfName& n : kHfNames) {
    if (key == n.spelt && std::find(names.begin(), names.end(), n.option) != names.end()) {
      return fmt::format(" (did you mean {}? HF's {} is posenc's {})", n.option, n.hf, n.option);
    }
  }
  return "";
}

}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::min<std::size_t>(3, std::max<std::size_t>(1, word.size() / 3)) + 1;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

const CLI::App* active_command(const CLI::App& app) {
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  return cmd;
}

std::string command_path(const CLI::App* cmd) {
  std::string path;
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    path = a->get_name() + (path.empty() ? "" : " " + path);
  }
  return path;
}

void check_command_words(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* cmd = &app;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w == "--") return;
    if (!w.empty() && w[0] == '-') {
      // The root's only option with a separate value; a command's options end the walk.
      if (cmd == &app && (w == "-j" || w == "--threads")) ++i;
      if (cmd != &app) return;
      continue;
    }
    // The root always takes a command; below it, only a command with kinds.
    if (cmd != &app && cmd->get_require_subcommand_min() == 0) return;
    const std::vector<std::string> names = subcommand_names(*cmd);
    auto it = std::find(names.begin(), names.end(), w);
    if (it == names.end()) {
      const bool root = cmd == &app;
      throw UsageError(fmt::format("{}: unknown {} '{}'{}; expected one of {} (run '{} --help' "
                                   "for usage)",
                                   command_path(cmd), root ? "command" : "kind", w,
                                   did_you_mean(w, names), fmt::join(names, ", "),
                                   command_path(cmd)));
    }
    cmd = cmd->get_subcommand(w);
  }
}

std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* cmd = active_command(app);
  const std::string path = command_path(cmd);
  const std::string help = fmt::format("run '{} --help' for usage", path);
  // Unknown options fall through to the root, which keeps them as left over; they
  // explain most other errors (a misspelt required option), so they come first.
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    for (const std::string& w : a->remaining(false)) {
      if (w.size() > 1 && w[0] == '-') {
        const std::string name = w.substr(0, w.find('='));
        const std::vector<std::string> names = option_names(cmd);
        std::string hint = hf_name_hint(name, names);
        if (hint.empty()) hint = did_you_mean(name, names);
        return fmt::format("{}: unknown option '{}'{} ({})", path, name, hint, help);
      }
    }
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
      const auto rest = a->remaining(false);
      if (!rest.empty()) {
        return fmt::format("{}: unexpected argument '{}' ({})", path, rest.front(), help);
      }
    }
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr &&
      cmd->get_require_subcommand_min() > 0) {
    return fmt::format("{}: a {} is required: {} ({})", path, cmd == &app ? "command" : "kind",
                       fmt::join(subcommand_names(*cmd), ", "), help);
  }
  std::string msg = e.what();
  const auto nl = msg.find('\n');
  if (nl != std::string::npos) msg.resize(nl);
  return fmt::format("{}: {} ({})", path, msg, help);
}

}  // namespace posenc::cli
