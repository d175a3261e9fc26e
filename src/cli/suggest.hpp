#pragma once
// Helpful parse errors: unknown commands, table kinds and options with "did you mean",
// and the help of the command at hand.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace posenc::cli {

/// The closest of `candidates` to `word` when it is a plausible typo (edit distance of
/// at most a third of the word, and at most 3), else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

/// The deepest subcommand the parse reached (the app itself when none).
const CLI::App* active_command(const CLI::App& app);

/// "posenc table rope": the command path of `cmd`.
std::string command_path(const CLI::App* cmd);

/// Checks the command words of `args` (argv without the program name) before parsing:
/// an unknown command or table kind is a UsageError whose message names it, suggests
/// the closest name and lists the choices. Options are left to CLI11.
void check_command_words(const CLI::App& app, const std::vector<std::string>& args);

/// The one-line message for a CLI11 parse error at `cmd`: unknown options with a
/// suggestion, and a pointer to the command's own --help.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e);

}  // namespace posenc::cli
