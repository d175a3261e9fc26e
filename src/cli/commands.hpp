#pragma once
// One register function per subcommand, each in its own cmd_<name>.cpp. Adding a
// command is one new file, one declaration and one row of kCommands, and its manual
// page man/posenc-<name>.1.

#include <CLI/CLI.hpp>

namespace posenc::cli {

void register_table(CLI::App& app);
void register_rope(CLI::App& app);
void register_rope_ids(CLI::App& app);
void register_attention(CLI::App& app);
void register_add(CLI::App& app);
void register_inspect(CLI::App& app);
void register_compare(CLI::App& app);
void register_convert(CLI::App& app);
void register_join(CLI::App& app);
void register_combine(CLI::App& app);
void register_plot(CLI::App& app);
void register_analyze(CLI::App& app);
void register_completion(CLI::App& app);
void register_help(CLI::App& app);

struct Command {
  const char* name;  ///< the command word; its manual page is posenc-<name>(1)
  void (*add)(CLI::App&);
};

/// Every command, in the order of `posenc --help` and of the manual.
inline constexpr Command kCommands[] = {
    {"table", register_table},
    {"rope", register_rope},
    {"attention", register_attention},
    {"add", register_add},
    {"inspect", register_inspect},
    {"compare", register_compare},
    {"convert", register_convert},
    {"join", register_join},
    {"combine", register_combine},
    {"plot", register_plot},
    {"analyze", register_analyze},
    {"rope-ids", register_rope_ids},
    {"completion", register_completion},
    {"help", register_help},
};

}  // namespace posenc::cli
