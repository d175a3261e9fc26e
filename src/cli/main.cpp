// posenc: the driver. Builds the command line, runs the chosen command and maps
// errors to the exit statuses of CLI.md. Everything else lives in the library.

#include <omp.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/suggest.hpp"
#include "posenc/error.hpp"
#include "posenc/version.hpp"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using posenc::ExitStatus;

int fail(ExitStatus status, const std::string& msg) {
  std::fflush(stdout);
  fmt::print(stderr, "posenc: error: {}\n", msg);
  return static_cast<int>(status);
}

int run(int argc, char** argv) {
  CLI::App app{
      "posenc: positional encodings for transformers. Generates encoding tables, applies "
      "RoPE to tensors, adds absolute encodings to embeddings, computes reference attention, "
      "inspects and compares tensors.",
      "posenc"};
  app.set_version_flag("--version", "posenc " POSENC_VERSION);
  auto& g = posenc::cli::globals();
  app.add_option("-j,--threads", g.threads, "worker threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  app.add_flag("-q,--quiet", g.quiet, "no progress or notes on stderr");
  app.add_flag("-v,--verbose", g.verbose, "print parameters and details on stderr");
  app.require_subcommand(0, 1);
  app.fallthrough();

  posenc::cli::register_table(app);
  posenc::cli::register_rope(app);
  posenc::cli::register_attention(app);
  posenc::cli::register_add(app);
  posenc::cli::register_inspect(app);
  posenc::cli::register_compare(app);
  posenc::cli::register_convert(app);
  posenc::cli::register_plot(app);
  posenc::cli::register_analyze(app);
  posenc::cli::register_completion(app);

  // Threads are set before any command callback runs.
  app.parse_complete_callback([&g] {
    if (g.threads > 0) {
      omp_set_num_threads(g.threads);
      openblas_set_num_threads(g.threads);
    }
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
    return fail(ExitStatus::kUsage, posenc::cli::parse_error_message(app, e));
  }
  if (app.get_subcommands().empty()) {
    fmt::print(stderr, "{}", app.help());
    return fail(ExitStatus::kUsage,
                "a command is required: table, rope, attention, add, inspect, compare, "
                "convert, plot, analyze or completion");
  }
  return posenc::cli::exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const posenc::Error& e) {
    return fail(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return fail(ExitStatus::kBadInput, "out of memory (see --max-memory)");
  } catch (const std::exception& e) {
    return fail(ExitStatus::kInternal, std::string("internal error: ") + e.what());
  }
}
