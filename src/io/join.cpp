// Assembling the parts of a --part job (see join.hpp).
#include "posenc/io/join.hpp"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <variant>

#include "io/hdf5_reader.hpp"
#include "io/join_records.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/part.hpp"

namespace posenc {

namespace {

constexpr std::size_t kCopyBytes = std::size_t{16} << 20;

struct PartIn {
  const TensorRef* ref = nullptr;
  std::size_t given = 0;  // its place in the request
  TensorInfo info;  // read once; the source is reopened to copy, one part at a time
  // From the part attributes, when present.
  bool recorded = false;
  Part part;
  std::size_t axis = 0;
  Shape offset, total;
  // Which file and dataset this is: the same file named twice (another spelling, a
  // link) is caught, and a part in the output file is named "." by a virtual dataset.
  bool stat_ok = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string dataset;  // HDF5: normalized ("/g/d"), resolved when the reference names none
};

bool same_file(const PartIn& p, const struct stat& st) {
  return p.stat_ok && p.dev == st.st_dev && p.ino == st.st_ino;
}

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

// Attributes that differ from part to part of one run: which share it is, and where.
bool per_part(const std::string& name) { return name == kPartIndexAttr || name == kPartOffsetAttr; }

bool same_value(const AttrValue& a, const AttrValue& b) {
  auto num = [](const AttrValue& v, double& d) {
    if (const auto* i = std::get_if<long long>(&v)) {
      d = static_cast<double>(*i);
      return true;
    }
    if (const auto* f = std::get_if<double>(&v)) {
      d = *f;
      return true;
    }
    return false;
  };
  auto eq = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  double x = 0, y = 0;
  if (num(a, x) && num(b, y)) return eq(x, y);
  if (a.index() != b.index()) return false;
  if (const auto* va = std::get_if<std::vector<double>>(&a)) {
    const auto& vb = std::get<std::vector<double>>(b);
    return va->size() == vb.size() && std::equal(va->begin(), va->end(), vb.begin(), eq);
  }
  return std::get<std::string>(a) == std::get<std::string>(b);
}

// Attribute names and values are untrusted: a long one is cut for messages (which the
// CLI keeps on one line).
std::string clip(const std::string& s) {
  constexpr std::size_t kShown = 200;
  return s.size() <= kShown ? s : fmt::format("{}... ({} bytes)", s.substr(0, kShown), s.size());
}

std::string value_text(const AttrValue* v) {
  if (v == nullptr) return "absent";
  if (const auto* s = std::get_if<std::string>(v)) return fmt::format("'{}'", clip(*s));
  if (const auto* i = std::get_if<long long>(v)) return std::to_string(*i);
  if (const auto* f = std::get_if<double>(v)) return fmt::format("{}", *f);
  const auto& vec = std::get<std::vector<double>>(*v);
  std::string out = "[";
  for (std::size_t i = 0; i < vec.size() && i < 8; ++i) {
    out += fmt::format("{}{}", i ? ", " : "", vec[i]);
  }
  return out + (vec.size() > 8 ? ", ...]" : "]");
}

// The first attribute, other than the per-part ones, in which `a` and `b` differ: one
// both carry with other values, else one only one carries; empty when they agree.
// part_inputs counts only when both carry it: parts written before it was recorded
// still join with those written after.
std::string first_difference(const Attrs& a, const Attrs& b) {
  for (const auto& at : a) {
    const AttrValue* vb = find_attr(b, at.name.c_str());
    if (!per_part(at.name) && vb != nullptr && !same_value(at.value, *vb)) return at.name;
  }
  for (const auto& [one, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    for (const auto& at : *one) {
      if (per_part(at.name) || at.name == kPartInputsAttr) continue;
      if (find_attr(*other, at.name.c_str()) == nullptr) return at.name;
    }
  }
  return {};
}

// Parts of one run record the same parameters: every attribute but the per-part ones
// must agree (another base, --emit, --start, style or kind is another run, whatever
// the shapes say).
void check_same_run(const std::vector<PartIn>& parts) {
  const PartIn& first = parts.front();
  for (const auto& p : parts) {
    const std::string name = first_difference(first.info.attrs, p.info.attrs);
    if (name.empty()) continue;
    throw InputError(fmt::format(
        "{} and {} are parts of different runs: attribute '{}' is {} in {} but {} in {}",
        first.ref->text, p.ref->text, clip(name),
        value_text(find_attr(first.info.attrs, name.c_str())), first.ref->text,
        value_text(find_attr(p.info.attrs, name.c_str())), p.ref->text));
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
  check_same_run(parts);
  std::sort(parts.begin(), parts.end(),
            [](const PartIn& a, const PartIn& b) { return a.part.index < b.part.index; });
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].part.index == parts[i - 1].part.index) {
      throw InputError(fmt::format("{} and {} are both part {} of {}", parts[i - 1].ref->text,
                                   parts[i].ref->text, parts[i].part.index, first.part.count));
    }
  }
  // Indices are now distinct and below the count, so count - parts are missing; only
  // the first few are named (a crafted count may be near 2^53: nothing here is per part
  // index).
  const std::size_t missing = first.part.count - parts.size();
  if (missing != 0) {
    constexpr std::size_t kNamed = 8;
    std::string list;
    std::size_t named = 0;
    for (std::size_t i = 0, k = 0; named < kNamed && named < missing; ++i) {
      if (k < parts.size() && parts[k].part.index == i) {
        ++k;
      } else {
        list += (named++ ? ", " : "") + std::to_string(i);
      }
    }
    if (missing > kNamed) list += ", ...";
    throw InputError(
        fmt::format("parts: {} of {} missing (part {})", missing, first.part.count, list));
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
// output's folder (HDF5 looks there first), else its absolute path. The output's folder
// is that of the file it names (a symbolic link is written through).
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
  char buf[PATH_MAX];
  const std::string out_dir =
      ::realpath(output.c_str(), buf) ? dir(std::string(buf)) : real(dir(output));
  if (dir(rp) == out_dir) return rp.substr(rp.rfind('/') + 1);
  return rp;
}

// Reads a part's description, its part record if any, and where it lives.
void open_part(PartIn& p) {
  p.info = open_source(*p.ref, {/*attrs=*/true})->info();
  if (find_attr(p.info.attrs, kPartCountAttr) != nullptr) read_record(p);
  struct stat st {};
  if (!p.ref->is_stdio() && ::stat(p.ref->path.c_str(), &st) == 0) {
    p.stat_ok = true;
    p.dev = st.st_dev;
    p.ino = st.st_ino;
  }
  if (p.ref->format == Format::hdf5) {
    p.dataset = hdf5_detail::normalize_name(p.ref->dataset);
    if (p.dataset.empty()) {
      const auto names = list_hdf5_datasets(p.ref->path);
      if (names.size() == 1) p.dataset = hdf5_detail::normalize_name(names.front());
    }
  }
}

// The same file (and dataset) given twice is refused whatever its index says: an NPY
// part twice would otherwise be joined twice.
void check_distinct(const std::vector<PartIn>& parts) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      const PartIn &a = parts[j], &b = parts[i];
      const bool both_stdin = a.ref->is_stdio() && b.ref->is_stdio();
      const bool same_dataset =
          a.stat_ok && b.stat_ok && a.dev == b.dev && a.ino == b.ino && a.dataset == b.dataset;
      if (both_stdin || same_dataset) {
        throw InputError(fmt::format("{} and {} are the same part (the same {}) given twice",
                                     a.ref->text, b.ref->text,
                                     a.dataset.empty() ? "file" : "dataset of the same file"));
      }
    }
  }
}

// Whether the output goes into one of the part files. Allowed for an HDF5 output that
// names another dataset (the writer adds it to a copy of the file, renamed over it once
// every part has been read); replacing a part, or the file holding it, is refused.
bool output_in_part(const JoinRequest& r, const std::vector<PartIn>& parts) {
  struct stat st {};
  if (r.output.is_stdio() || ::stat(r.output.path.c_str(), &st) != 0) return false;
  bool any = false;
  for (const auto& p : parts) {
    if (!same_file(p, st)) continue;
    if (r.output.format != Format::hdf5 || p.ref->format != Format::hdf5) {
      throw UsageError(
          fmt::format("-o: {} is also a part (write the whole to another file)", r.output.text));
    }
    if (hdf5_detail::normalize_name(r.output.dataset) == p.dataset) {
      throw UsageError(
          fmt::format("-o: {} is the part {} itself (name another dataset or file for the whole)",
                      r.output.text, p.ref->text));
    }
    any = true;
  }
  return any;
}

// What a share-less join warns about: nothing records the parts' order or number.
std::string unchecked_warning(const std::vector<PartIn>& parts, std::size_t axis) {
  if (parts.size() == 1) {
    return fmt::format(
        "{}: the only part, with no part record (NPY, or HDF5 written without --part): the "
        "output is a copy of it; missing parts cannot be detected",
        parts.front().ref->text);
  }
  return fmt::format(
      "{} parts with no part record (NPY, or HDF5 written without --part) joined along axis {} "
      "in the order given; their order and completeness cannot be checked",
      parts.size(), axis);
}

// The whole is labelled with what its parts agree on: for recorded parts every
// attribute but the part record (check_same_run has compared them); for parts without
// a record, only the attributes every part carries with the same value.
Attrs whole_attrs(const std::vector<PartIn>& parts) {
  Attrs attrs;
  for (const auto& a : parts.front().info.attrs) {
    if (a.name.rfind("part_", 0) == 0) continue;
    const bool shared = std::all_of(parts.begin(), parts.end(), [&](const PartIn& p) {
      const AttrValue* v = find_attr(p.info.attrs, a.name.c_str());
      return v != nullptr && same_value(*v, a.value);
    });
    if (shared) attrs.push_back(a);
  }
  return attrs;
}

// The whole as an HDF5 virtual dataset over the part datasets (`into_part`: the output
// file is one of the part files).
void write_virtual(const JoinRequest& r, const std::vector<PartIn>& parts, const TensorInfo& info,
                   std::size_t axis, bool into_part) {
  if (r.output.format != Format::hdf5 || r.output.is_stdio()) {
    throw UsageError("--virtual: the output must be an HDF5 dataset (out.h5:/name)");
  }
  struct stat out_st {};
  const bool out_exists = into_part && ::stat(r.output.path.c_str(), &out_st) == 0;
  std::vector<Hdf5FileWriter::VirtualSource> sources;
  std::size_t at = 0;  // parts without a record follow each other along `axis`
  for (const auto& p : parts) {
    if (p.ref->format != Format::hdf5) {
      throw UsageError(
          fmt::format("--virtual: {} is not HDF5 (a virtual dataset maps HDF5 "
                      "datasets; leave out --virtual to copy)",
                      p.ref->text));
    }
    Shape offset(info.shape.size(), 0);
    if (p.recorded) {
      offset = p.offset;
    } else {
      offset[axis] = at;
      at += p.info.shape[axis];
    }
    // A part in the output file itself is "." (HDF5's name for the virtual dataset's
    // own file), which stays right when the file is moved or renamed.
    const std::string file = out_exists && same_file(p, out_st)
                                 ? std::string(".")
                                 : source_name(p.ref->path, r.output.path);
    sources.push_back({file, p.dataset, p.info.shape, offset});
  }
  Hdf5FileWriter w(r.output.path, r.write);
  w.virtual_dataset(r.output.dataset, info, sources);
  w.commit();
}

// The whole as a copy: each part copied file to file where both allow it (copy_slab),
// else read in slabs along `axis`, in order.
void write_copy(const JoinRequest& r, const std::vector<PartIn>& parts, const TensorInfo& info,
                std::size_t axis) {
  auto sink = create_sink(r.output, info, r.write);
  Shape entry_shape(info.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, info.shape.end());
  const std::size_t entry_bytes =
      checked_numel(entry_shape, dtype_size(info.dtype), r.output.text) * dtype_size(info.dtype);
  const std::size_t slab = entry_bytes == 0 ? std::numeric_limits<std::size_t>::max()
                                            : std::max<std::size_t>(1, kCopyBytes / entry_bytes);
  std::vector<std::byte> buf;
  for (const auto& p : parts) {
    const std::size_t n = p.info.shape[axis];
    auto src = open_source(*p.ref);
    if (sink->copy_slab(axis, *src, 0, n)) continue;
    for (std::size_t first = 0; first < n; first += std::min(slab, n - first)) {
      const std::size_t count = std::min(slab, n - first);
      buf.resize(count * entry_bytes);
      src->read_slab(axis, first, count, buf.data());
      sink->write_slab(axis, buf.data(), count);
    }
  }
  sink->commit();
}

}  // namespace

namespace join_detail {

RecordedWhole check_recorded_parts(const std::vector<RecordedPart>& given) {
  if (given.empty()) throw InputError("parts: none given");
  std::vector<TensorRef> refs(given.size());
  std::vector<PartIn> parts(given.size());
  for (std::size_t i = 0; i < given.size(); ++i) {
    refs[i].text = given[i].name;
    parts[i].ref = &refs[i];
    parts[i].given = i;
    parts[i].info = given[i].info;
    read_record(parts[i]);
  }
  check_recorded(parts);
  RecordedWhole w;
  w.shape = parts.front().total;
  w.axis = parts.front().axis;
  for (const auto& p : parts) w.order.push_back(p.given);
  return w;
}

}  // namespace join_detail

JoinResult join_parts(const JoinRequest& r) {
  if (r.parts.empty()) throw UsageError("parts: give at least one part");
  std::vector<PartIn> parts(r.parts.size());
  std::size_t recorded = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    parts[i].ref = &r.parts[i];
    if (parts[i].ref->path == r.output.path && !parts[i].ref->is_stdio() &&
        r.output.format != Format::hdf5) {
      throw UsageError(
          fmt::format("-o: {} is also a part (write the whole to another file)", r.output.text));
    }
    open_part(parts[i]);
    if (parts[i].recorded) ++recorded;
  }
  check_distinct(parts);
  const bool into_part = output_in_part(r, parts);
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
    res.warnings.push_back(unchecked_warning(parts, r.axis));
  }

  TensorInfo info;
  info.dtype = dtype;
  info.shape = res.shape;
  info.attrs = whole_attrs(parts);
  if (r.virtual_dataset) {
    write_virtual(r, parts, info, res.axis, into_part);
  } else {
    write_copy(r, parts, info, res.axis);
  }
  return res;
}

}  // namespace posenc
