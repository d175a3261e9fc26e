#pragma once
// One register function per subcommand, each in its own cmd_<name>.cpp. Adding a
// command is one new file and one line here and in main.cpp.

#include <CLI/CLI.hpp>

namespace posenc::cli {

void register_table(CLI::App& app);
void register_rope(CLI::App& app);
void register_attention(CLI::App& app);
void register_add(CLI::App& app);
void register_inspect(CLI::App& app);
void register_compare(CLI::App& app);
void register_convert(CLI::App& app);
void register_join(CLI::App& app);
void register_plot(CLI::App& app);
void register_analyze(CLI::App& app);
void register_completion(CLI::App& app);

}  // namespace posenc::cli
