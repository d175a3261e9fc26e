// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_inspect(CLI::App& app) {
  auto* sub = app.add_subcommand("inspect", "(in progress)");
  sub->callback([] { throw UsageError("inspect: not available in this build"); });
}
}  // namespace posenc::cli
