// `posenc help [COMMAND]`: the manual page of a command (posenc-rope(1), ...) or the
// overview posenc(1), shown by man(1) (in a child, whose status posenc maps to its own).
// The page is looked up next to the binary, where `cmake --install` puts it
// (bin/../share/man/man1), or in the source tree when the binary is the one in the build
// tree; without man(1) its path is printed instead.

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

// Copies what man(1) writes to `from` to standard output; the errno of a failed write
// (then the pipe is closed, which ends man), or 0.
int copy_to_stdout(int from) {
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(from, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    for (ssize_t at = 0; at < r;) {
      const ssize_t w = ::write(1, buf + at, static_cast<std::size_t>(r - at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return errno;
      at += w;
    }
  }
}

// Shows `page` with man(1) in a child and maps its outcome to posenc's statuses (man's
// own, 1 to 3 and 16, would otherwise read as posenc's): success, OutputError for a
// write error or a man that failed. To a terminal man writes itself (its pager needs
// it); elsewhere through a pipe, so that a full disk or /dev/full is seen (man reports
// success). False when man could not be started: the caller prints the page's path.
bool run_man(const std::string& man, const std::string& page) {
  std::fflush(stdout);
  const bool terminal = ::isatty(1) == 1;
  int fds[2] = {-1, -1};
  if (!terminal && ::pipe2(fds, O_CLOEXEC) != 0) return false;
  // As system(3): Ctrl-C and Ctrl-\ are for man and its pager, which keep the terminal.
  struct sigaction ignore {};
  struct sigaction old_int {};
  struct sigaction old_quit {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGQUIT, &ignore, &old_quit);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // posenc ignores these to report write errors itself; man and its pager expect them.
    for (int sig : {SIGINT, SIGQUIT, SIGPIPE, SIGXFSZ}) std::signal(sig, SIG_DFL);
    if (!terminal) ::dup2(fds[1], 1);
    const char* argv[] = {"man", "-l", page.c_str(), nullptr};
    ::execv(man.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  if (fds[1] >= 0) ::close(fds[1]);
  const int write_error = pid > 0 && !terminal ? copy_to_stdout(fds[0]) : 0;
  if (fds[0] >= 0) ::close(fds[0]);
  int status = 0;
  while (pid > 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGQUIT, &old_quit, nullptr);
  if (write_error != 0) {
    throw OutputError(
        fmt::format("cannot write to standard output: {}", std::strerror(write_error)));
  }
  if (pid < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 127)) return false;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  throw OutputError(fmt::format("help: man(1) could not show {} ({} {})", page,
                                WIFEXITED(status) ? "exit status" : "signal",
                                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)));
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
        page,
        dirs.empty() ? std::string("no folder: /proc/self/exe unreadable")
                     : fmt::format("{}", fmt::join(dirs, ", ")),
        command.empty() || command == "help" ? "posenc " : "posenc " + command + " "));
  }
  const std::string man = on_path("man");
  if (!man.empty() && run_man(man, found)) return;
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
