#include "cli/table_output.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"
#include "posenc/io/text.hpp"

namespace posenc::cli {

void add_table_output_options(CLI::App* sub, TableOutputOptions& o, const char* out_help,
                              const char* plot_help) {
  add_output_options(sub, o.out, false, false, out_help);
  sub->add_option("--plot", o.plot, plot_help);
  add_figure_options(sub, o.fig, false);
}

std::string table_text(const AnalysisTable& t) {
  const std::size_t rows = t.data.shape()[0], cols = t.columns.size();
  std::vector<std::vector<std::string>> cells(rows + 1);
  std::vector<std::size_t> width(cols, 0);
  for (std::size_t c = 0; c < cols; ++c) cells[0].push_back(t.columns[c]);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c)
      cells[r + 1].push_back(format_element(t.data, r * cols + c));
  }
  for (const auto& row : cells) {
    for (std::size_t c = 0; c < cols; ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : cells) {
    for (std::size_t c = 0; c < cols; ++c) {
      out += (c ? "  " : "") + std::string(width[c] - row[c].size(), ' ') + row[c];
    }
    out += '\n';
  }
  return out;
}

void emit_table(const AnalysisTable& t, const TableOutputOptions& c, bool print) {
  const bool has_out = !c.out.outputs.empty();
  if (has_out && c.out.outputs[0] == "-" && c.plot == "-") {
    throw UsageError("-o - and --plot - would both write to standard output");
  }
  verbose_attrs(t.attrs);
  std::unique_ptr<FigureTarget> picture;
  if (!c.plot.empty()) {
    FigureOptions fo = c.fig;
    fo.force = c.out.write.force;
    fo.no_clobber = c.out.write.no_clobber;
    fo.sync = c.out.write.sync;
    picture = std::make_unique<FigureTarget>(c.plot, fo, t.figure);
  }
  if (picture && c.plot != "-") picture->prepare();
  if (has_out) {
    write_tensor(parse_ref(c.out.outputs[0], c.out.to), t.data, t.attrs, c.out.write_options());
  }
  if (picture) picture->commit();
  if (!has_out && !picture && print) {
    OutputFile out("-", c.out.write_options(), false);
    out.write(table_text(t));
    out.commit();
  }
}

}  // namespace posenc::cli
