// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_compare(CLI::App& app) {
  auto* sub = app.add_subcommand("compare", "(in progress)");
  sub->callback([] { throw UsageError("compare: not available in this build"); });
}
}  // namespace posenc::cli
