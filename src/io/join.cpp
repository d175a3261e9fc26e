// Assembling the parts of a --part job (see join.hpp).
#include "posenc/io/join.hpp"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <variant>

#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/part.hpp"

namespace posenc {

namespace {

constexpr std::size_t kCopyBytes = std::size_t{16} << 20;

struct PartIn {
  const TensorRef* ref = nullptr;
  TensorInfo info;  // read once; the source is reopened to copy, one part at a time
  // From the part attributes, when present.
  bool recorded = false;
  Part part;
  std::size_t axis = 0;
  Shape offset, total;
};

const AttrValue* find_attr(const Attrs& attrs, const char* name) {
  for (const auto& a : attrs) {
    if (a.name == name) return &a.value;
  }
  return nullptr;
}

std::size_t attr_size(const PartIn& p, const char* name) {
  const AttrValue* v = find_attr(p.info.attrs, name);
  double d = -1;
  if (v == nullptr) {
    throw InputError(
        fmt::format("{}: not a part of a --part run (no attribute '{}')", p.ref->text, name));
  }
  if (const auto* i = std::get_if<long long>(v)) d = static_cast<double>(*i);
  if (const auto* f = std::get_if<double>(v)) d = *f;
  if (!(d >= 0 && d < 9.0e15 && d == std::floor(d))) {
    throw InputError(fmt::format("{}: attribute '{}' is not a count", p.ref->text, name));
  }
  return static_cast<std::size_t>(d);
}

Shape attr_shape(const PartIn& p, const char* name) {
  const AttrValue* v = find_attr(p.info.attrs, name);
  const auto* vec = v == nullptr ? nullptr : std::get_if<std::vector<double>>(v);
  if (vec == nullptr) {
    throw InputError(
        fmt::format("{}: not a part of a --part run (no attribute '{}')", p.ref->text, name));
  }
  Shape s;
  for (double d : *vec) {
    if (!(d >= 0 && d < 9.0e15 && d == std::floor(d))) {
      throw InputError(fmt::format("{}: attribute '{}' is not a shape", p.ref->text, name));
    }
    s.push_back(static_cast<std::size_t>(d));
  }
  return s;
}

void read_record(PartIn& p) {
  p.recorded = true;
  p.part.index = attr_size(p, kPartIndexAttr);
  p.part.count = attr_size(p, kPartCountAttr);
  p.axis = attr_size(p, kPartAxisAttr);
  p.offset = attr_shape(p, kPartOffsetAttr);
  p.total = attr_shape(p, kPartTotalShapeAttr);
  const Shape& shape = p.info.shape;
  if (p.part.count == 0 || p.part.index >= p.part.count || p.total.size() != shape.size() ||
      p.offset.size() != shape.size() || p.axis >= shape.size()) {
    throw InputError(fmt::format("{}: inconsistent part attributes (part {} of {}, axis {})",
                                 p.ref->text, p.part.index, p.part.count, p.axis));
  }
  const Shape want = part_shape(p.part, p.total, p.axis);
  Shape want_offset(p.total.size(), 0);
  want_offset[p.axis] = part_range(p.part, p.total[p.axis]).first;
  if (shape != want || p.offset != want_offset) {
    throw InputError(
        fmt::format("{}: part {} of {} of a {} whole should have shape {} at offset "
                    "{}, has shape {} at offset {}",
                    p.ref->text, p.part.index, p.part.count, shape_str(p.total), shape_str(want),
                    shape_str(want_offset), shape_str(shape), shape_str(p.offset)));
  }
}

// Orders recorded parts by index and checks they make one whole.
void check_recorded(std::vector<PartIn>& parts) {
  const PartIn& first = parts.front();
  for (const auto& p : parts) {
    if (p.part.count != first.part.count) {
      throw InputError(fmt::format("{} is a part of {}, but {} is a part of {}", p.ref->text,
                                   p.part.count, first.ref->text, first.part.count));
    }
    if (p.total != first.total || p.axis != first.axis) {
      throw InputError(
          fmt::format("{} is a part of a {} whole cut along axis {}, but {} of a {} "
                      "whole cut along axis {}",
                      p.ref->text, shape_str(p.total), p.axis, first.ref->text,
                      shape_str(first.total), first.axis));
    }
  }
  std::sort(parts.begin(), parts.end(),
            [](const PartIn& a, const PartIn& b) { return a.part.index < b.part.index; });
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].part.index == parts[i - 1].part.index) {
      throw InputError(fmt::format("{} and {} are both part {} of {}", parts[i - 1].ref->text,
                                   parts[i].ref->text, parts[i].part.index, first.part.count));
    }
  }
  std::vector<std::size_t> missing;
  for (std::size_t i = 0, k = 0; i < first.part.count; ++i) {
    if (k < parts.size() && parts[k].part.index == i) {
      ++k;
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(missing.size(), 8); ++i) {
      list += (i ? ", " : "") + std::to_string(missing[i]);
    }
    if (missing.size() > 8) list += ", ...";
    throw InputError(
        fmt::format("parts: {} of {} missing (part {})", missing.size(), first.part.count, list));
  }
}

// Parts in the order given, concatenated along `axis`: the whole's shape.
Shape concatenated_shape(const std::vector<PartIn>& parts, std::size_t axis) {
  const TensorInfo& a = parts.front().info;
  if (a.shape.empty() || axis >= a.shape.size()) {
    throw UsageError(fmt::format("axis: {} is not an axis of {} (shape {})", axis,
                                 parts.front().ref->text, shape_str(a.shape)));
  }
  Shape total = a.shape, others = a.shape;
  total[axis] = others[axis] = 0;
  for (const auto& p : parts) {
    Shape s = p.info.shape;
    if (s.size() != total.size()) {
      throw InputError(fmt::format("{} has shape {}, but {} has shape {}", p.ref->text,
                                   shape_str(s), parts.front().ref->text, shape_str(a.shape)));
    }
    const std::size_t n = s[axis];
    s[axis] = 0;
    if (s != others) {
      throw InputError(fmt::format("{} has shape {}, which differs from {}'s {} outside axis {}",
                                   p.ref->text, shape_str(p.info.shape), parts.front().ref->text,
                                   shape_str(a.shape), axis));
    }
    total[axis] += n;
  }
  for (std::size_t k = 0; k < axis; ++k) {
    if (total[k] != 1) {
      throw UsageError(
          fmt::format("axis: parts are joined along an axis whose leading axes have "
                      "extent 1; axis {} of shape {} is not one",
                      axis, shape_str(total)));
    }
  }
  return total;
}

// How the virtual dataset names a part file: its name alone when it lies in the
// output's folder (HDF5 looks there first), else its absolute path.
std::string source_name(const std::string& part, const std::string& output) {
  auto real = [](const std::string& p) {
    char buf[PATH_MAX];
    return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
  };
  auto dir = [](const std::string& p) {
    const auto slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
  };
  const std::string rp = real(part);
  const std::string out_dir = real(dir(output));
  if (dir(rp) == out_dir) return rp.substr(rp.rfind('/') + 1);
  return rp;
}

}  // namespace

JoinResult join_parts(const JoinRequest& r) {
  if (r.parts.empty()) throw UsageError("parts: give at least one part");
  std::vector<PartIn> parts(r.parts.size());
  std::size_t recorded = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    PartIn& p = parts[i];
    p.ref = &r.parts[i];
    if (p.ref->path == r.output.path && !p.ref->is_stdio()) {
      throw UsageError(
          fmt::format("-o: {} is also a part (write the whole to another file)", r.output.text));
    }
    p.info = open_source(*p.ref, {/*attrs=*/true})->info();
    if (find_attr(p.info.attrs, kPartCountAttr) != nullptr) {
      read_record(p);
      ++recorded;
    }
  }
  if (recorded != 0 && recorded != parts.size()) {
    const auto plain =
        std::find_if(parts.begin(), parts.end(), [](const PartIn& p) { return !p.recorded; });
    throw InputError(
        fmt::format("{}: not a part of a --part run (no part attributes), but other "
                    "parts are",
                    plain->ref->text));
  }
  const DType dtype = parts.front().info.dtype;
  for (const auto& p : parts) {
    if (p.info.dtype != dtype) {
      throw InputError(fmt::format("{} is {}, but {} is {}", p.ref->text, dtype_name(p.info.dtype),
                                   parts.front().ref->text, dtype_name(dtype)));
    }
  }
  JoinResult res;
  res.dtype = dtype;
  res.parts = parts.size();
  if (recorded != 0) {
    check_recorded(parts);
    res.shape = parts.front().total;
    res.axis = parts.front().axis;
  } else {
    res.axis = r.axis;
    res.shape = concatenated_shape(parts, r.axis);
  }

  TensorInfo info;
  info.dtype = dtype;
  info.shape = res.shape;
  for (const auto& a : parts.front().info.attrs) {
    if (a.name.rfind("part_", 0) != 0) info.attrs.push_back(a);
  }

  if (r.virtual_dataset) {
    if (r.output.format != Format::hdf5 || r.output.is_stdio()) {
      throw UsageError("--virtual: the output must be an HDF5 dataset (out.h5:/name)");
    }
    std::vector<Hdf5FileWriter::VirtualSource> sources;
    for (const auto& p : parts) {
      if (p.ref->format != Format::hdf5) {
        throw UsageError(
            fmt::format("--virtual: {} is not HDF5 (a virtual dataset maps HDF5 "
                        "datasets; leave out --virtual to copy)",
                        p.ref->text));
      }
      Shape offset(res.shape.size(), 0);
      std::size_t at = 0;
      if (p.recorded) {
        offset = p.offset;
      } else {
        for (const auto& q : parts) {
          if (&q == &p) break;
          at += q.info.shape[res.axis];
        }
        offset[res.axis] = at;
      }
      std::string dataset = p.ref->dataset;
      if (dataset.empty()) {
        const auto names = list_hdf5_datasets(p.ref->path);
        if (names.size() == 1) dataset = names.front();
      }
      sources.push_back({source_name(p.ref->path, r.output.path), dataset, p.info.shape, offset});
    }
    Hdf5FileWriter w(r.output.path, r.write);
    w.virtual_dataset(r.output.dataset, info, sources);
    w.commit();
    return res;
  }

  auto sink = create_sink(r.output, info, r.write);
  const std::size_t axis = res.axis;
  Shape entry_shape(res.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, res.shape.end());
  const std::size_t entry_bytes =
      checked_numel(entry_shape, dtype_size(dtype), r.output.text) * dtype_size(dtype);
  const std::size_t slab = entry_bytes == 0 ? std::numeric_limits<std::size_t>::max()
                                            : std::max<std::size_t>(1, kCopyBytes / entry_bytes);
  std::vector<std::byte> buf;
  for (auto& p : parts) {
    const std::size_t n = p.info.shape[axis];
    auto src = open_source(*p.ref);
    for (std::size_t first = 0; first < n; first += std::min(slab, n - first)) {
      const std::size_t count = std::min(slab, n - first);
      buf.resize(count * entry_bytes);
      src->read_slab(axis, first, count, buf.data());
      sink->write_slab(axis, buf.data(), count);
    }
  }
  sink->commit();
  return res;
}

}  // namespace posenc
