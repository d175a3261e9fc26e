"""posenc for a test that runs it as another user (nobody), wherever the build lives.

The build's binary may sit under a folder only its owner may enter (a clone in /root, or
under any 0700 parent): exec as nobody then fails with EACCES before posenc runs. So such
a test runs a copy in a fresh folder under /tmp (0755), laid out as `cmake --install`
lays it out: bin/posenc, and the manual in share/man/man1, where posenc looks for it
relative to itself. The libraries posenc links or dlopens (libhdf5, OpenBLAS, ...) are
the system's, which every user can read; LeakSanitizer's suppressions file (named in
LSAN_OPTIONS, in the clone) goes along with the copy. Where even the copy cannot be run by that user
(/tmp mounted noexec, no such user), the test is skipped with a printed "SKIP: <reason>"
line, which .ci/test lists.
"""
import atexit
import os
import pwd
import shutil
import subprocess
import tempfile

from posenc_testlib import BIN, SOURCE_DIR

_copies = {}


def _copy_tree(src, dst):
    """src's files into dst, readable by everyone (the clone's modes may be 0600)."""
    os.makedirs(dst, exist_ok=True)
    os.chmod(dst, 0o755)
    for name in os.listdir(src):
        path = os.path.join(src, name)
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(dst, name))
            os.chmod(os.path.join(dst, name), 0o644)


def _install_copy():
    """bin/posenc and share/man/man1 in a new folder under /tmp that everyone can enter;
    removed when the test process exits."""
    root = tempfile.mkdtemp(prefix="posenc-other-user-", dir="/tmp")
    atexit.register(shutil.rmtree, root, True)
    os.chmod(root, 0o755)
    os.mkdir(os.path.join(root, "bin"))
    os.chmod(os.path.join(root, "bin"), 0o755)
    exe = os.path.join(root, "bin", "posenc")
    shutil.copyfile(shutil.which(BIN) or BIN, exe)
    os.chmod(exe, 0o755)
    man = os.path.join(SOURCE_DIR, "man")
    if os.path.isdir(man):
        for d in ("share", "share/man"):
            os.mkdir(os.path.join(root, d))
            os.chmod(os.path.join(root, d), 0o755)
        _copy_tree(man, os.path.join(root, "share", "man", "man1"))
    _move_lsan_suppressions(root)
    return exe


def _move_lsan_suppressions(root):
    """Points LSAN_OPTIONS (this process's, so every posenc it starts) at a copy of its
    suppressions file in `root`: a sanitized posenc run as another user that cannot read
    the file would stop at start."""
    opts = os.environ.get("LSAN_OPTIONS", "").split(":")
    for i, opt in enumerate(opts):
        if opt.startswith("suppressions=") and os.path.isfile(opt[len("suppressions="):]):
            copy = os.path.join(root, "lsan.supp")
            shutil.copyfile(opt[len("suppressions="):], copy)
            os.chmod(copy, 0o644)
            opts[i] = "suppressions=" + copy
            os.environ["LSAN_OPTIONS"] = ":".join(opts)


def as_user(name):
    """A preexec_fn that becomes user `name` (its uid, primary gid, no other groups)."""
    entry = pwd.getpwnam(name)

    def drop():
        os.setgroups([])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    return drop


def posenc_for(test, user="nobody"):
    """The path of a posenc that `user` can run (a copy, made once per process), or
    test.skipTest with a printed "SKIP:" line when there can be none. Call as root."""
    try:
        drop = as_user(user)
    except KeyError:
        reason = f"no user {user!r} to run posenc as"
        print(f"SKIP: {reason}", flush=True)
        test.skipTest(reason)
    if user not in _copies:
        _copies[user] = _install_copy()
    exe = _copies[user]
    try:
        probe = subprocess.run([exe, "--version"], capture_output=True, preexec_fn=drop,
                               cwd="/", timeout=60)
        why = probe.stderr.decode("utf-8", "replace").strip() or f"exit {probe.returncode}"
    except OSError as e:  # the exec itself failed (EACCES: /tmp noexec, ...)
        probe, why = None, str(e)
    if probe is None or probe.returncode != 0:
        reason = f"{user} cannot run a copy of posenc in {os.path.dirname(exe)}: {why}"
        print(f"SKIP: {reason}", flush=True)
        test.skipTest(reason)
    return exe
