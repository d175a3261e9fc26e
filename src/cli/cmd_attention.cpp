// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_attention(CLI::App& app) {
  auto* sub = app.add_subcommand("attention", "(in progress)");
  sub->callback([] { throw UsageError("attention: not available in this build"); });
}
}  // namespace posenc::cli
