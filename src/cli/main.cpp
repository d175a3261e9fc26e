// posenc: the driver. Builds the command line, runs the chosen command and maps
// errors to the exit statuses of CLI.md. Everything else lives in the library.

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <new>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/suggest.hpp"
#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"
#include "posenc/printable.hpp"
#include "posenc/threads.hpp"
#include "posenc/version.hpp"

namespace {

using posenc::ExitStatus;

int fail(ExitStatus status, std::string msg) {
  std::fflush(stdout);
  // One line, whatever a library (HDF5, the C runtime) put into the message.
  for (char& c : msg) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // Messages quote names and values from files: no escape sequence reaches the terminal.
  msg = posenc::printable(msg);
  // stdio, not fmt::print, which throws when stderr itself cannot be written.
  std::fprintf(stderr, "posenc: error: %s\n", msg.c_str());
  return static_cast<int>(status);
}

// A closed standard descriptor would be handed out again by the next open(): an output
// file would become "standard output". Each one closed is reopened on /dev/null in the
// direction that fails (reads from a write-only 0, writes to a read-only 1), so using
// it is an error rather than silent success; 2 becomes a sink.
void reopen_closed_std_fds() {
  const int kModes[3] = {O_WRONLY, O_RDONLY, O_WRONLY};
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int got = ::open("/dev/null", kModes[fd]);
    if (got >= 0 && got != fd) {
      ::dup2(got, fd);
      ::close(got);
    }
  }
}

// Output to standard output goes through stdio: an error (closed pipe, /dev/full) is
// only known once the buffer is flushed, so the exit status is decided here.
int check_stdout(int code) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  const int err = errno;
  if (code != 0 && code != static_cast<int>(ExitStatus::kDiffer)) return code;
  return fail(ExitStatus::kOutput,
              std::string("cannot write to standard output: ") + std::strerror(err));
}

// "out of memory", with the option that bounds memory when the command has one.
std::string out_of_memory(const CLI::App& app) {
  const CLI::App* cmd = &app;
  for (auto subs = app.get_subcommands(); !subs.empty(); subs = subs.back()->get_subcommands()) {
    cmd = subs.back();
  }
  const bool has_limit = cmd->get_option_no_throw("--max-memory") != nullptr;
  return has_limit ? "out of memory (see --max-memory)" : "out of memory";
}

// Whether the command read a tensor from standard input: an input option (any but
// -o/--output) or argument given as "-".
bool reads_stdin(const CLI::App& app) {
  for (const CLI::App* cmd = &app;;) {
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->check_name("-o")) continue;
      for (const std::string& v : opt->results()) {
        if (v == "-") return true;
      }
    }
    const auto subs = cmd->get_subcommands();
    if (subs.empty()) return false;
    cmd = subs.front();
  }
}

using posenc::cli::Command;
using posenc::cli::kCommands;

// Whether to define command `c` for this run. Defining all of them, with their
// hundreds of options, was half of posenc's start-up once libhdf5 and OpenBLAS were
// no longer loaded at start. A run that names a command needs no other (its help,
// errors and suggestions are its own), `posenc --version` needs none; help, a command
// word that is misspelt or missing, and `completion` (which writes scripts for all
// commands) get all of them.
bool defines(const Command& c, const posenc::cli::RunWords& r) {
  if (r.help_after == 0) return true;
  if (r.words.empty()) return r.version_after == posenc::cli::RunWords::kNone;
  const std::string& w = r.words.front();
  bool known = false;
  for (const Command& k : kCommands) known = known || w == k.name;
  return !known || w == "completion" || w == c.name;
}

int run(int argc, char** argv, bool full = false) {
  auto& g = posenc::cli::globals();
  g.run = posenc::cli::scan_run_words(argc, argv);
  g.run.full = full;
  // Never destroyed: the process ends when run() returns, and freeing the definitions'
  // strings and functions one by one was a tenth of a small command's instructions.
  // Reachable from here, so leak checkers do not count it.
  static CLI::App* defined[2] = {};  // lean, then full
  CLI::App& app =
      *(defined[full ? 1 : 0] = new CLI::App{
            "posenc: positional encodings for transformers. Generates encoding tables, applies "
            "RoPE to tensors, adds absolute encodings to embeddings, computes reference attention, "
            "inspects and compares tensors.",
            "posenc"});
  app.set_version_flag("--version", "posenc " POSENC_VERSION);
  if (posenc::cli::defines_option("-j,--threads")) {
    app.add_option("-j,--threads", g.threads, "worker threads (default: all cores)")
        ->check(CLI::Range(1, posenc::kMaxThreads));
  }
  if (posenc::cli::defines_option("-q,--quiet")) {
    app.add_flag("-q,--quiet", g.quiet, "no progress or notes on stderr");
  }
  if (posenc::cli::defines_option("-v,--verbose")) {
    app.add_flag("-v,--verbose", g.verbose, "print parameters and details on stderr");
  }
  app.require_subcommand(0, 1);
  app.fallthrough();

  for (const Command& c : kCommands) {
    if (defines(c, g.run)) c.add(app);
  }
  posenc::cli::check_numeric_options(app);

  // Threads are set before any command callback runs. (OpenBLAS runs on one thread
  // per call whatever the count: shim/blas.cpp.)
  app.parse_complete_callback([&g] {
    if (g.threads <= 0) return;
    // libgomp ends the process when it cannot create a worker (ulimit -v, RLIMIT_NPROC):
    // a count that cannot start runs on fewer, with a note.
    const int n = posenc::set_worker_threads(g.threads);
    if (n < g.threads && !g.quiet) {
      std::fprintf(stderr,
                   "posenc: note: -j %d: not that many threads can start here (a memory or "
                   "process limit); running on %d\n",
                   g.threads, n);
    }
    g.threads = n;
  });

  try {
    posenc::cli::check_command_words(app, {argv + 1, argv + argc});
    app.parse(argc, argv);
  } catch (const posenc::Error& e) {
    // The library names its parameters; say them as this command's options.
    const CLI::App* cmd = &app;
    while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
    return fail(e.status(), posenc::cli::cli_terms(cmd, e.what()));
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Said with every option defined: suggestions and usage lines need them all. (No
    // command has run: CLI11 runs the callbacks after the whole line parsed.)
    if (!full) return run(argc, argv, true);
    return fail(ExitStatus::kUsage, posenc::cli::parse_error_message(app, e));
  } catch (const std::bad_alloc&) {
    return fail(ExitStatus::kBadInput, out_of_memory(app));
  }
  if (app.get_subcommands().empty()) {
    fmt::print(stderr, "{}", app.help());
    std::string names;
    for (const Command& c : kCommands) {
      if (!names.empty()) names += &c == std::end(kCommands) - 1 ? " or " : ", ";
      names += c.name;
    }
    return fail(ExitStatus::kUsage, "a command is required: " + names);
  }
  // A command that needed only part of a piped tensor (inspect --slice 0, compare of
  // different shapes) still takes the rest, so the producer does not fail with a
  // broken pipe.
  if (reads_stdin(app)) posenc::cli::drain_stdin();
  return posenc::cli::exit_code();
}

// OpenMP workers that wait passively (sleep on a futex) between parallel regions,
// unless the user chose a policy (OMP_WAIT_POLICY, GOMP_SPINCOUNT). libgomp spins
// 300,000 rounds by default after each region: the streaming commands run one region
// per slab beside a reader and a writer thread, and with -j 2 on two cores the spinning
// worker took the writer's core (a 256 MiB RoPE took 19 s against 0.9 s with -j 1
// beside other builds). libgomp reads its environment once, in its own constructor:
// this one runs first (a numbered priority sorts before libgomp's), and main() takes
// the variable out again so that no child process inherits it.
bool g_set_wait_policy = false;

#ifdef POSENC_STATIC_LIBGOMP
__attribute__((constructor(101))) void passive_openmp_wait() {
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    g_set_wait_policy = ::setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
  }
}
#else
// A shared libgomp has read the environment before any constructor here: a run that
// sets the thread count starts itself again with the policy in its environment.
void passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  bool threads = false;
  for (char** a = argv + 1; *a && !threads; ++a) {
    threads = std::strncmp(*a, "-j", 2) == 0 || std::strncmp(*a, "--threads", 9) == 0;
  }
  if (!threads || ::setenv("OMP_WAIT_POLICY", "passive", 0) != 0) return;
  if (::setenv("POSENC_UNSET_WAIT_POLICY", "1", 1) == 0) ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // exec failed: run on as before
  ::unsetenv("POSENC_UNSET_WAIT_POLICY");
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifndef POSENC_STATIC_LIBGOMP
  if (std::getenv("POSENC_UNSET_WAIT_POLICY")) {
    g_set_wait_policy = true;
    ::unsetenv("POSENC_UNSET_WAIT_POLICY");
  } else {
    passive_openmp_wait(argv);
  }
#endif
  if (g_set_wait_policy) ::unsetenv("OMP_WAIT_POLICY");
  reopen_closed_std_fds();
  // The command owns its process: SIGINT, SIGTERM and SIGHUP remove the temporaries of
  // its outputs before it exits (the library alone installs no handlers).
  posenc::install_signal_cleanup();
  // A closed pipe is EPIPE and a file size limit (ulimit -f) is EFBIG, both reported as
  // output errors (exit 4), instead of signals that kill without a word.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return check_stdout(run(argc, argv));
  } catch (const posenc::Error& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(ExitStatus::kBadInput, "out of memory");
  } catch (const std::system_error& e) {
    // fmt::print throws this when stdio cannot write standard output.
    if (std::ferror(stdout)) {
      return fail(ExitStatus::kOutput, "cannot write to standard output: " + e.code().message());
    }
    return fail(ExitStatus::kInternal, std::string("internal error: ") + e.what());
  } catch (const std::exception& e) {
    return fail(ExitStatus::kInternal, std::string("internal error: ") + e.what());
  }
}
