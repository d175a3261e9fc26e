#include "cli/common.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <variant>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/declared_options.hpp"
#include "posenc/error.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/printable.hpp"

namespace posenc::cli {

Globals& globals() {
  static Globals g;
  return g;
}

RunWords scan_run_words(int argc, const char* const* argv) {
  RunWords r;
  for (int i = 1; i < argc; ++i) {
    const std::string_view w = argv[i];
    if (w == "-j" || w == "--threads") {
      ++i;
    } else if (w == "-h" || w == "--help" || w == "--help-all" || w == "--") {
      if (r.help_after == RunWords::kNone) r.help_after = r.words.size();
    } else if (w == "--version") {
      if (r.version_after == RunWords::kNone) r.version_after = r.words.size();
    } else if (w.empty() || w[0] != '-') {
      r.words.emplace_back(w);
    }
    if (!w.empty() && w[0] == '-') r.dashed.emplace_back(w);
  }
  return r;
}

bool defines_option(std::string_view names) {
  const RunWords& r = globals().run;
  if (r.full || r.help_after != RunWords::kNone || r.words.empty() ||
      r.words.front() == "completion") {
    return true;
  }
  for (std::size_t pos = 0; pos <= names.size();) {
    std::size_t end = names.find(',', pos);
    if (end == std::string_view::npos) end = names.size();
    const std::string_view name = names.substr(pos, end - pos);
    pos = end + 1;
    for (std::string_view arg : r.dashed) {
      if (name.size() > 2 && name[1] == '-') {
        if (arg.substr(0, name.size()) == name &&
            (arg.size() == name.size() || arg[name.size()] == '=')) {
          return true;
        }
      } else if (name.size() == 2 && arg.size() > 1 && arg[1] != '-' &&
                 arg.find(name[1], 1) != std::string_view::npos) {
        return true;
      }
    }
  }
  return false;
}

bool defines_kind(std::string_view command, std::string_view kind,
                  const std::vector<std::string_view>& kinds) {
  const RunWords& r = globals().run;
  if (r.help_after != RunWords::kNone || r.words.size() < 2 || r.words[0] != command) {
    return true;
  }
  for (std::string_view known : kinds) {
    if (r.words[1] == known) return known == kind;
  }
  return true;
}

int& exit_code() {
  static int code = 0;
  return code;
}

namespace {
// Binds the declared options that this run defines (defines_option).
struct MentionedOptions {
  OptionBinder bind;
  template <class T>
  void operator()(const Field& f, T& member) {
    if (defines_option(OptionBinder::names(f))) bind(f, member);
  }
};
}  // namespace

void add_output_options(CLI::App* sub, OutputOptions& o, bool multiple, bool required,
                        const char* help) {
  auto* opt = sub->add_option(
      "-o,--output", o.outputs,
      help != nullptr ? help
                      : "output tensor reference (x.npy, x.h5:/d, x.csv, x.tsv, x.json, - for "
                        "stdout); x.h5:/d is added to an existing HDF5 file x.h5");
  if (!multiple) opt->expected(1);
  if (required) opt->required();
  if (defines_option("--to")) {
    sub->add_option("--to", o.to, "output format, overriding the extension")
        ->check(CLI::IsMember({"npy", "h5", "hdf5", "csv", "tsv", "json", "text"}));
  }
  MentionedOptions mentioned{OptionBinder(sub)};
  declare(mentioned, o.write);
}

void add_part_option(CLI::App* sub, std::string& part, const char* axis_help) {
  if (!defines_option("--part")) return;
  sub->add_option("--part", part,
                  fmt::format("compute and write only share I of N (0 <= I < N): entries "
                              "[floor(I*R/N), floor((I+1)*R/N)) of {}; HDF5 outputs record the "
                              "share for `posenc join`",
                              axis_help))
      ->type_name("I/N")
      // Given, it names a share: '' is not "no part" (each command parses the rest).
      ->check([](const std::string& s) {
        return s.empty() ? std::string("expected I/N with 0 <= I < N (e.g. 0/4), got ''")
                         : std::string();
      });
}

std::vector<TensorRef> emitted_output_refs(const OutputOptions& out,
                                           const std::vector<std::string>& names,
                                           const std::vector<std::string>& defaults,
                                           const std::string& emit_option) {
  const auto& outs = out.outputs;
  std::vector<TensorRef> refs;
  auto pattern_pos = [](const std::string& s) -> std::size_t {
    const auto p = s.find("{}");
    return p != std::string::npos ? p : s.find("%s");
  };
  if (outs.size() == 1 && pattern_pos(outs[0]) != std::string::npos) {
    for (const auto& name : names) {
      std::string t = outs[0];
      for (auto p = pattern_pos(t); p != std::string::npos; p = pattern_pos(t)) {
        t.replace(p, 2, name);
      }
      refs.push_back(parse_ref(t, out.to));
    }
    return refs;
  }
  if (outs.size() == 1) {
    static const std::string kNone = "/\x01none";
    TensorRef base = parse_ref(outs[0], out.to, kNone);
    if (base.format == Format::hdf5) {
      if (names.size() == 1) {
        if (base.dataset == kNone) base.dataset = defaults.at(0);
        return {base};
      }
      std::string group = base.dataset;
      while (!group.empty() && group.back() == '/') group.pop_back();
      for (std::size_t i = 0; i < names.size(); ++i) {
        TensorRef r = base;
        r.dataset = base.dataset == kNone ? defaults.at(i) : group + "/" + names[i];
        r.text = r.path + ":" + r.dataset;
        refs.push_back(r);
      }
      return refs;
    }
  }
  if (outs.size() == names.size()) {
    for (std::size_t i = 0; i < outs.size(); ++i) {
      refs.push_back(parse_ref(outs[i], out.to, defaults.at(i)));
    }
    return refs;
  }
  throw UsageError(
      fmt::format("-o: {} {} gives {} tensors but {} outputs were given (give one -o per tensor in "
                  "{} order, a pattern with {{}} such as out_{{}}.npy, or one HDF5 file)",
                  emit_option, fmt::join(names, ","), names.size(), outs.size(), emit_option));
}

CLI::Validator integer_text(bool is_signed) {
  return CLI::Validator([is_signed](std::string& s) { return integer_text_error(s, is_signed); },
                        "");
}

// Whether `opt` checks a declared range (declared_range), which words the refusal of -1.
static bool has_declared_range(CLI::Option* opt) try {
  return opt->get_validator("declared") != nullptr;
} catch (const CLI::OptionNotFound&) {
  return false;
}

void check_numeric_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    // CLI11 names the value type first ("INT", "UINT:..." with a range check, "FLOAT").
    const std::string type = opt->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    if (is_unsigned || type.rfind("INT", 0) == 0) {
      opt->transform(integer_text(!is_unsigned || has_declared_range(opt)));
    } else if (type.rfind("FLOAT", 0) == 0) {
      opt->check(CLI::Validator([](std::string& s) { return number_text_error(s); }, ""));
    } else if (opt->get_type_size_min() > 0) {
      // An empty word is no file reference, name or list: `--mask "$MASK"` with MASK
      // unset must not run as if --mask were not given.
      opt->check(CLI::Validator(
          [](std::string& s) { return s.empty() ? std::string("empty value") : std::string(); },
          ""));
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    check_numeric_options(*sub);
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = text.find(',', pos);
    out.push_back(text.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) return out;
    pos = at + 1;
  }
}

void verbose(const std::string& msg) {
  if (globals().verbose) fmt::print(stderr, "posenc: {}\n", printable(msg));
}

void verbose_attrs(const Attrs& attrs) {
  if (!globals().verbose) return;
  for (const auto& a : attrs) {
    std::string v = std::visit(
        [](const auto& x) -> std::string {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<double>>) {
            return fmt::format("[{}]", fmt::join(x, ", "));
          } else {
            return fmt::format("{}", x);
          }
        },
        a.value);
    fmt::print(stderr, "posenc: {} = {}\n", printable(a.name), printable(v));
  }
}

}  // namespace posenc::cli

namespace posenc::cli {

namespace {

// The option a library parameter name stands for on `cmd` or its parents, or "".
std::string option_for(const CLI::App* cmd, std::string name) {
  // Library names that differ from their option.
  if (name == "head_dim") name = "dim";
  if (name == "grid_ids") name = "rope2d_ids";
  if (name == "help") return "";  // no library parameter; `posenc help` says its name
  std::replace(name.begin(), name.end(), '_', '-');
  const std::string flag = "--" + name;
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    if (a->get_option_no_throw(flag) != nullptr) return flag;
  }
  return "";
}

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

std::string cli_terms(const CLI::App* cmd, const std::string& msg) {
  if (cmd == nullptr) return msg;
  const std::size_t colon = msg.find(": ");
  // "config.json: 'head_dim': ...": a file's key, said in the file's terms (ValueSources).
  if (colon != std::string::npos && msg.compare(colon + 2, 1, "'") == 0 &&
      msg.find("': ", colon + 3) != std::string::npos) {
    return msg;
  }
  std::string out;
  bool last_mapped = false;  // "q_len/k_len": a name after '/' only follows a name
  std::size_t i = 0;
  while (i < msg.size()) {
    const char before = i == 0 ? ' ' : msg[i - 1];
    const bool starts = is_name_char(msg[i]) &&
                        (before == ' ' || before == '(' || (before == '/' && last_mapped) ||
                         i == 0);
    if (!starts) {
      if (is_name_char(msg[i]) || msg[i] != '/') last_mapped = false;
      out += msg[i++];
      continue;
    }
    std::size_t j = i;
    while (j < msg.size() && is_name_char(msg[j])) ++j;
    const std::string word = msg.substr(i, j - i);
    const char after = j < msg.size() ? msg[j] : ' ';
    const bool ends = after == ' ' || after == ':' || after == ',' || after == ')' || after == '/';
    // The message's first name (and names joined to it by '/') names the parameter.
    const bool in_prefix = colon != std::string::npos && j <= colon &&
                           (i == 0 || (before == '/' && last_mapped));
    // "scaling llama3: needs factor": the name a message says is missing.
    const bool needed = i >= 6 && msg.compare(i - 6, 6, "needs ") == 0;
    std::string flag;
    if (ends && (in_prefix || needed || word.find('_') != std::string::npos)) {
      flag = option_for(cmd, word);
    }
    out += flag.empty() ? word : flag;
    last_mapped = !flag.empty();
    i = j;
  }
  return out;
}

}  // namespace posenc::cli

namespace posenc::cli {

const char* const kSliceHelp =
    "numpy slicing, one entry per axis: ints, a:b, a:b:c, negative indices, ':', '...' "
    "and index lists [i,j,...] (each list picks entries of its own axis, like np.ix_), "
    "e.g. \"0,:,:4\" or \"1,[1,100],0\"";

SliceSpec parse_slice_option(const std::string& text) {
  try {
    return parse_slice(text);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--") + e.what());
  }
}

Selection resolve_slice_option(const SliceSpec& spec, const Shape& shape, const std::string& what) {
  try {
    return resolve_selection(spec, shape);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--{} ({} has shape {})", e.what(), what, shape_str(shape)));
  }
}

void drain_stdin() {
  struct stat st;
  if (::fstat(STDIN_FILENO, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return;  // end of data, or an error: nothing more to take
  }
}

}  // namespace posenc::cli

namespace posenc::cli {

xt::xarray<std::int64_t> read_int64(const std::string& ref, const char* option) {
  return int64_values(read_tensor(ref), ref, option);
}

xt::xarray<std::int64_t> int64_values(const Tensor& t, const std::string& ref, const char* option) {
  if (!is_integer(t.dtype())) {
    throw InputError(fmt::format("{}: {}: expected an integer dtype, got {}", option, ref,
                                 dtype_name(t.dtype())));
  }
  xt::xarray<std::int64_t> out = xt::empty<std::int64_t>(t.shape());
  for (std::size_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::i64) {
      out.data()[i] = t.data<std::int64_t>()[i];
    } else if (t.dtype() == DType::u64) {
      const std::uint64_t u = t.data<std::uint64_t>()[i];
      if (u > static_cast<std::uint64_t>(INT64_MAX)) {
        throw InputError(fmt::format("{}: {}: value {} is too large", option, ref, u));
      }
      out.data()[i] = static_cast<std::int64_t>(u);
    } else {
      out.data()[i] = static_cast<std::int64_t>(t.get(i));  // exact below 64 bits
    }
  }
  return out;
}

TensorRef with_input_dtype(TensorRef ref, const std::string& name) {
  if (name.empty()) return ref;
  const DType t = parse_dtype(name, "--input-dtype");
  if (!is_fp8(t)) {
    throw UsageError(fmt::format(
        "--input-dtype {}: expected float8_e4m3fn (e4m3fn) or float8_e5m2 (e5m2)", name));
  }
  ref.view_as = t;
  return ref;
}

}  // namespace posenc::cli
