#pragma once
/// \file
/// Typed errors thrown by the posenc library. The library never prints or exits;
/// the CLI maps each type to an exit status (see `exit_status`).

#include <stdexcept>
#include <string>

namespace posenc {

/// Exit statuses of the posenc command (CLI.md): stable, scripted against.
enum class ExitStatus : int {
  kOk = 0,
  kDiffer = 1,      ///< `compare` only: the tensors differ
  kUsage = 2,       ///< unknown option, bad value, missing argument
  kBadInput = 3,    ///< unreadable, malformed or inconsistent data
  kOutput = 4,      ///< output could not be written
  kInternal = 70,   ///< a bug: an exception we did not expect
};

/// Base of all posenc errors. `what()` is a complete one-line message that names the
/// file, option or shape involved, without the `posenc: error:` prefix.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// The exit status the command reports this error with.
  virtual ExitStatus status() const noexcept = 0;
};

/// A bad option value or an inconsistent combination of options (exit 2).
class UsageError : public Error {
 public:
  using Error::Error;
  ExitStatus status() const noexcept override { return ExitStatus::kUsage; }  ///< 2
};

/// Unreadable, malformed or inconsistent input data (exit 3).
class InputError : public Error {
 public:
  using Error::Error;
  ExitStatus status() const noexcept override { return ExitStatus::kBadInput; }  ///< 3
};

/// An output that could not be created or written (exit 4).
class OutputError : public Error {
 public:
  using Error::Error;
  ExitStatus status() const noexcept override { return ExitStatus::kOutput; }  ///< 4
};

}  // namespace posenc
