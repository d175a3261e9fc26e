#pragma once
// Where `plot` and `analyze --plot` draw: an image file (PNG, SVG, PDF) or the
// terminal (standard output), with the options both commands share.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "posenc/io/atomic.hpp"
#include "posenc/plot.hpp"

namespace posenc::cli {

struct FigureOptions {
  int width = 960, height = 720;  ///< image size (pixels for PNG, points for SVG/PDF)
  std::string format;             ///< png|svg|pdf, overriding the file extension
  std::string color = "auto";     ///< terminal drawing: auto|always|never
  bool force = false, no_clobber = false, sync = false;
};

/// Adds --width, --height, --format and --color. `with_file_flags` also adds --force,
/// --no-clobber and --sync (commands without tensor output options).
void add_figure_options(CLI::App* sub, FigureOptions& o, bool with_file_flags);

/// A figure bound for `path`: an image file (rendered now, written by `commit`), or the
/// terminal when `path` is empty (`plot` without -o) or "-" without --format (`analyze
/// --plot -`). Opening the file first makes a bad target fail before other outputs.
class FigureTarget {
 public:
  FigureTarget(const std::string& path, const FigureOptions& o, Figure fig);
  ~FigureTarget();
  /// Writes the image (or prints the drawing) short of making the file visible: a full
  /// disk fails here, before another output of the run is published.
  void prepare();
  /// prepare() and then makes the image visible.
  void commit();

 private:
  bool prepared_ = false;
  std::string text_;  // rendered bytes or text
  std::unique_ptr<OutputFile> out_;
};

/// The terminal drawing style for standard output: the window size (TIOCGWINSZ, else
/// COLUMNS/LINES, else 80x24), and colour by --color: auto means colour when standard
/// output is a terminal, NO_COLOR is unset or empty and TERM is set and not "dumb".
TerminalStyle terminal_style(const std::string& color);

}  // namespace posenc::cli
