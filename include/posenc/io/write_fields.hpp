#pragma once
/// \file
/// How an output is written (WriteOptions), declared once (declare.hpp): the output
/// options of every command that writes tensors (-f/--force, --compression, --no-clobber,
/// --sync) and the keywords of posenc.write. write_tensor and write_tensors check them;
/// the compression level is checked as it is given, with one message from every front end
/// ("compression: must be from 0 to 9, got 10", said `--compression: ...` on the command
/// line).

#include "posenc/declare.hpp"
#include "posenc/io/ref.hpp"

namespace posenc {

template <class V>
void declare(V& v, WriteOptions& w) {
  v(field("force",
          "write binary output to a terminal; replace an existing dataset of an HDF5 output, "
          "or a file at its path that is not HDF5")
        .short_option("f"),
    w.force);
  v(field("compression", "HDF5 gzip level 0-9 (default 0)").from(0, 9).check_when_given(),
    w.compression);
  v(field("no_clobber", "fail if the output file exists (HDF5 too: nothing is added to it)"),
    w.no_clobber);
  v(field("sync", "fsync outputs before renaming them into place"), w.sync);
}

}  // namespace posenc
