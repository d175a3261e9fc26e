// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_table(CLI::App& app) {
  auto* sub = app.add_subcommand("table", "(in progress)");
  sub->callback([] { throw UsageError("table: not available in this build"); });
}
}  // namespace posenc::cli
