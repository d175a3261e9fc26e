// posenc._posenc: the C++ library behind the Python package `posenc` (python/posenc/).
// Arrays come in as C-contiguous numpy arrays with the posenc dtype name next to them
// (the package's Python layer views torch tensors, DLPack capsules and bf16 bit
// patterns as such arrays without copying); options come in as dicts keyed by the
// library's own field names, holding only what the caller gave. The library reads and
// checks them by keyword (posenc/keywords.hpp: this module's PyKeywords turns a dict's
// Python objects into the values a field asks for) and assembles the requests the
// command's subcommands build from options. Results leave as numpy arrays that own the
// library's Tensor storage (no copy). Computation runs without the GIL.

#include <omp.h>
#include <pthread.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "posenc/encodings/rope_ids.hpp"
#include "posenc/encodings/rope_ids_keywords.hpp"
#include "posenc/encodings/rope_keywords.hpp"
#include "posenc/encodings/table_keywords.hpp"
#include "posenc/field_groups.hpp"
#include "posenc/fp8.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/keywords.hpp"
#include "posenc/ops/attention_keywords.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/combine.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/compare_baseline.hpp"
#include "posenc/ops/compare_fields.hpp"
#include "posenc/threads.hpp"

namespace py = pybind11;

namespace posenc::python {

namespace {

// --- arrays ------------------------------------------------------------------------

// The numpy dtype of `t`: the one its NPY files carry (io/npy.hpp), but bf16 bit
// patterns and fp8 codes as unsigned integers (the Python layer labels them).
py::dtype numpy_dtype(DType t) {
  if (t == DType::bf16) return py::dtype("uint16");
  return py::dtype(is_fp8(t) ? std::string("uint8") : npy_descr(t, "x"));
}

Shape shape_of(const py::array& a) {
  Shape s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<std::size_t>(a.shape(i)));
  return s;
}

// The array's dtype as posenc names it, checked against its item size.
DType dtype_of(const py::array& a, const std::string& name, const std::string& what) {
  const DType t = parse_dtype(name, what);
  if (static_cast<std::size_t>(a.itemsize()) != dtype_size(t)) {
    throw UsageError(what + ": the array's items are " + std::to_string(a.itemsize()) +
                     " bytes, not those of " + std::string(dtype_name(t)));
  }
  if (!(a.flags() & py::array::c_style)) {
    throw UsageError(what + ": the array is not C-contiguous");
  }
  return t;
}

// `a` as a library Tensor: its own memory, borrowed (the caller keeps `a` alive for the
// call; the library only reads its inputs), or a copy when it is not aligned to its
// element size.
Tensor to_tensor(const py::array& a, const std::string& dtype, const std::string& what) {
  const DType t = dtype_of(a, dtype, what);
  if (reinterpret_cast<std::uintptr_t>(a.data()) % dtype_size(t) == 0) {
    return Tensor::borrow(t, shape_of(a), const_cast<void*>(a.data()));
  }
  Tensor copy(t, shape_of(a));
  if (copy.nbytes() > 0) std::memcpy(copy.bytes(), a.data(), copy.nbytes());
  return copy;
}

// A numpy array owning `t`'s storage.
py::array to_array(Tensor&& t) {
  auto* owned = new Tensor(std::move(t));
  py::capsule base(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape, strides(owned->ndim());
  for (std::size_t n : owned->shape()) shape.push_back(static_cast<py::ssize_t>(n));
  py::ssize_t step = static_cast<py::ssize_t>(dtype_size(owned->dtype()));
  for (std::size_t i = owned->ndim(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  return py::array(numpy_dtype(owned->dtype()), shape, strides, owned->bytes(), base);
}

// --- threads and fork ---------------------------------------------------------------

// The module's worker count (set_threads; 0: the caller's own OpenMP setting). OpenMP's
// count is per thread: each call applies this one on its calling thread and restores
// that thread's own afterwards, so set_threads holds in every Python thread and the
// caller's other OpenMP code (torch's) keeps its setting.
std::atomic<int> g_threads{0};

// Set in a child forked from this process: libgomp's workers do not survive fork (the
// child's first parallel region would wait for them for ever), so a forked child
// computes on its calling thread alone.
std::atomic<bool> g_forked{false};

extern "C" void posenc_forked_child() { g_forked.store(true, std::memory_order_relaxed); }

// The worker count of one call, for as long as it lives.
class CallThreads {
 public:
  CallThreads() : saved_(omp_get_max_threads()) {
    const int n = g_forked.load(std::memory_order_relaxed) ? 1 : g_threads.load();
    if (n > 0 && n != saved_) {
      omp_set_num_threads(n);
      changed_ = true;
    }
  }
  ~CallThreads() {
    if (changed_) omp_set_num_threads(saved_);
  }
  CallThreads(const CallThreads&) = delete;
  CallThreads& operator=(const CallThreads&) = delete;

 private:
  int saved_;
  bool changed_ = false;
};

// --- keywords -----------------------------------------------------------------------

// `v` as messages show it: its type and its repr, cut short and made printable.
std::string described(const py::handle& v) {
  std::string type = "object";
  std::string text;
  try {
    type = py::str(py::type::of(v).attr("__name__")).cast<std::string>();
    text = py::repr(v).cast<std::string>();
  } catch (const std::exception&) {
    PyErr_Clear();  // a repr that raises: the type alone
  }
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text.empty() ? type : type + " " + printable(text);
}

[[noreturn]] void bad_type(const std::string& key, const char* expected, const py::handle& v) {
  throw UsageError(key + ": expected " + expected + ", got " + described(v));
}

// A tensor argument, (array, dtype name), as a Tensor borrowing the array's memory (the
// dict holding it outlives the call).
Tensor tensor_of(const py::handle& v, const std::string& key) {
  const bool two = py::isinstance<py::tuple>(v) && py::len(v) == 2;
  const py::tuple pair = two ? py::reinterpret_borrow<py::tuple>(v) : py::tuple();
  if (!two || !py::isinstance<py::array>(pair[0]) || !py::isinstance<py::str>(pair[1])) {
    bad_type(key, "an array", v);
  }
  return to_tensor(py::array(pair[0]), pair[1].cast<std::string>(), key);
}

// Whether `v` is a whole number (an int, numpy's integers; not a bool).
bool is_whole(const py::handle& v) {
  return PyIndex_Check(v.ptr()) && !py::isinstance<py::bool_>(v);
}

// `v` (not None) as a T: pybind11's conversion, its failures said in the keyword's terms.
template <class T>
T value_as(const py::handle& v, const std::string& key) {
  std::optional<T> out;
  try {
    out = v.cast<T>();
  } catch (const py::cast_error&) {
  } catch (const py::error_already_set&) {
  }
  if (!out) {
    const bool whole = is_whole(v);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (whole) {
        throw UsageError(key + ": " + described(v) + " is out of range (" +
                         std::to_string(std::numeric_limits<T>::min()) + " to " +
                         std::to_string(std::numeric_limits<T>::max()) + ")");
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (whole) throw UsageError(key + ": " + described(v) + " is too large");
    }
    bad_type(key, expected_kind<T>(), v);
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (out->find('\0') != std::string::npos) throw UsageError(key + ": contains a NUL character");
  }
  return *out;
}

// The array `v` as an xtensor array of T, its values converted (the Python layer hands
// C-contiguous float64 or int64 arrays; the library checks shapes and values).
template <class T>
xt::xarray<T> xarray_of(const py::handle& v, const std::string& key) {
  using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;
  std::optional<Array> a;
  try {
    a = v.cast<Array>();
  } catch (const py::cast_error&) {
  } catch (const py::error_already_set&) {
  }
  if (!a) bad_type(key, std::is_integral_v<T> ? "an array of integers" : "an array of numbers", v);
  xt::xarray<T> out = xt::empty<T>(shape_of(*a));
  std::copy(a->data(), a->data() + a->size(), out.data());
  return out;
}

void check_module_ref(const std::string& ref);

// A dict of the package's keywords as the library's KeywordReader reads them
// (posenc/keywords.hpp): each value a Python object, None for not given, a list
// keyword's items by index.
class PyKeywords : public Keywords {
 public:
  explicit PyKeywords(const py::dict& d) : d_(d) {}
  bool gives(const Key& k) const override { return !at(k).is_none(); }
  std::string described(const Key& k) const override { return python::described(at(k)); }
  bool is_bool(const Key& k) const override { return py::isinstance<py::bool_>(at(k)); }
  bool is_text(const Key& k) const override { return py::isinstance<py::str>(at(k)); }
  bool is_integer(const Key& k) const override { return is_whole(at(k)); }
  bool is_real_array(const Key& k) const override {
    const py::object v = at(k);
    return py::isinstance<py::array>(v) && py::array(v).dtype().kind() == 'f';
  }
  std::optional<std::size_t> list_length(const Key& k) const override {
    const py::object v = at(k);
    return py::isinstance<py::list>(v) ? std::optional(py::len(v)) : std::nullopt;
  }
  std::size_t size_hint(const Key& k) const override {
    const py::object v = at(k);
    return py::isinstance<py::sequence>(v) ? py::len_hint(v) : 0;
  }
  bool boolean(const Key& k) const override { return as<bool>(k); }
  std::int64_t integer(const Key& k) const override { return as<std::int64_t>(k); }
  double number(const Key& k) const override { return as<double>(k); }
  std::string text(const Key& k) const override { return as<std::string>(k); }
  std::vector<std::string> texts(const Key& k) const override {
    return as<std::vector<std::string>>(k);
  }
  std::vector<double> numbers(const Key& k) const override { return as<std::vector<double>>(k); }
  std::vector<std::int64_t> integers(const Key& k) const override {
    return as<std::vector<std::int64_t>>(k);
  }
  std::pair<std::int64_t, std::int64_t> two_integers(const Key& k) const override {
    return as<std::pair<std::int64_t, std::int64_t>>(k);
  }
  xt::xarray<double> real_array(const Key& k) const override {
    return xarray_of<double>(at(k), k.shown());
  }
  xt::xarray<std::int64_t> integer_array(const Key& k) const override {
    return xarray_of<std::int64_t>(at(k), k.shown());
  }
  Tensor tensor(const Key& k) const override { return tensor_of(at(k), k.shown()); }
  void check_ref(const std::string& ref) const override { check_module_ref(ref); }

 private:
  py::object at(const Key& k) const {
    if (!d_.contains(k.name)) return py::none();
    py::object v = d_[k.name.c_str()];
    if (!k.item || v.is_none()) return v;
    return py::list(v)[*k.item];  // the reader has checked the list's length
  }
  template <class T>
  T as(const Key& k) const {
    return value_as<T>(at(k), k.shown());
  }
  const py::dict& d_;
};

// The attrs of posenc.write: str, int, float or a list of numbers, by name.
Attrs attrs_from(const py::dict& d) {
  Attrs out;
  for (auto [k, v] : d) {
    if (!py::isinstance<py::str>(k)) bad_type("attrs", "names as strings", k);
    const std::string name = k.cast<std::string>();
    if (name.find('\0') != std::string::npos) {
      throw UsageError("attrs: a name contains a NUL character");
    }
    const std::string key = "attrs " + printable(name);
    if (v.is_none()) bad_type(key, "a str, int, float or list of numbers", v);
    if (py::isinstance<py::bool_>(v) || PyIndex_Check(v.ptr())) {
      out.push_back({name, value_as<long long>(v, key)});
    } else if (PyNumber_Check(v.ptr()) && !py::isinstance<py::array>(v)) {  // numpy's floats too
      out.push_back({name, value_as<double>(v, key)});
    } else if (py::isinstance<py::str>(v)) {
      out.push_back({name, value_as<std::string>(v, key)});
    } else {
      out.push_back({name, value_as<std::vector<double>>(v, key)});
    }
  }
  return out;
}

py::dict attrs_to(const Attrs& attrs) {
  py::dict d;
  for (const Attr& a : attrs) {
    std::visit([&](const auto& v) { d[py::str(a.name)] = py::cast(v); }, a.value);
  }
  return d;
}

// --- rope ---------------------------------------------------------------------------

// Rotates x into out (which may be x itself: each vector is read whole before its
// rotation is stored).
void rope_into(const py::array& x, const std::string& x_dtype, py::array out,
               const std::string& out_dtype, const std::string& axes_text, const py::dict& rope_d,
               const py::dict& pos_d, const py::dict& apply_d) {
  const CallThreads threads;
  const DType in = dtype_of(x, x_dtype, "x");
  const DType to = dtype_of(out, out_dtype, "out");
  if (!out.writeable()) throw UsageError("out: the array is read-only");
  const Shape shape = shape_of(x);
  if (shape_of(out) != shape) {
    throw UsageError("out: shape " + shape_str(shape_of(out)) + " differs from x's " +
                     shape_str(shape));
  }
  const Axes axes = resolve_axes(axes_text, shape.size(), "x");
  const RopeRotation r = rope_by_keyword(PyKeywords(rope_d), PyKeywords(pos_d),
                                         PyKeywords(apply_d), shape, axes, "x");
  const void* src = x.data();
  void* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    RopeApplier applier(shape, in, axes, r.freqs, r.pos, r.apply, to, "x");
    // An empty tensor is checked as any other but has nothing to rotate (its positions'
    // table alone could be gigabytes).
    if (x.size() > 0) applier.rows(src, dst, 0, applier.rows_total());
  }
}

// --- tables -------------------------------------------------------------------------

// The declared fields of one group of requests (posenc/field_groups.hpp), each with the
// `kind` it belongs to, for tests and the package's keyword lists.
py::list fields(const std::string& group) {
  using namespace pybind11::literals;
  py::list out;
  const auto add = [&out](const char* kind, auto r) {
    Describer d;
    declare(d, r);
    const auto option = [](const std::string& n) { return n.empty() ? "" : Field::option_of(n); };
    for (const Field& f : d.fields) {
      const py::list sides =
          f.first_side.empty() ? py::list() : py::list(py::make_tuple(f.first_side, f.second_side));
      out.append(py::dict(
          "kind"_a = kind, "name"_a = f.name, "keyword"_a = f.python_name(),
          "option"_a = f.option(), "short"_a = f.short_name.empty() ? "" : "-" + f.short_name,
          "type"_a = f.type, "required"_a = f.required, "lo"_a = f.lo, "hi"_a = f.hi,
          "choices"_a = f.choices, "negation"_a = option(f.negation), "positive"_a = f.positive,
          "bare"_a = f.bare, "word"_a = f.word, "flag"_a = option(f.flag),
          "flag_word"_a = f.flag_word, "bools"_a = f.bools, "sides"_a = sides,
          "default"_a = f.default_text, "help"_a = f.help));
    }
  };
  for_each_request_of(group, add);
  return out;
}

// The tables of one request (several for a list of emits), each computed in float64
// and rounded once to `dtype` ("" = the table's default).
py::tuple tables(const std::string& kind, const py::dict& d, const py::dict& rope_d,
                 const py::dict& pos_d, const std::string& dtype) {
  const CallThreads threads;
  std::vector<Table> tables =
      tables_by_keyword(kind, PyKeywords(d), PyKeywords(rope_d), PyKeywords(pos_d));
  std::vector<DType> types;
  for (const Table& t : tables) types.push_back(table_dtype(t, dtype, "dtype"));
  py::tuple out(tables.size());
  for (std::size_t i = 0; i < tables.size(); ++i) {
    Tensor values;
    {
      py::gil_scoped_release nogil;
      values = table_tensor(tables[i].spec, types[i]);
    }
    out[i] = py::make_tuple(to_array(std::move(values)), attrs_to(tables[i].attrs));
  }
  return out;
}

// --- rope-ids -----------------------------------------------------------------------

// The M-RoPE ids of a prompt given as a layout SPEC or as HF's input_ids and grids
// (`tensors`: (array, dtype name) pairs), and the mrope_position_delta(s):
// (ids [3, s], delta) or (ids [3, b, s], [delta per row]).
py::tuple rope_ids_of(const py::dict& d, const py::dict& tensors) {
  const CallThreads threads;
  RopeIdsResolved r = rope_ids_by_keyword(PyKeywords(d), PyKeywords(tensors));
  if (r.layout) {
    RopeIds one;
    {
      py::gil_scoped_release nogil;
      one = rope_ids(*r.layout, r.rules);
    }
    return py::make_tuple(to_array(std::move(one.ids)), one.delta);
  }
  RopeIdsBatch batch;
  {
    py::gil_scoped_release nogil;
    batch = rope_ids_from_tensors(std::move(*r.tensors), r.request, r.config, r.rules);
  }
  const bool one_row = batch.ids.ndim() == 2;
  py::object deltas =
      one_row ? py::object(py::int_(batch.deltas.at(0))) : py::object(py::cast(batch.deltas));
  return py::make_tuple(to_array(std::move(batch.ids)), deltas);
}

// --- attention ----------------------------------------------------------------------

// posenc.attention: the call read and checked by keyword in the library
// (ops/attention_keywords.hpp), then run without the GIL. A KV cache the call writes in
// place must be the caller's own arrays, writable, not copies of them.
py::dict attention(const py::dict& tensors, const py::dict& opt_d, const py::dict& rope_d,
                   const py::dict& pos_d, const py::dict& apply_d, bool with_rope,
                   const py::dict& relative_d) {
  const CallThreads threads;
  const PyKeywords t(tensors);
  const bool kv = t.gives("kv");
  const py::dict kv_d = kv ? tensors["kv"].cast<py::dict>() : py::dict();
  const PyKeywords o(opt_d), r(rope_d), p(pos_d), a(apply_d), rel(relative_d),
      kv_k(kv_d);
  AttentionCall call({t, o, r, p, a, rel, kv ? &kv_k : nullptr, with_rope});
  for (const char* key : {"k", "v"}) {
    if (!call.updates_cache()) break;
    const py::array cache = py::tuple(tensors[key])[0];
    if (!cache.writeable() || cache.data() != static_cast<const void*>(call.cache(*key).bytes())) {
      throw UsageError(std::string(key) + ": the cache is updated in place and must be a "
                       "writable C-contiguous array (or give update_cache=False)");
    }
  }
  AttentionEmitted res;
  {
    py::gil_scoped_release nogil;
    res = call.run();
  }
  py::dict out;
  for (auto& [name, tensor] : res.tensors) out[py::str(name)] = to_array(std::move(tensor));
  out["attrs"] = attrs_to(res.attrs);
  return out;
}

// --- compare, read, write -----------------------------------------------------------

// f()'s result, computed without the GIL (f touches no Python object).
template <class F>
auto without_gil(F f) {
  py::gil_scoped_release nogil;
  return f();
}

py::dict compare(const py::array& a, const std::string& a_dtype, const py::array& b,
                 const std::string& b_dtype, const py::dict& d) {
  const CallThreads threads;
  const Tensor ta = to_tensor(a, a_dtype, "a"), tb = to_tensor(b, b_dtype, "b");
  CompareOptions opt;
  KeywordReader(PyKeywords(d)).read(opt);  // rtol, atol, ulp, equal_nan (ops/compare_fields.hpp)
  const SliceSpec slice = parse_slice(PyKeywords(d).get<std::string>("slice").value_or(""));
  const CompareResult r = without_gil([&] { return posenc::compare(ta, tb, opt, slice); });
  using namespace pybind11::literals;
  // A largest difference: its value, where (A's multi-index, as the command prints it)
  // and both values there.
  const auto diff_at = [&r](const DiffAt& d) {
    const py::object at =
        d.index ? py::object(py::tuple(py::cast(r.index_in_a(*d.index)))) : py::none();
    return py::dict("value"_a = d.value, "index"_a = at, "a"_a = d.a, "b"_a = d.b);
  };
  // The rule as the command states it: a ULP bound given alone decides alone.
  const bool tol = r.rule.tolerances_apply();
  const std::optional<std::size_t> first = r.first_mismatch;
  return py::dict("match"_a = r.match(), "shapes_equal"_a = r.shapes_equal, "shape_a"_a = r.shape_a,
                  "shape_b"_a = r.shape_b, "total"_a = r.total, "mismatches"_a = r.mismatches,
                  "first_mismatch"_a = first,
                  "first_mismatch_index"_a = first ? py::cast(r.index_in_a(*first)) : py::none(),
                  "max_abs"_a = diff_at(r.max_abs), "max_rel"_a = diff_at(r.max_rel),
                  "max_ulp"_a = r.max_ulp, "nan_a"_a = r.nan_a, "nan_b"_a = r.nan_b,
                  "nan_mismatches"_a = r.nan_mismatches,
                  "rtol"_a = tol ? py::cast(r.rule.rtol) : py::none(),
                  "atol"_a = tol ? py::cast(r.rule.atol) : py::none(), "ulp"_a = r.rule.max_ulp,
                  "ulp_type"_a = r.rule.ulp_type_name());
}

// --- combine ------------------------------------------------------------------------

py::dict combine_partials(const py::array& out_partial, const std::string& out_dtype,
                          const py::array& lse_partial, const std::string& lse_dtype,
                          const py::dict& d) {
  const CallThreads threads;
  const Tensor o = to_tensor(out_partial, out_dtype, "out_partial");
  const Tensor l = to_tensor(lse_partial, lse_dtype, "lse_partial");
  CombineOptions opt;
  KeywordReader(PyKeywords(d)).read(opt);  // axis, lse_layout, dtype (ops/combine.hpp)
  CombineResult r = without_gil([&] { return posenc::combine(o, l, opt); });
  py::dict res;
  res["out"] = to_array(std::move(r.out));
  res["lse"] = to_array(std::move(r.lse));
  return res;
}

// flash-attn's verdict: compare(..., baseline=PT).
py::dict compare_baseline(const py::array& a, const std::string& a_dtype, const py::array& b,
                          const std::string& b_dtype, const py::array& pt,
                          const std::string& pt_dtype, const py::dict& d) {
  const CallThreads threads;
  const Tensor ta = to_tensor(a, a_dtype, "a"), tb = to_tensor(b, b_dtype, "b"),
               tp = to_tensor(pt, pt_dtype, "baseline");
  BaselineRule rule;
  KeywordReader(PyKeywords(d)).read(rule);  // factor, atol (ops/compare_fields.hpp)
  rule.names = {"a", "b", "baseline"};
  const BaselineVerdict v = without_gil([&] { return judge_against_baseline(ta, tb, tp, rule); });
  using namespace pybind11::literals;
  py::dict o("match"_a = v.pass(), "shapes_equal"_a = v.shapes_equal, "shape_a"_a = ta.shape(),
             "shape_b"_a = tb.shape());
  for_each_verdict_number(v, ta.shape(), tb.shape(), [&o](const char* key, const auto& x) {
    if constexpr (IsOptional<std::decay_t<decltype(x)>>::value) {
      o[key] = x ? py::object(py::tuple(py::cast(*x))) : py::none();
    } else {
      o[key] = x;
    }
  });
  return o;
}

// A tensor reference from Python: a file, never the interpreter's stdin or stdout.
void check_module_ref(const std::string& ref) {
  if (ref.find('\0') != std::string::npos) {
    throw UsageError("ref: " + printable(ref.substr(0, ref.find('\0'))) +
                     "\\0...: a path cannot contain a NUL character");
  }
  if (ref == "-") {
    throw UsageError("ref: '-' (standard input or output) is the command's, not the module's");
  }
}

py::tuple read(const std::string& ref) {
  const CallThreads threads;
  check_module_ref(ref);
  Tensor t = without_gil([&] { return read_tensor(ref); });
  const std::string name(dtype_name(t.dtype()));
  return py::make_tuple(to_array(std::move(t)), name);
}

void write(const std::string& ref, const py::array& x, const std::string& dtype,
           const py::dict& attrs, const py::dict& d) {
  const CallThreads threads;
  check_module_ref(ref);
  const Tensor t = to_tensor(x, dtype, "x");
  WriteOptions w;
  KeywordReader(PyKeywords(d)).read(w);  // force, compression, no_clobber, sync (io/write_fields.hpp)
  const TensorRef r = parse_ref(ref, PyKeywords(d).get<std::string>("to").value_or(""), "/data");
  const Attrs a = attrs_from(attrs);
  py::gil_scoped_release nogil;
  write_tensor(r, t, a, w);
}

// The fp8 dtype of a format name ("e4m3fn", "float8_e5m2", ...; UsageError naming
// `format` otherwise).
DType fp8_dtype(const std::string& format) {
  return parse_fp8_format(format, "format") == Fp8Format::e4m3fn ? DType::f8e4m3fn : DType::f8e5m2;
}

// --- benchmarks' reference points ---------------------------------------------------

// The best time in seconds of `repeats` calls of `f`, without the GIL.
template <class F>
double best_seconds(int repeats, F f) {
  py::gil_scoped_release nogil;
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// The C++ kernel's own time for an in-place rotation of x (f32/f64), in seconds: what
// posenc.rope's overhead is measured against (bench/python).
double time_rope_cpp(py::array x, const std::string& dtype, const std::string& axes_text,
                     int repeats) {
  const CallThreads threads;
  const DType t = dtype_of(x, dtype, "x");
  const Shape shape = shape_of(x);
  void* data = x.mutable_data();
  const Axes axes = resolve_axes(axes_text, shape.size(), "x");
  const Positions pos;  // named: GCC 12 warns falsely on `{}` temporaries here
  const RopeApplyOptions apply;
  return best_seconds(repeats, [&] {
    const auto params = [](int head_dim) {
      RopeParams p;
      p.head_dim = head_dim;
      return p;
    };
    const RopeFreqs f = rope_freqs_for(shape, axes, params, pos, apply, "x");
    RopeApplier ap(shape, t, axes, f, pos, apply, t, "x");
    ap.rows(data, data, 0, ap.rows_total());
  });
}

// The C++ attention call's own time (inputs already Tensors), in seconds.
double time_attention_cpp(const py::array& q, const py::array& k, const py::array& v,
                          const std::string& dtype, bool causal, int repeats) {
  const CallThreads threads;
  const Tensor tq = to_tensor(q, dtype, "q"), tk = to_tensor(k, dtype, "k"),
               tv = to_tensor(v, dtype, "v");
  AttentionOptions opt;
  opt.causal = causal ? CausalAlign::bottom_right : CausalAlign::none;
  opt.emit = {AttentionEmit::output};
  return best_seconds(repeats, [&] { posenc::attention(tq, tk, &tv, opt); });
}

}  // namespace

}  // namespace posenc::python

PYBIND11_MODULE(_posenc, m) {
  using namespace posenc::python;
  m.doc() = "posenc's C++ library (the package posenc wraps it; use that)";
  m.attr("__version__") = POSENC_VERSION;

  // One exception type per exit status of the command (posenc/error.hpp's), under
  // posenc.Error, which the others (and an error of no other status) are.
  using posenc::ExitStatus;
  static auto& types = *new std::map<ExitStatus, py::object>;  // for the process's life
  for (auto [name, status] : {std::pair{"Error", ExitStatus::kInternal},
                              {"UsageError", ExitStatus::kUsage},
                              {"InputError", ExitStatus::kBadInput},
                              {"OutputError", ExitStatus::kOutput}}) {
    const std::string full = m.attr("__name__").cast<std::string>() + "." + name;
    PyObject* base = types.empty() ? PyExc_Exception : types[ExitStatus::kInternal].ptr();
    types[status] = py::reinterpret_steal<py::object>(PyErr_NewException(full.c_str(), base, 0));
    types[status].attr("status") = static_cast<int>(status);
    m.attr(name) = types[status];
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const posenc::Error& e) {
      const ExitStatus s = types.count(e.status()) ? e.status() : ExitStatus::kInternal;
      PyErr_SetString(types[s].ptr(), e.what());
    }
  });

  m.def("rope", &rope_into,
        "rope(x, x_dtype, out, out_dtype, axes, rope, positions, apply): rotates x into out "
        "(which may be x); the options as dicts of RopeParams, Positions and RopeApplyOptions "
        "members. Use posenc.rope.");
  m.def("table", &tables,
        "table(kind, request, rope, positions, dtype): the tables of one request as "
        "((array, attrs), ...). Use posenc.table.");
  m.def("_fields", &fields,
        "_fields(group): the declared fields of a group of requests (table, rope, rope_ids, "
        "attention, relative, attention_tensors, ops) as dicts: kind, name, keyword, option, "
        "type, range, choices, default, help, ...");
  m.def("rope_ids", &rope_ids_of,
        "rope_ids(options, tensors): (ids, delta or deltas) of a prompt, as `posenc rope-ids`. "
        "Use posenc.rope_ids.");
  m.def("attention", &attention,
        "attention(tensors, options, rope, positions, apply, with_rope, relative): the emitted "
        "tensors and attrs as a dict. Use posenc.attention.");
  m.def("compare", &compare,
        "compare(a, a_dtype, b, b_dtype, options): the comparison as a dict. Use "
        "posenc.compare.");
  m.def("combine", &combine_partials,
        "combine(out_partial, out_dtype, lse_partial, lse_dtype, options): the merged "
        "{out, lse}. Use posenc.combine.");
  m.def("compare_baseline", &compare_baseline,
        "compare_baseline(a, a_dtype, b, b_dtype, pt, pt_dtype, options): flash-attn's "
        "verdict as a dict. Use posenc.compare(..., baseline=...).");
  m.def("read", &posenc::python::read,
        "read(ref): (array, dtype name) of a tensor reference. Use posenc.read.");
  m.def("write", &posenc::python::write,
        "write(ref, x, dtype, attrs, options): writes x atomically. Use posenc.write.");
  m.def(
      "kernel_variant", [] { return std::string(posenc::rope_kernel_variant()); },
      "The RoPE kernel variant this process runs.");
  m.def("time_rope_cpp", &time_rope_cpp,
        "time_rope_cpp(x, dtype, axes, repeats): best time in seconds of the C++ in-place "
        "rotation of x (default RoPE), for bench/python.");
  m.def("time_attention_cpp", &time_attention_cpp,
        "time_attention_cpp(q, k, v, dtype, causal, repeats): best time in seconds of the C++ "
        "attention call (output only), for bench/python.");
  m.def(
      "set_threads",
      [](std::int64_t n) {
        if (n < 0 || n > posenc::kMaxThreads) {
          throw posenc::UsageError("threads: must be from 0 (all cores) to " +
                                   std::to_string(posenc::kMaxThreads) + ", got " +
                                   std::to_string(n));
        }
        const int want = n > 0 ? static_cast<int>(n) : omp_get_num_procs();
        const int got = g_forked ? want : posenc::startable_threads(want);
        g_threads = got;
        return got;
      },
      "set_threads(n): worker threads for the calls that follow, in every thread of the "
      "process (0 = all cores), as the command's -j/--threads; returns the count in force "
      "(fewer when a memory or process limit lets fewer start). Results do not depend on it.");
  pthread_atfork(nullptr, nullptr, posenc_forked_child);
  m.def(
      "noop", [] {}, "Does nothing: the cost of a call into the module, for bench/python.");
  // The fp8 conversions as `posenc convert` makes them (posenc/ops/cast.hpp).
  m.def(
      "fp8_encode",
      [](const py::array& x, const std::string& format) {
        const posenc::DType to = fp8_dtype(format);
        const bool single = py::isinstance<py::array_t<float>>(x);
        if (!single && !py::isinstance<py::array_t<double>>(x)) {
          throw posenc::UsageError("fp8_encode: x must be a float32 or float64 array");
        }
        const py::array a = py::array::ensure(x, py::array::c_style);
        py::array_t<std::uint8_t> out(x.size());
        posenc::cast(static_cast<const std::byte*>(a.data()),
                     single ? posenc::DType::f32 : posenc::DType::f64,
                     reinterpret_cast<std::byte*>(out.mutable_data()), to,
                     static_cast<std::size_t>(out.size()));
        return out;
      },
      "fp8_encode(x, format): the fp8 codes (uint8, flat) of float32 or float64 x, rounded as "
      "torch's .to(float8_e4m3fn / float8_e5m2).");
  m.def(
      "fp8_decode",
      [](const py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>& codes,
         const std::string& format) {
        py::array_t<float> out(codes.size());
        posenc::cast(reinterpret_cast<const std::byte*>(codes.data()), fp8_dtype(format),
                     reinterpret_cast<std::byte*>(out.mutable_data()), posenc::DType::f32,
                     static_cast<std::size_t>(out.size()));
        return out;
      },
      "fp8_decode(codes, format): the float32 values (flat) of uint8 fp8 codes, exact.");
}
