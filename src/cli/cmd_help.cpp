// `posenc help [COMMAND]`: the manual page of a command (posenc-rope(1), ...) or the
// overview posenc(1), shown by man(1). The page is looked up next to the binary, where
// `cmake --install` puts it (bin/../share/man/man1), or in the source tree when the
// binary is the one in the build tree; without man(1) its path is printed instead.

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/suggest.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {

namespace {

bool is_file(const std::string& path) { return !path.empty() && ::access(path.c_str(), R_OK) == 0; }

// The folder of the running binary ("" when /proc is not mounted).
std::string exe_dir() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) return "";
  buf.resize(static_cast<std::size_t>(n));
  return buf.substr(0, buf.rfind('/'));
}

// Where posenc-<name>.1 may be, in the order they are tried.
std::vector<std::string> man_dirs() {
  std::vector<std::string> dirs;
  const std::string dir = exe_dir();
  if (dir.empty()) return dirs;
  dirs.push_back(dir + "/" POSENC_MAN_FROM_BIN);
  // The binary in the build tree reads the pages of its own source tree.
  char* real = ::realpath(POSENC_BUILD_DIR, nullptr);
  if (real != nullptr) {
    if (dir == real) dirs.push_back(POSENC_SOURCE_MAN_DIR);
    std::free(real);
  }
  return dirs;
}

// The absolute path of an executable `name` on PATH, or "".
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "";
  for (std::size_t pos = 0; pos <= p.size();) {
    std::size_t end = p.find(':', pos);
    if (end == std::string::npos) end = p.size();
    std::string d = p.substr(pos, end - pos);
    pos = end + 1;
    if (d.empty() || d[0] != '/') continue;  // a relative PATH entry would depend on the cwd
    const std::string f = d + "/" + name;
    if (::access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

void show_page(const std::string& command) {
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  bool known = command.empty();
  for (const auto& n : names) known = known || n == command;
  if (!known) {
    const std::string near = closest(command, names);
    throw UsageError(fmt::format("help: unknown command '{}'{}; expected one of {}", command,
                                 near.empty() ? "" : fmt::format(" (did you mean {}?)", near),
                                 fmt::join(names, ", ")));
  }
  // `posenc help help` is the overview, which describes this command.
  const std::string page =
      command.empty() || command == "help" ? "posenc.1" : "posenc-" + command + ".1";
  std::string found;
  const std::vector<std::string> dirs = man_dirs();
  for (const auto& d : dirs) {
    if (is_file(d + "/" + page)) {
      found = d + "/" + page;
      break;
    }
  }
  if (found.empty()) {
    throw InputError(fmt::format(
        "help: the manual page {} is not installed (looked in {}); '{}--help' prints the "
        "options",
        page, dirs.empty() ? std::string("no folder: /proc/self/exe unreadable") : fmt::format("{}", fmt::join(dirs, ", ")),
        command.empty() || command == "help" ? "posenc " : "posenc " + command + " "));
  }
  const std::string man = on_path("man");
  if (!man.empty()) {
    std::fflush(stdout);
    // posenc ignores these to report write errors itself; man and its pager expect them.
    std::signal(SIGPIPE, SIG_DFL);
    std::signal(SIGXFSZ, SIG_DFL);
    const char* argv[] = {"man", "-l", found.c_str(), nullptr};
    ::execv(man.c_str(), const_cast<char* const*>(argv));
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGXFSZ, SIG_IGN);
  }
  // No man(1) (or it could not run): the page's path, for `man -l`, groff or a viewer.
  if (std::printf("%s\n", found.c_str()) < 0 || std::fflush(stdout) != 0) {
    throw OutputError("cannot write to standard output");
  }
  if (!globals().quiet) {
    std::fprintf(stderr, "posenc: note: man(1) not found on PATH: printed the page's path\n");
  }
}

}  // namespace

void register_help(CLI::App& app) {
  static std::string command;
  auto* sub = app.add_subcommand(
      "help",
      "show the manual page of COMMAND (posenc-COMMAND(1)), or without one the overview "
      "posenc(1), with man(1); without man(1) on PATH, print the page's path");
  sub->add_option("command", command, "table, rope, attention, ... (default: the overview)");
  sub->callback([] { show_page(command); });
}

}  // namespace posenc::cli
