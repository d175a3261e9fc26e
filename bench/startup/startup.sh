#!/usr/bin/env bash
# Whole-process start-up: /bin/true, `posenc --version`, a small NPY table, the same
# table written to HDF5 and inspect of that HDF5 dataset, each run RUNS times (default
# 300), the commands interleaved round-robin so that a change in machine load hits all
# of them alike. Reports medians of the wall time (and 10th/90th percentiles) and of the
# CPU time each process used, each as a ratio to /bin/true's, and the number of shared
# libraries each command loads (LD_DEBUG=files). Two C++ hello worlds (iostream), one
# linked with the shared libstdc++ and one with -static-libstdc++ -static-libgcc, show
# what the C++ runtime alone costs each way.
# With a second posenc (say, a build from before a change) its commands run in the same
# rounds.
# Usage: bench/startup/startup.sh [path/to/posenc] [runs] [path/to/other/posenc]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
posenc=${1:-$here/../../build/posenc}
runs=${2:-300}
other=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '#include <iostream>\nint main() { std::cout << "hello\\n"; }\n' >"$work/hello.cpp"
g++ -O2 "$work/hello.cpp" -o "$work/hello-shared"
g++ -O2 -static-libstdc++ -static-libgcc "$work/hello.cpp" -o "$work/hello-static"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$work" "$runs" "$posenc" $other <<'PY'
import os, re, statistics, subprocess, sys, time

work, runs, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
labels = ["posenc"] if len(bins) == 1 else ["new", "old"]

def commands(b, tag):
    npy, h5 = f"{work}/{tag}.npy", f"{work}/{tag}.h5"
    return [("--version", [b, "--version"]),
            ("table → NPY", [b, "table", "sinusoidal", "--positions", "16", "--dim", "8",
                             "-o", npy]),
            ("table → HDF5", [b, "table", "sinusoidal", "--positions", "16", "--dim", "8",
                              "-o", h5 + ":/pe", "--force"]),
            ("inspect HDF5", [b, "inspect", h5 + ":/pe"])]

jobs = [("/bin/true", ["/bin/true"]),
        ("C++ hello, shared", [f"{work}/hello-shared"]),
        ("C++ hello, static", [f"{work}/hello-static"])]
for b, label in zip(bins, labels):
    jobs += [(f"{label} {name}", argv) for name, argv in commands(b, label)]

devnull = os.open(os.devnull, os.O_RDWR)

def once(argv, env=None):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env if env is not None else os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1),
                                       (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, ru = os.wait4(pid, 0)
    t = time.perf_counter_ns() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return t / 1e6, (ru.ru_utime + ru.ru_stime) * 1e3

# The HDF5 file inspect reads, and a warm-up round.
for _, argv in jobs:
    once(argv)
times = {name: [] for name, _ in jobs}
cpu = {name: [] for name, _ in jobs}
for _ in range(runs):
    for name, argv in jobs:
        wall, used = once(argv)
        times[name].append(wall)
        cpu[name].append(used)

def libs(argv):
    p = subprocess.run(argv, env={**os.environ, "LD_DEBUG": "files"}, capture_output=True,
                       text=True)
    return len(set(re.findall(r"file=(\S+) \[\d+\];\s+(?:needed|dynamically loaded) by",
                              p.stderr)))

def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]

base = statistics.median(times["/bin/true"])
cpu_base = statistics.median(cpu["/bin/true"])
print(f"{runs} rounds. wall: fork+exec+exit as the caller waits, ms; cpu: the process's "
      "user+system time, ms (less sensitive to other load)")
print(f"{'command':<22} {'wall':>7} {'p10':>7} {'p90':>7} {'÷ true':>7} {'cpu':>7} {'÷ true':>7}"
      f" {'libs':>5}")
for name, argv in jobs:
    m, c = statistics.median(times[name]), statistics.median(cpu[name])
    print(f"{name:<22} {m:7.2f} {pct(times[name], .1):7.2f} {pct(times[name], .9):7.2f} "
          f"{m / base:7.2f} {c:7.2f} {c / cpu_base:7.2f} {libs(argv):>5}")
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
