// Placeholder registration, replaced by the command's implementation.
#include "cli/commands.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {
void register_convert(CLI::App& app) {
  auto* sub = app.add_subcommand("convert", "(in progress)");
  sub->callback([] { throw UsageError("convert: not available in this build"); });
}
}  // namespace posenc::cli
