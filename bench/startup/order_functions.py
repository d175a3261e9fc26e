#!/usr/bin/python3
"""Writes cmake/startup-order.ld: the functions light commands run, laid out together.

  cmake -S . -B build-nolayout -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOSENC_STARTUP_LAYOUT=OFF
  cmake --build build-nolayout --target posenc
  /usr/bin/python3 bench/startup/order_functions.py build-nolayout/posenc > cmake/startup-order.ld

The posenc profiled must be linked without the layout (POSENC_STARTUP_LAYOUT=OFF):
valgrind does not name the functions of the laid-out section, and the list would
shrink to a few dozen entries.

Runs the given posenc under callgrind for the commands that must start fast (--version,
help, small tables to NPY, inspect, rope, compare, convert of small NPY files, a usage
error) and lists, in the order callgrind first records them, the functions executed in
the posenc executable. The output is a GNU ld script fragment (INSERT BEFORE .text) that
places their input sections (the build compiles with -ffunction-sections; libstdc++.a
is built that way too) in one output section at the start of the text: the kernel then
maps them with a few fault-around reads instead of one page fault per function spread
over 4.7 MB of text. For archive members not built with function sections (libgomp,
libgcc's CPU detection) the member's whole text is listed.

A stale list only costs speed: sections it names that no longer exist match nothing,
and new functions stay in .text. Regenerate after large changes to the start-up path.
"""
import os
import re
import subprocess
import sys
import tempfile

COMMANDS = [
    ["--version"],
    ["--help"],
    ["table", "--help"],
    ["table", "sinusoidal", "--positions", "16", "--dim", "8", "-o", "{d}/t1.npy"],
    ["table", "rope", "--positions", "16", "--dim", "8", "-o", "{d}/t2.npy"],
    ["inspect", "{d}/x.npy"],
    ["rope", "{d}/x.npy", "-o", "{d}/y.npy"],
    ["compare", "{d}/x.npy", "{d}/x.npy"],
    ["convert", "{d}/x.npy", "-o", "{d}/x.csv"],
    ["table", "sinusoidal", "--postions", "16"],
]
# Archives linked into the executable whose objects have one .text section each.
ARCHIVES = ["libgomp.a", "libgcc.a"]


def executed(posenc, out):
    """Mangled names of the functions callgrind saw run in the posenc executable."""
    names = {}  # ("ob" or "fn", id) -> name; a name is given at an id's first use
    order = []
    current = None
    for line in open(out):
        m = re.match(r"^c?(ob|fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        kind, i, name = m.groups()
        if name:
            names[kind, i] = name
        if line.startswith("ob="):
            current = os.path.realpath(names[kind, i])
        elif line.startswith("fn=") and current == posenc:
            order.append(names[kind, i])
    return order


def archive_members(archive):
    """{function name: archive member} for the archive as the compiler finds it."""
    path = subprocess.run(["g++", f"-print-file-name={archive}"], capture_output=True,
                          text=True).stdout.strip()
    members = {}
    if not os.path.isabs(path):
        return members
    nm = subprocess.run(["nm", "-A", path], capture_output=True, text=True).stdout
    for line in nm.splitlines():
        m = re.match(r"^[^:]+:([^:]+):[0-9a-f]+ [Tt] (\S+)$", line)
        if m:
            members.setdefault(m.group(2), m.group(1))
    return members


def main():
    posenc = os.path.realpath(sys.argv[1])
    sections = subprocess.run(["readelf", "-SW", posenc], capture_output=True, text=True).stdout
    if ".text.posenc_startup" in sections:
        sys.exit(f"{sys.argv[1]} is linked with the start-up layout, whose functions valgrind "
                 "does not name: profile a build configured with -DPOSENC_STARTUP_LAYOUT=OFF")
    with tempfile.TemporaryDirectory() as d:
        import numpy as np
        np.save(f"{d}/x.npy", np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))
        functions = []
        for i, args in enumerate(COMMANDS):
            out = f"{d}/callgrind.{i}"
            subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no",
                            f"--callgrind-out-file={out}", posenc] +
                           [a.format(d=d) for a in args],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            functions += executed(posenc, out)
    members = {}
    for archive in ARCHIVES:
        members.update({f: (archive, m) for f, m in archive_members(archive).items()})
    patterns, seen = [], set()

    def add(p):
        if p not in seen:
            seen.add(p)
            patterns.append(p)

    for name in functions:
        name = re.sub(r"'\d+$", "", name)  # callgrind's recursion depth
        if not re.fullmatch(r"[A-Za-z_.$][A-Za-z0-9_.$]*", name):
            continue  # "(below main)", or an address callgrind could not name
        base = name.split(".cold")[0]
        symbol = base if base in members else base.split(".")[0]  # (x.constprop.0)
        if symbol in members:
            archive, member = members[symbol]
            add(f"*{archive}:{member}(.text .text.*)")
            continue
        if name.endswith(".cold"):
            add(f"*(.text.unlikely.{base})")
        clones = re.match(r"^(.*)\.(default|avx2|avx512f|resolver)$", base)
        if clones:
            # target_clones: valgrind's CPU has no AVX-512, so its pick is not the one
            # made here; every clone and the resolver go together.
            add(f"*(.text.{clones.group(1)}.*)")
            continue
        add(f"*(.text.{base})")
        # Constructors and destructors are emitted under their base-object names (C2,
        # D2), the complete-object ones (C1, D1, and D0 calling D1) being aliases.
        alias = re.sub(r"C1(?=[EI])", "C2", re.sub(r"D[01](?=E)", "D2", base))
        add(f"*(.text.{alias})")
    print("/* The functions light posenc commands run, laid out together at the start of the")
    print("   text. Generated by bench/startup/order_functions.py; a stale list costs only")
    print("   start-up time. */")
    print("SECTIONS")
    print("{")
    print("  .text.posenc_startup :")
    print("  {")
    for p in patterns:
        print(f"    {p}")
    print("  }")
    print("}")
    print("INSERT BEFORE .text;")


if __name__ == "__main__":
    main()
