// `posenc join PART... -o OUT`: the parts of a `--part I/N` run as one tensor (a copy, or
// an HDF5 virtual dataset with --virtual). The checks live in the library (io/join.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/io/join.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

struct JoinOptions {
  std::vector<std::string> parts;
  OutputOptions out;
  bool virtual_dataset = false;
  std::size_t axis = 0;
};

void run_join(const JoinOptions& o) {
  JoinRequest r;
  for (const auto& t : o.parts) r.parts.push_back(parse_ref(t));
  r.output = parse_ref(o.out.outputs.at(0), o.out.to, "/data");
  r.write = o.out.write_options();
  r.virtual_dataset = o.virtual_dataset;
  r.axis = o.axis;
  const JoinResult res = join_parts(r);
  if (!globals().quiet) {
    for (std::string w : res.warnings) {
      std::replace(w.begin(), w.end(), '\n', ' ');  // one line, whatever the file names hold
      fmt::print(stderr, "posenc: warning: {}\n", w);
    }
  }
  verbose(fmt::format("{} part(s) joined along axis {}: {} {}{}", res.parts, res.axis,
                      dtype_name(res.dtype), shape_str(res.shape),
                      o.virtual_dataset ? " (virtual dataset)" : ""));
}

}  // namespace

void register_join(CLI::App& app) {
  auto opt = std::make_shared<JoinOptions>();
  auto* sub = app.add_subcommand(
      "join",
      "assemble the outputs of a --part I/N run into one tensor. HDF5 parts record their share "
      "and parameters and may come in any order; they are checked to be complete, "
      "non-overlapping and of one run (every recorded parameter equal). NPY parts record "
      "nothing: they are joined in the order given along --axis, their order and "
      "completeness cannot be checked (only the same file given twice is refused), and join "
      "warns on stderr (not with -q).");
  sub->add_option("parts", opt->parts, "part tensor references (p0.h5:/q, p1.h5:/q, ... or .npy)")
      ->required();
  add_output_options(sub, opt->out, /*multiple=*/false, /*required=*/true,
                     "the whole (out.h5:/name, out.npy, ...)");
  sub->add_flag("--virtual", opt->virtual_dataset,
                "write an HDF5 virtual dataset over the part files instead of a copy (HDF5 parts "
                "and output; the parts must stay where they are; read by h5py, refused by "
                "posenc's own reader). Like a copy, it is added to an existing HDF5 output "
                "file, which may be a part file when it names another dataset");
  sub->add_option("--axis", opt->axis,
                  "parts without a record (NPY): the axis they are joined along (default 0)");
  sub->callback([opt] { run_join(*opt); });
}

}  // namespace posenc::cli
