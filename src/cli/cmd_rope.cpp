// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_rope(CLI::App& app) {
  auto* sub = app.add_subcommand("rope", "(in progress)");
  sub->callback([] { throw UsageError("rope: not available in this build"); });
}
}  // namespace posenc::cli
