#include "cli/figure_output.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "cli/common.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {

void add_figure_options(CLI::App* sub, FigureOptions& o, bool with_file_flags) {
  const char* g = "PICTURE OPTIONS";
  sub->add_option("--width", o.width, "image width: pixels (PNG) or points (SVG, PDF); default 960")
      ->check(CLI::Range(64, 16384))
      ->group(g);
  sub->add_option("--height", o.height, "image height, default 720")
      ->check(CLI::Range(64, 16384))
      ->group(g);
  sub->add_option("--format", o.format, "image format png|svg|pdf, overriding the extension")
      ->check(CLI::IsMember({"png", "svg", "pdf"}))
      ->group(g);
  sub->add_option("--color", o.color,
                  "terminal drawing: auto (24-bit colour on a terminal unless NO_COLOR is set "
                  "or TERM=dumb), always, never (plain ASCII)")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->group(g);
  if (with_file_flags) {
    sub->add_flag("-f,--force", o.force, "write a PNG or PDF to a terminal")->group(g);
    sub->add_flag("--no-clobber", o.no_clobber, "fail instead of replacing an existing file")
        ->group(g);
    sub->add_flag("--sync", o.sync, "fsync the file before renaming it into place")->group(g);
  }
}

TerminalStyle terminal_style(const std::string& color) {
  TerminalStyle st;
  const bool tty = isatty(STDOUT_FILENO) == 1;
  winsize ws{};
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    st.columns = ws.ws_col;
    st.lines = ws.ws_row;
  } else {
    auto env_int = [](const char* name, int fallback) {
      const char* v = std::getenv(name);
      const auto n = v ? parse_integer(v) : std::nullopt;
      return n && *n > 0 && *n < 100000 ? static_cast<int>(*n) : fallback;
    };
    st.columns = env_int("COLUMNS", 80);
    st.lines = env_int("LINES", 24);
  }
  if (color == "always" || color == "never") {
    st.color = color == "always";
  } else {
    const char* no_color = std::getenv("NO_COLOR");
    const char* term = std::getenv("TERM");
    st.color = tty && (no_color == nullptr || *no_color == '\0') && term != nullptr &&
               *term != '\0' && std::string(term) != "dumb";
  }
  return st;
}

FigureTarget::FigureTarget(const std::string& path, const FigureOptions& o, Figure fig) {
  fig.width = o.width;
  fig.height = o.height;
  const bool terminal = path.empty() || (path == "-" && o.format.empty());
  WriteOptions wo;
  wo.force = o.force;
  wo.no_clobber = o.no_clobber;
  wo.sync = o.sync;
  if (terminal) {
    out_ = std::make_unique<OutputFile>("-", wo, false);
    text_ = render_terminal(fig, terminal_style(o.color));
    return;
  }
  const ImageFormat format = image_format(path, o.format);
  out_ = std::make_unique<OutputFile>(path, wo, format != ImageFormat::svg);
  text_ = render_image(fig, format);
}

FigureTarget::~FigureTarget() = default;

void FigureTarget::prepare() {
  if (prepared_) return;
  out_->write(text_);
  text_ = {};
  out_->finish();
  prepared_ = true;
}

void FigureTarget::commit() {
  prepare();
  out_->commit();
}

}  // namespace posenc::cli
