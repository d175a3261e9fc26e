"""What the Python benchmarks share: the machine and load they ran on, and a timed run.

Scripts in bench/*/ import it with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
"""
import os
import resource
import subprocess
import time


def mount_of(path):
    """(mount point, file system type, options) of the mount holding `path`."""
    path = os.path.realpath(path)
    best = ("", "?", "")
    with open("/proc/mounts") as f:
        for line in f:
            _, mnt, typ, opts = line.split()[:4]
            if ((path == mnt or path.startswith(mnt.rstrip("/") + "/"))
                    and len(mnt) > len(best[0])):
                best = (mnt, typ, opts)
    return best


def fs_type(path):
    """The file system type of the mount that holds `path`."""
    return mount_of(path)[1]


def fs_label(path):
    """The file system type of `path`'s mount, and for tmpfs its huge page setting
    (huge=never unless the mount says otherwise): mapped tmpfs files are faulted in
    4 KiB pages without it."""
    _, typ, opts = mount_of(path)
    if typ != "tmpfs":
        return typ
    huge = [o for o in opts.split(",") if o.startswith("huge=")]
    return f"tmpfs {huge[0] if huge else 'huge=never'}"


def cpu_name():
    """The CPU as figures must name it: model name, family and model (a cloud CPU may be
    called just "AMD EPYC"), and the vector extensions the kernels choose between."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    flags = set(info.get("flags", "").split())
    isa = [x for x in ("avx2", "avx512f", "avx512_fp16") if x in flags]
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')}, "
            f"model {info.get('model', '?')}; {' '.join(isa) or 'no AVX2'})")


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed(cmd):
    """(wall seconds, CPU seconds: user + system) of running cmd; exits if it fails."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True)
    t = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.decode()}")
    return t, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
