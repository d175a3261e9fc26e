#pragma once
// Pieces shared by the subcommands: global flags, output options, messages.

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <xtensor/xarray.hpp>

#include "cli/parse.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/select.hpp"

namespace posenc::cli {

/// The command line as far as choosing which commands to define needs it: the words
/// that are not options (command, kind, operands; the value of -j/--threads skipped),
/// and how many of them come before the first help word (-h, --help, --help-all, --)
/// and before --version (kNone: not given).
struct RunWords {
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<std::string> words;
  std::vector<std::string> dashed;  ///< every argument that starts with '-'
  std::size_t help_after = kNone;
  std::size_t version_after = kNone;
  bool full = false;  ///< every option defined (see defines_option)
};
RunWords scan_run_words(int argc, const char* const* argv);

/// Whether an optional option with CLI11 names `names` ("-f,--force") is to be defined
/// for this run. Each definition costs CLI11 about 12,000 instructions, so the shared
/// output, --part and global options a run does not mention are left out: when no
/// argument could be one of their names (`--name`, `--name=...`, or a short-option
/// cluster holding its letter). Help, completion and a run without a command define
/// everything, and so does the second parse that main() makes after any parse error,
/// so messages and suggestions see every option.
bool defines_option(std::string_view names);

/// Global options (before the command name).
struct Globals {
  int threads = 0;  ///< 0 = all cores
  bool quiet = false;
  bool verbose = false;
  RunWords run;  ///< this run's command line, scanned before the commands are defined
};
Globals& globals();

/// Whether subcommand `kind` of `command` is to be defined for this run (see
/// globals().run): when the run names `command` and then one of its `kinds`, only
/// that kind is; with help asked for, a kind missing or misspelt, or another command
/// named (completion writes every command), all are.
bool defines_kind(std::string_view command, std::string_view kind,
                  const std::vector<std::string_view>& kinds);

/// Output reference(s) and how to write them (-o, --to, and WriteOptions' declared
/// -f/--force, --compression, --no-clobber, --sync).
struct OutputOptions {
  std::vector<std::string> outputs;
  std::string to;
  WriteOptions write;
  WriteOptions write_options() const { return write; }
};
/// Adds -o/--output (repeatable when `multiple`), --to and the declared options of
/// WriteOptions (io/write_fields.hpp). `required` makes -o mandatory; `help` replaces the
/// text of -o.
void add_output_options(CLI::App* sub, OutputOptions& o, bool multiple = false,
                        bool required = true, const char* help = nullptr);

/// Adds --part I/N (a share of the job for one of N processes; see io/part.hpp), with
/// `axis_help` saying which axis is cut.
void add_part_option(CLI::App* sub, std::string& part, const char* axis_help);

/// The output references of a command that emits several tensors, `names` in --emit
/// order (`defaults[i]`: where tensor i goes in a bare HDF5 file). Accepted: one -o per
/// tensor, in order; one -o with a pattern `{}` (or `%s`) replaced by each name
/// (out_{}.npy, f.h5:/layer0/{}); or one HDF5 file, `f.h5` (tensor i at defaults[i]) or
/// `f.h5:/GROUP` (at /GROUP/NAME; a single tensor at /GROUP itself). Anything else is
/// a UsageError naming -o and `emit_option`.
std::vector<TensorRef> emitted_output_refs(const OutputOptions& out,
                                           const std::vector<std::string>& names,
                                           const std::vector<std::string>& defaults,
                                           const std::string& emit_option = "--emit");

/// The fields of a comma-separated list ("a,b,,c" gives four; "" gives one empty field).
std::vector<std::string> split_list(const std::string& text);

/// A CLI11 transform that checks an option's text is a decimal integer in the 64-bit
/// range and writes it in canonical form (`->transform(integer_text())`, for options
/// whose type name is not CLI11's, which check_numeric_options cannot see).
CLI::Validator integer_text(bool is_signed = true);

/// Adds to every integer and real-number option of `app` and its subcommands a check of
/// the text (canonicalising integers) before CLI11 converts it (see integer_text_error,
/// number_text_error), so that no option takes an octal, clamped, wrapped or non-finite
/// value; and to every other option that takes a value, the refusal of an empty word
/// ("--mask: empty value"), which would otherwise read as the option not given.
void check_numeric_options(CLI::App& app);

/// Prints `posenc: <msg>` on stderr when --verbose is on.
void verbose(const std::string& msg);
/// Prints the recorded parameters on stderr when --verbose is on.
void verbose_attrs(const Attrs& attrs);

}  // namespace posenc::cli

namespace posenc::cli {
/// The exit status a command asks for when it completes without an error (compare
/// returns 1 when the tensors differ). Defaults to 0.
int& exit_code();
}  // namespace posenc::cli

namespace posenc::cli {
/// A library message in command-line terms: the library names its parameters
/// (`rotary_dim: must be even`, `needs original_max_pos`); where the command `cmd` (or a
/// parent) has the matching option, the name becomes it (`--rotary-dim: ...`). Mapped
/// are the names before the first ':' (e.g. `q_len/k_len`, `scaling yarn`), a name
/// right after "needs " (`needs factor` becomes `needs --factor`) and every name with an
/// underscore elsewhere. A message about a file's key (`config.json: 'head_dim': ...`)
/// stays in the file's terms.
std::string cli_terms(const CLI::App* cmd, const std::string& msg);
}  // namespace posenc::cli

namespace posenc::cli {
/// The help text of --slice, shared by the commands that take it.
extern const char* const kSliceHelp;

/// Parses a --slice text (empty: everything); syntax errors are UsageErrors naming the
/// option ("--slice '1:x': '1:x' ...").
SliceSpec parse_slice_option(const std::string& text);

/// Resolves a --slice against the shape of the input `what` (a reference as written);
/// an index outside the shape is an InputError ("--slice '0,9': index 9 is out of
/// range for axis 1 with size 4 (x.npy has shape (3, 4))").
Selection resolve_slice_option(const SliceSpec& spec, const Shape& shape, const std::string& what);

/// Reads standard input to its end when it is a pipe or socket, so that a producer
/// whose output was only partly needed finishes without a broken pipe.
void drain_stdin();

/// The integers of `ref` (any integer dtype) as int64, for ids, positions and masks
/// read for `option`: InputError ("--input-ids: ids.npy: expected an integer dtype, got
/// f64") for other dtypes and u64 values above INT64_MAX.
xt::xarray<std::int64_t> read_int64(const std::string& ref, const char* option);
/// The same for a tensor already read from `ref`.
xt::xarray<std::int64_t> int64_values(const Tensor& t, const std::string& ref, const char* option);

/// Help of --input-dtype, the fp8 reading of 1-byte inputs (TensorRef::view_as).
inline constexpr const char* kInputDtypeHelp =
    "read the 1-byte elements of the tensor inputs (uint8, int8, '<V1' as np.save writes "
    "ml_dtypes' float8 arrays, an HDF5 1-byte opaque type) as float8_e4m3fn (e4m3fn) or "
    "float8_e5m2 (e5m2); an input of another dtype is refused (exit 3)";
/// `ref` with --input-dtype `name` applied (empty: as stored); UsageError for a name
/// that is not an fp8 dtype.
TensorRef with_input_dtype(TensorRef ref, const std::string& name);
}  // namespace posenc::cli
