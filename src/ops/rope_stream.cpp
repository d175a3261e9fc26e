// RoPE from references to references in bounded memory (ops/rope_stream.hpp): slabs
// along the first axis whose extent is not 1, read, rotated and written by the three
// overlapped stages of ops/slab_pipeline.hpp.

#include "posenc/ops/rope_stream.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ops/slab_pipeline.hpp"
#include "posenc/error.hpp"

namespace posenc {

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
}

namespace {

void rope_stream_impl(const RopeStreamRequest& o) {
  if (o.inputs.empty()) throw UsageError("inputs: give at least one input tensor");
  if (o.outputs.size() != o.inputs.size()) {
    throw UsageError(fmt::format("outputs: {} input(s) need {} output(s), got {}",
                                 o.inputs.size(), o.inputs.size(), o.outputs.size()));
  }
  const std::size_t budget = o.max_memory == 0 ? detail::default_max_memory() : o.max_memory;
  const RopeApplyOptions& apply = o.apply;

  const std::vector<TensorRef>& in_refs = o.inputs;
  const std::vector<TensorRef>& out_refs = o.outputs;
  int stdin_count = 0;
  for (const auto& r : in_refs) {
    if (r.is_stdio() && ++stdin_count > 1) {
      throw UsageError("inputs: only one input can come from standard input");
    }
  }
  // An HDF5 output may name the input's file (rope f.h5:/q -o f.h5:/q_rot): the
  // datasets are added to a copy that replaces the file only on commit, so the input
  // is read from the file as it was.
  OutputSet outputs(out_refs, o.write);

  const Positions& pos = o.positions;
  std::vector<std::unique_ptr<TensorSource>> sources;
  for (const auto& r : in_refs) sources.push_back(open_source(r));

  for (std::size_t k = 0; k < sources.size(); ++k) {
    TensorSource& src = *sources[k];
    const TensorInfo& info = src.info();
    const std::string& what = in_refs[k].text;
    const Axes axes = resolve_axes(o.axes, info.shape.size(), what);
    const RopeFreqs freqs = rope_freqs_for(info.shape, axes, o.params, pos, apply, what);
    const DType out_dtype = o.dtype ? *o.dtype : rope_default_out_dtype(info.dtype);

    // Leading axes of extent 1 (b in [1, s, h, d]) carry no slabs: stream along the
    // first axis that does.
    const std::size_t axis = slab_axis(info.shape);
    RopeApplier applier(info.shape, info.dtype, axes, freqs, pos, apply, out_dtype, what, axis);

    detail::SlabOp op;
    op.in_row_bytes = applier.in_row_bytes();
    op.out_row_bytes = applier.out_row_bytes();
    op.min_rows = applier.min_rows();
    op.total_rows = applier.rows_total();
    std::tie(op.first_row, op.total_rows) = part_range(o.part, op.total_rows);
    op.table_bytes = [&applier](std::size_t rows) { return applier.table_bytes(rows); };
    op.rows = [&applier](const std::byte* in, std::byte* out, std::size_t first,
                         std::size_t n) { applier.rows(in, out, first, n); };
    op.parts = applier.parts();
    op.part = [&applier](const std::byte* in, std::byte* out, std::size_t row, std::size_t first,
                         std::size_t n) { applier.part(in, out, row, first, n); };
    op.out_item = dtype_size(out_dtype);
    const detail::SlabPlan plan = detail::plan_slabs(op, budget, what, axis, axes.letters[axis]);
    const std::size_t total_rows = op.total_rows - op.first_row;

    TensorInfo out_info;
    out_info.dtype = out_dtype;
    out_info.shape = part_shape(o.part, info.shape, axis);
    out_info.attrs = freqs.attrs;
    out_info.attrs.push_back({"rope_axes", axes.letters});
    if (!freqs.framework) {  // --arith: the framework's arithmetic, no precision of posenc's
      out_info.attrs.push_back(
          {"rope_precision", apply.precision == Precision::f64 ? "f64" : "f32"});
    }
    out_info.attrs.push_back({"rope_inverse", static_cast<long long>(apply.inverse)});
    out_info.attrs.push_back({"rope_start", static_cast<long long>(pos.start)});
    if (apply.grid_h > 0) {
      out_info.attrs.push_back(
          {"rope2d_grid", std::vector<double>{static_cast<double>(apply.grid_h),
                                              static_cast<double>(apply.grid_w)}});
      out_info.attrs.push_back({"rope2d_order", std::string(apply.grid_yx ? "yx" : "xy")});
    }
    if (!apply.mrope_section.empty()) {
      out_info.attrs.push_back(
          {"mrope_section",
           std::vector<double>(apply.mrope_section.begin(), apply.mrope_section.end())});
    }
    if (apply.layout.custom()) {
      out_info.attrs.push_back({"rope_layout", rope_layout_preset_name(apply.layout.preset)});
      if (apply.layout.scale != 1.0) {
        out_info.attrs.push_back({"rope_layout_scale", apply.layout.scale});
      }
      if (apply.layout.tiled || apply.layout.preset == RopeLayoutPreset::chunks) {
        out_info.attrs.push_back({"rope_pairing", std::string("tiled")});
      }
      if (apply.layout.preset == RopeLayoutPreset::xdrope) {
        out_info.attrs.push_back({"rope_pairing", std::string("split")});
      }
    }
    if (!pos.grid.extent.empty()) {
      out_info.attrs.push_back(
          {"rope_grid", std::vector<double>(pos.grid.extent.begin(), pos.grid.extent.end())});
      out_info.attrs.push_back(
          {"rope_grid_coords", std::string(pos.grid.centres ? "centres" : "indices")});
      if (pos.grid.prefix > 0) {
        out_info.attrs.push_back({"rope_grid_prefix", static_cast<long long>(pos.grid.prefix)});
      }
      if (pos.grid.merge > 1) {
        out_info.attrs.push_back({"rope_grid_merge", static_cast<long long>(pos.grid.merge)});
      }
    }
    if (!o.part.whole()) {
      const Attrs pa = part_attrs(o.part, info.shape, axis, {in_refs[k]});
      out_info.attrs.insert(out_info.attrs.end(), pa.begin(), pa.end());
    }
    TensorSink& sink = outputs.open(k, out_info);
    if (o.note) {
      o.note(fmt::format("{} -> {}: shape {}, axes {}, {} -> {}, {} along axis {} ({}), kernel {}",
                         what, out_refs[k].text, shape_str(info.shape), axes.letters,
                         dtype_name(info.dtype), dtype_name(out_dtype),
                         detail::slab_shape(src, sink, op, plan).describe(total_rows), axis,
                         axes.letters[axis], rope_kernel_variant()),
             out_info.attrs);
    }

    const std::size_t total_bytes = total_rows * applier.in_row_bytes();
    detail::stream_slabs(
        src, sink, axis, op, plan,
        in_refs[k].format == Format::hdf5 && out_refs[k].format == Format::hdf5, o.threads,
        [&](std::size_t rows_done) {
          if (o.progress) o.progress(what, rows_done * applier.in_row_bytes(), total_bytes);
        });
  }
  outputs.commit();
}

}  // namespace

void rope_stream(const RopeStreamRequest& r) {
  if (!r.params) throw UsageError("params: no RoPE variant given");
  rope_stream_impl(r);
}

}  // namespace posenc
