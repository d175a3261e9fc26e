// posenc plot: a heatmap of a 2-D selection or lines of 1-D data and chosen rows or
// columns, from one or several tensors, to PNG/SVG/PDF or the terminal.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/figure_output.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/plot.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/ops/stats.hpp"

namespace posenc::cli {

namespace {

// Selections above this many values are refused: a picture cannot show them and the
// caller can thin them with a slice step.
constexpr std::size_t kMaxValues = std::size_t{1} << 24;

struct PlotOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string slice;
  std::string rows, cols;
  long long x_col = -1;
  bool lines = false, heatmap = false;
  std::string cmap = "auto";
  bool log = false;
  double vmin = 0, vmax = 0;
  std::string title, xlabel, ylabel;
  std::vector<std::string> labels;
  FigureOptions fig;
  CLI::App* app = nullptr;
};

/// One input's selection with extent-1 axes dropped: values and their tensor indices.
struct Selected {
  std::string name;                           // reference text
  Tensor values;                              // f64, shape = one entry per axis below
  std::vector<std::vector<std::size_t>> idx;  // tensor indices along each remaining axis
  std::vector<std::size_t> axes;              // which tensor axis each one is
  std::size_t rank = 0;                       // of the whole tensor
  Attrs attrs;
  std::vector<std::string> columns;  // names from the "columns" attribute, if any
};

std::vector<std::size_t> index_list(const std::string& text, const char* option) {
  std::vector<std::size_t> out;
  for (const auto& part : split_list(text)) {
    const auto v = parse_integer(part);
    if (!v || *v < 0) {
      throw UsageError(
          fmt::format("{}: '{}' is not a list of indices (e.g. 0,5,10)", option, text));
    }
    out.push_back(static_cast<std::size_t>(*v));
  }
  return out;
}

Selected read_selected(const std::string& text, const std::string& slice) {
  Selected s;
  s.name = text;
  const TensorRef ref = parse_ref(text);
  auto src = open_source(ref, {/*attrs=*/true});  // titles and analyze columns
  const TensorInfo& info = src->info();
  const Selection sel = slice.empty()
                            ? select_all(info.shape)
                            : resolve_slice_option(parse_slice_option(slice), info.shape, text);
  if (sel.numel > kMaxValues) {
    throw InputError(
        fmt::format("{}: the selection holds {} values, more than the {} a plot "
                    "takes (thin it with a --slice step)",
                    text, sel.numel, kMaxValues));
  }
  if (sel.numel == 0) throw InputError(fmt::format("{}: the selection is empty", text));
  Tensor raw = summarize(*src, sel, sel.numel).head;
  s.values = Tensor(DType::f64, Shape{raw.numel()});
  for (std::size_t i = 0; i < raw.numel(); ++i) s.values.data<double>()[i] = raw.get(i);
  Shape shape;
  for (std::size_t ax = 0; ax < info.shape.size(); ++ax) {
    const AxisSelection& a = sel.axes[ax];
    if (a.drop || a.size == 1) continue;
    std::vector<std::size_t> idx(a.size);
    for (std::size_t i = 0; i < a.size; ++i) idx[i] = a.at(i);
    s.idx.push_back(std::move(idx));
    s.axes.push_back(ax);
    shape.push_back(a.size);
  }
  if (shape.empty()) {
    throw InputError(fmt::format("{}: the selection is a single value; nothing to plot", text));
  }
  if (shape.size() > 2) {
    throw InputError(
        fmt::format("{}: the selection has shape {}; choose at most two axes with "
                    "--slice (e.g. --slice 0,0)",
                    text, shape_str(shape)));
  }
  s.values.reshape(shape);
  s.rank = info.shape.size();
  s.attrs = info.attrs;
  for (const auto& a : info.attrs) {
    const auto* names = std::get_if<std::string>(&a.value);
    if (a.name == "columns" && names && shape.size() == 2) {
      auto cols = split_list(*names);
      if (cols.size() == info.shape.back()) s.columns = std::move(cols);
    }
  }
  return s;
}

/// "kind=rope emit=cos rope_theta=10000 ...": the recorded parameters, most telling first.
std::string describe(const Attrs& attrs) {
  static const char* const kFirst[] = {"kind",       "emit",   "variant", "rope_type",
                                       "rope_theta", "base",   "dim",     "head_dim",
                                       "rotary_dim", "factor", "heads"};
  auto text = [](const AttrValue& v) -> std::string {
    if (const auto* s = std::get_if<std::string>(&v)) return *s;
    if (const auto* d = std::get_if<double>(&v)) return fmt::format("{:.6g}", *d);
    if (const auto* i = std::get_if<long long>(&v)) return std::to_string(*i);
    return "[...]";
  };
  std::vector<std::string> parts;
  for (const char* key : kFirst) {
    for (const auto& a : attrs) {
      if (a.name == key) parts.push_back(a.name + "=" + text(a.value));
    }
  }
  std::string out = fmt::format("{}", fmt::join(parts, " "));
  return out.size() > 110 ? out.substr(0, 107) + "..." : out;
}

std::vector<double> coords(const std::vector<std::size_t>& idx) {
  return std::vector<double>(idx.begin(), idx.end());
}

std::size_t position_of(const std::vector<std::size_t>& idx, std::size_t v, const char* option,
                        const std::string& name) {
  auto it = std::find(idx.begin(), idx.end(), v);
  if (it == idx.end()) {
    throw InputError(fmt::format("{}: index {} is not in the selection of {}", option, v, name));
  }
  return static_cast<std::size_t>(it - idx.begin());
}

/// The lines one input contributes: the 1-D data, or the chosen rows or columns.
void add_series(const Selected& s, const PlotOptions& o, bool several, LinePanel& panel) {
  const std::string prefix = several ? s.name + " " : "";
  const double* v = s.values.data<double>();
  if (s.idx.size() == 1) {
    panel.series.push_back(
        {several ? s.name : "", coords(s.idx[0]), std::vector<double>(v, v + s.values.numel())});
    return;
  }
  const std::size_t nr = s.idx[0].size(), nc = s.idx[1].size();
  if (!o.rows.empty()) {
    for (std::size_t r : index_list(o.rows, "--rows")) {
      const std::size_t p = position_of(s.idx[0], r, "--rows", s.name);
      panel.series.push_back({prefix + fmt::format("row {}", r), coords(s.idx[1]),
                              std::vector<double>(v + p * nc, v + (p + 1) * nc)});
    }
    return;
  }
  std::vector<std::size_t> cols;
  long long x_col = o.x_col;
  if (!o.cols.empty()) {
    cols = index_list(o.cols, "--cols");
  } else {
    // A table with named columns (analyze output): everything against column 0.
    if (x_col < 0) x_col = 0;
    for (std::size_t c : s.idx[1]) {
      if (static_cast<long long>(c) != x_col) cols.push_back(c);
    }
  }
  std::vector<double> x = coords(s.idx[0]);
  if (x_col >= 0) {
    const std::size_t p = position_of(s.idx[1], static_cast<std::size_t>(x_col), "--x-col", s.name);
    for (std::size_t r = 0; r < nr; ++r) x[r] = v[r * nc + p];
    if (panel.xlabel.empty() && !s.columns.empty()) panel.xlabel = s.columns[x_col];
  }
  for (std::size_t c : cols) {
    const std::size_t p = position_of(s.idx[1], c, "--cols", s.name);
    std::vector<double> y(nr);
    for (std::size_t r = 0; r < nr; ++r) y[r] = v[r * nc + p];
    panel.series.push_back(
        {prefix + (s.columns.empty() ? fmt::format("column {}", c) : s.columns[c]), x, y});
  }
}

/// "axis 2", or what the axis holds in a table posenc wrote (position, dimension).
std::string axis_name(const Selected& s, std::size_t k) {
  const std::size_t axis = s.axes[k];
  for (const auto& a : s.attrs) {
    const auto* kind = std::get_if<std::string>(&a.value);
    if (a.name != "kind" || kind == nullptr) continue;
    if ((*kind == "sinusoidal" || *kind == "rope") && s.rank == 2) {
      return axis == 0 ? fmt::format("position (axis {})", axis)
                       : fmt::format("dimension (axis {})", axis);
    }
  }
  return fmt::format("axis {}", axis);
}

HeatmapPanel heatmap(const Selected& s, const PlotOptions& o) {
  HeatmapPanel h;
  h.rows = s.idx[0].size();
  h.cols = s.idx[1].size();
  h.z.assign(s.values.data<double>(), s.values.data<double>() + s.values.numel());
  auto axis = [](const std::vector<std::size_t>& idx) {
    // A heatmap axis is first + k * step; an uneven index list has no such labels.
    for (std::size_t k = 2; k < idx.size(); ++k) {
      if (idx[k] - idx[k - 1] != idx[1] - idx[0]) {
        throw UsageError(
            "--slice: a heatmap needs evenly spaced indices on each axis; use a range or "
            "--lines");
      }
    }
    AxisIndex a;
    a.first = static_cast<double>(idx[0]);
    a.step = idx.size() > 1 ? static_cast<double>(idx[1]) - static_cast<double>(idx[0]) : 1.0;
    return a;
  };
  h.y = axis(s.idx[0]);
  h.x = axis(s.idx[1]);
  h.ylabel = o.ylabel.empty() ? axis_name(s, 0) : o.ylabel;
  h.xlabel = o.xlabel.empty() ? axis_name(s, 1) : o.xlabel;
  if (o.cmap != "auto") {
    h.cmap = o.cmap == "diverging" ? ColorMap::diverging : ColorMap::sequential;
  }
  if (o.app->count("--vmin") > 0) h.vmin = o.vmin;
  if (o.app->count("--vmax") > 0) h.vmax = o.vmax;
  h.log = o.log;
  return h;
}

void check_flags(const PlotOptions& o) {
  if (o.lines && o.heatmap) throw UsageError("--lines and --heatmap exclude each other");
  if (!o.rows.empty() && !o.cols.empty()) throw UsageError("--rows and --cols exclude each other");
  if (o.app->count("--x-col") > 0 && o.x_col < 0) {
    throw UsageError(fmt::format("--x-col: must be >= 0, got {}", o.x_col));
  }
  if (o.x_col >= 0 && !o.rows.empty()) throw UsageError("--x-col goes with --cols, not --rows");
  if (o.heatmap && (o.inputs.size() > 1 || !o.rows.empty() || !o.cols.empty() || o.x_col >= 0)) {
    throw UsageError("--heatmap: needs one 2-D selection and no --rows/--cols/--x-col");
  }
  if (!o.slice.empty()) parse_slice_option(o.slice);  // syntax errors before any read
}

/// One chart with the lines of every input.
LinePanel line_panel(const std::vector<Selected>& sel, const PlotOptions& o,
                     const std::string& where) {
  const bool several = sel.size() > 1;
  LinePanel panel;
  panel.xlabel = o.xlabel;
  for (const auto& s : sel) {
    if (s.idx.size() == 2 && o.rows.empty() && o.cols.empty() && s.columns.empty()) {
      throw UsageError(fmt::format("{}: a 2-D selection as lines needs --rows or --cols", s.name));
    }
    add_series(s, o, several, panel);
  }
  if (o.labels.size() > panel.series.size()) {
    throw UsageError(
        fmt::format("--label: {} labels for {} lines", o.labels.size(), panel.series.size()));
  }
  for (std::size_t i = 0; i < o.labels.size(); ++i) panel.series[i].label = o.labels[i];
  if (panel.xlabel.empty()) {
    // The x axis is an axis of each tensor: named as a heatmap names it ("axis 1",
    // "position (axis 0)") when every input agrees, else plain "index".
    for (std::size_t i = 0; i < sel.size(); ++i) {
      const Selected& s = sel[i];
      const std::string name = s.idx.size() == 2 && o.x_col >= 0
                                   ? fmt::format("column {}", o.x_col)
                                   : axis_name(s, s.idx.size() == 2 && !o.rows.empty() ? 1 : 0);
      if (i == 0) panel.xlabel = name;
      if (name != panel.xlabel) panel.xlabel = "index";
    }
  }
  panel.ylabel = o.ylabel.empty() ? "value" : o.ylabel;
  std::vector<std::string> names;
  for (const auto& s : sel) names.push_back(s.name);
  panel.title = !o.title.empty() ? o.title : fmt::format("{}{}", fmt::join(names, ", "), where);
  if (!several) panel.subtitle = describe(sel[0].attrs);
  panel.log_y = o.log;
  if (o.app->count("--vmin") > 0) panel.ymin = o.vmin;
  if (o.app->count("--vmax") > 0) panel.ymax = o.vmax;
  return panel;
}

void run_plot(const PlotOptions& o) {
  check_flags(o);
  std::vector<Selected> sel;
  for (const auto& in : o.inputs) sel.push_back(read_selected(in, o.slice));
  // A heatmap for one 2-D selection unless lines are asked for (or it is a table).
  const bool lines = o.lines || !o.rows.empty() || !o.cols.empty() || o.x_col >= 0 ||
                     sel.size() > 1 || sel[0].idx.size() != 2 ||
                     (!o.heatmap && !sel[0].columns.empty());
  if (lines && o.heatmap) throw UsageError("--heatmap: needs a 2-D selection");
  const std::string where = o.slice.empty() ? "" : fmt::format("[{}]", o.slice);
  Figure fig;
  if (lines) {
    fig.panels.push_back(line_panel(sel, o, where));
  } else {
    HeatmapPanel h = heatmap(sel[0], o);
    h.title = o.title.empty() ? sel[0].name + where : o.title;
    h.subtitle = describe(sel[0].attrs);
    fig.panels.push_back(std::move(h));
  }
  FigureTarget target(o.output, o.fig, std::move(fig));
  target.commit();
}

}  // namespace

void register_plot(CLI::App& app) {
  auto opt = std::make_shared<PlotOptions>();
  auto* sub = app.add_subcommand(
      "plot",
      "draw a heatmap of a 2-D selection, or lines of 1-D data and of chosen rows or columns "
      "(several tensors on one chart), to PNG, SVG or PDF (-o) or in the terminal.");
  opt->app = sub;
  sub->add_option("input", opt->inputs, "tensor reference(s) (x.npy, x.h5:/d, x.csv, x.json, -)")
      ->required();
  sub->add_option("-o,--output", opt->output,
                  "image file: .png, .svg or .pdf (or --format); without it (or with - and no "
                  "--format), draw in the terminal");
  sub->add_option("--slice", opt->slice,
                  "numpy slicing as inspect's (index lists too) applied to every input (e.g. "
                  "\"0,3\" for batch 0, head 3); "
                  "axes of extent 1 are dropped, at most two may remain");
  sub->add_option("--rows", opt->rows,
                  "lines of these rows of a 2-D selection (tensor indices, "
                  "e.g. 0,8,16)");
  sub->add_option("--cols", opt->cols, "lines of these columns of a 2-D selection");
  sub->add_option("--x-col", opt->x_col, "with --cols: take x from this column (e.g. 0)");
  sub->add_flag("--lines", opt->lines, "draw lines even where a heatmap is the default");
  sub->add_flag("--heatmap", opt->heatmap, "draw a heatmap (one 2-D selection)");
  sub->add_option("--cmap", opt->cmap,
                  "heatmap colours: auto (diverging for signed data, else sequential), "
                  "diverging, sequential")
      ->check(CLI::IsMember({"auto", "diverging", "sequential"}));
  sub->add_flag("--log", opt->log, "logarithmic colour scale (heatmap) or y axis (lines)");
  sub->add_option("--vmin", opt->vmin, "lower end of the colour scale or y axis");
  sub->add_option("--vmax", opt->vmax, "upper end of the colour scale or y axis");
  sub->add_option("--title", opt->title, "title (default: the reference and slice)");
  sub->add_option("--xlabel", opt->xlabel, "x axis label");
  sub->add_option("--ylabel", opt->ylabel, "y axis label");
  sub->add_option("--label", opt->labels, "legend text of the lines, in order (repeatable)");
  add_figure_options(sub, opt->fig, true);
  sub->callback([opt] { run_plot(*opt); });
}

}  // namespace posenc::cli
