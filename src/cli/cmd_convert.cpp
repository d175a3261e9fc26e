// posenc convert: copy a tensor between formats (NPY, HDF5, CSV, TSV, JSON, text) and
// dtypes (posenc::cast, numpy's astype rules). Rows are streamed in slabs, so NPY→NPY
// and NPY→HDF5 never hold the whole tensor in memory.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/part.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct ConvertOptions {
  std::string input;
  std::string dtype = "same";
  std::string slice;
  OutputOptions out;
  std::string part;
  std::string input_dtype;
};

// Bytes per slab: large enough to amortise calls, small enough to stream.
constexpr std::size_t kSlabBytes = std::size_t{16} << 20;

// --slice: the selected elements, streamed from the source in slabs; each block holds
// whole entries of the output's slab axis (read_selection), so it goes to the sink as is.
void convert_selection(TensorSource& src, const Selection& sel, const TensorInfo& out_info,
                       TensorSink& sink) {
  const Shape& shape = sel.shape;
  const std::size_t axis = slab_axis(shape);
  std::size_t entry = 1;  // elements per entry of the output's slab axis
  for (std::size_t ax = axis + 1; ax < shape.size(); ++ax) entry *= shape[ax];
  if (sel.numel == 0) {  // nothing to read; the sink still takes its (empty) entries
    const std::byte none{};
    sink.write_slab(axis, &none, shape.empty() ? 1 : shape[axis]);
    return;
  }
  const DType in = src.info().dtype;
  read_selection(src, sel, [&](const std::byte* data, std::size_t count) {
    const std::size_t entries = shape.empty() ? 1 : count / entry;
    if (out_info.dtype == in) {
      sink.write_slab(axis, data, entries);
      return;
    }
    Tensor block(in, Shape{count});
    std::memcpy(block.bytes(), data, block.nbytes());
    sink.write_slab(axis, cast(block, out_info.dtype).bytes(), entries);
  });
}

void run_convert(const ConvertOptions& o) {
  const TensorRef in_ref = with_input_dtype(parse_ref(o.input), o.input_dtype);
  const TensorRef out_ref = parse_ref(o.out.outputs.at(0), o.out.to);
  const SliceSpec spec = parse_slice_option(o.slice);  // usage errors before any read
  const Part part = o.part.empty() ? Part{} : parse_part(o.part, "--part");
  if (!o.slice.empty() && !part.whole()) {
    throw UsageError("--slice and --part cannot be combined: slice first, then convert parts");
  }
  // HDF5 attributes are carried over to HDF5 and JSON outputs, so they are read here.
  auto src = open_source(in_ref, {/*attrs=*/true});
  const TensorInfo& in = src->info();

  TensorInfo out_info = in;
  out_info.storage.clear();
  if (o.dtype != "same") out_info.dtype = parse_dtype(o.dtype, "--dtype");
  const bool convert = out_info.dtype != in.dtype;
  verbose(fmt::format("{}: {} {} ({})", in_ref.text, dtype_name(in.dtype), shape_str(in.shape),
                      in.storage));
  if (!o.slice.empty()) {
    const Selection sel = resolve_slice_option(spec, in.shape, in_ref.text);
    out_info.shape = sel.shape;
    verbose(fmt::format("--slice [{}] -> {}", o.slice, shape_str(sel.shape)));
    auto sink = create_sink(out_ref, out_info, o.out.write_options());
    convert_selection(*src, sel, out_info, *sink);
    sink->commit();
    return;
  }

  // Slabs along the first axis whose extent is not 1, so [1, s, ...] goes in pieces of s;
  // a --part share is a range of the same axis.
  const std::size_t axis = slab_axis(in.shape);
  // Entries [begin, entries) of that axis are converted (all of them without --part).
  const auto [begin, entries] = part_range(part, in.shape.empty() ? 1 : in.shape[axis]);
  if (!part.whole()) {
    if (in.shape.empty()) throw UsageError("--part: a rank-0 tensor cannot be cut into parts");
    out_info.shape = part_shape(part, in.shape, axis);
    // A part of a part would record the wrong whole: the input's own part attributes go.
    Attrs kept;
    for (auto& a : out_info.attrs) {
      if (a.name.rfind("part_", 0) != 0) kept.push_back(a);
    }
    out_info.attrs = std::move(kept);
    const Attrs pa = part_attrs(part, in.shape, axis, {in_ref});
    out_info.attrs.insert(out_info.attrs.end(), pa.begin(), pa.end());
  }
  auto sink = create_sink(out_ref, out_info, o.out.write_options());
  Shape entry_shape(in.shape.empty() ? in.shape.end() : in.shape.begin() + axis + 1,
                    in.shape.end());
  const std::size_t entry_elems = checked_numel(entry_shape, 8, in_ref.text);
  const std::size_t entry_bytes = entry_elems * dtype_size(in.dtype);
  // Entries of zero bytes (shape (n, 0, ...)) all go in one slab.
  const std::size_t slab_entries =
      entry_elems == 0 ? std::max<std::size_t>(entries, 1)
                       : std::max<std::size_t>(1, kSlabBytes / entry_bytes);
  // A stream (stdin) whose entries are too large for one slab is read whole first, in
  // pieces as the data arrive: memory follows the data, not what the header claims.
  const bool staged = entry_bytes > kSlabBytes && !src->seekable();
  Tensor whole;
  if (staged) whole = read_all_rows(*src);
  // Bytes that pass through unchanged go file to file where the formats allow it.
  if (!convert && !staged && entries > begin &&
      sink->copy_slab(axis, *src, begin, entries - begin)) {
    sink->commit();
    return;
  }

  // One slab buffer (and one for its conversion), reused: a new one per slab was faulted
  // in and cleared each time, as much system time as the reads.
  const std::size_t most = std::min(slab_entries, entries - begin);
  Buffer slab(most * entry_bytes),
      converted(convert ? most * entry_elems * dtype_size(out_info.dtype) : 0);
  for (std::size_t first = begin; first < entries || (entries == begin && first == begin);) {
    const std::size_t count = std::min(slab_entries, entries - first);
    const std::size_t nbytes = count * entry_bytes;
    if (staged) {
      if (nbytes) std::memcpy(slab.data(), whole.bytes() + first * entry_bytes, nbytes);
    } else {
      src->read_slab(axis, first, count, slab.data());
    }
    if (convert) {
      cast(slab.data(), in.dtype, converted.data(), out_info.dtype, count * entry_elems);
      sink->write_slab(axis, converted.data(), count);
    } else {
      sink->write_slab(axis, slab.data(), count);
    }
    first += count;
    if (entries == begin) break;
  }
  sink->commit();
}

}  // namespace

void register_convert(CLI::App& app) {
  auto opt = std::make_shared<ConvertOptions>();
  auto* sub = app.add_subcommand(
      "convert",
      "copy a tensor to another format or dtype (npy, h5, csv, tsv, json, text). Rows are "
      "streamed, so large NPY and HDF5 tensors need little memory.");
  sub->add_option("input", opt->input, "input tensor reference (x.npy, x.h5:/d, x.csv, x.json, -)")
      ->required();
  sub->add_option("--dtype", opt->dtype,
                  "output dtype: same (default), f64, f32, f16, bf16, float8_e4m3fn (e4m3fn), "
                  "float8_e5m2 (e5m2), i8..i64, u8..u64, bool; as numpy's astype: float to int "
                  "truncates toward zero, int to int wraps; to fp8 as torch's .to(): through "
                  "float32, e4m3fn overflows to NaN, e5m2 to Inf");
  sub->add_option("--input-dtype", opt->input_dtype, kInputDtypeHelp)->type_name("FP8");
  sub->add_option("--slice", opt->slice,
                  std::string(kSliceHelp) + "; only the selection is read and written");
  add_output_options(sub, opt->out);
  add_part_option(sub, opt->part, "the first axis of the input whose extent is not 1");
  sub->callback([opt] { run_convert(*opt); });
}

}  // namespace posenc::cli
