"""Process 1 of a local sandbox command's namespaces (standard library only).

The local provider starts every shell command as ``python -I -S
_ns_launcher.py`` with its spec (JSON) on stdin, read up to end of file. The
launcher opens the thread's directories, forks a child that enters a new user
namespace whose root the launcher maps to an unprivileged user outside
(``spec["uid"]``, by default ``nobody`` when the server is root, else the
server's own user; never host root, so the process limit holds and no host
file is the sandbox's own), then new mount, pid, IPC, UTS and network
namespaces. Process 1 of the new pid namespace then:

1. builds a new root on a small tmpfs: the system directories (``/usr`` and
   the ``/bin``, ``/lib*``, ``/sbin`` links or directories) bound read-only,
   a minimal ``/etc`` (name service, linker, certificates; never ``shadow``
   or the host's private files), a private ``/dev`` with the harmless device
   nodes, a ``/proc`` of the new pid namespace (so no other process of the
   host is visible) with the kernel knobs masked or read-only, the thread's
   ``/tmp``, its ``/mnt/user-data`` (read-write) and ``/mnt/skills``
   (read-only), and nothing else;
2. pivots into it and detaches the host's mount tree;
3. applies the resource limits (processes, address space, CPU time, file
   size), drops every capability (bounding, inheritable and ambient sets
   cleared, ``no_new_privs`` set), and makes itself undumpable;
4. becomes ``shell -c command`` (so the shell is process 1) with the given
   environment. When the shell exits, the kernel kills everything still
   running in the pid namespace, so no background process outlives its
   command; the launcher outside waits and passes the exit status on.

With ``"probe": true`` it does steps 1-3 and exits 0 (the provider checks at
start that the machine allows all of it).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LAST_CAP = 63
# statvfs f_flag bits -> mount flags that a remount inside a user namespace must keep.
_LOCKED_FLAGS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC))
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
PROC_MASKED = (
    "kcore",
    "keys",
    "latency_stats",
    "sched_debug",
    "sysrq-trigger",
    "timer_list",
    "kallsyms",
)
PROC_READ_ONLY = ("sys", "irq", "bus", "fs", "asound", "acpi", "scsi")

_libc = ctypes.CDLL(None, use_errno=True)


class LaunchError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise LaunchError(f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags: int, data=None) -> None:
    _check(
        _libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {source} on {target}",
    )


def _bind(source: str, target: str, *, read_only: bool, extra: int = 0) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | extra | (MS_RDONLY if read_only else 0)
    info = os.statvfs(source)
    for bit, flag in _LOCKED_FLAGS:
        if info.f_flag & bit:
            flags |= flag
    _mount(None, target, None, flags)


def _make_like(source: str, target: str) -> bool:
    """Create ``target`` as what ``source`` is (link, dir or file); False if absent."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return False
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
        return True
    if os.path.exists(source):
        with open(target, "a"):
            pass
        return True
    return False


def build_root(spec: dict) -> None:
    root = spec["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=755")
    for name in SYSTEM_DIRS:
        if _make_like("/" + name, f"{root}/{name}"):
            _bind("/" + name, f"{root}/{name}", read_only=True)
    os.mkdir(f"{root}/etc", 0o755)
    for name in ETC_ENTRIES:
        if _make_like(f"/etc/{name}", f"{root}/etc/{name}"):
            _bind(f"/etc/{name}", f"{root}/etc/{name}", read_only=True)
    with open(f"{root}/etc/hostname", "w") as handle:
        handle.write("sandbox\n")
    # /dev: a few harmless nodes bound from the host, nothing else.
    os.mkdir(f"{root}/dev", 0o755)
    _mount("tmpfs", f"{root}/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for name in DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            with open(f"{root}/dev/{name}", "a"):
                pass
            _bind(f"/dev/{name}", f"{root}/dev/{name}", read_only=False, extra=MS_NOSUID)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{root}/dev/{name}")
    os.mkdir(f"{root}/dev/shm", 0o1777)
    _mount("tmpfs", f"{root}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    # /proc of this pid namespace: only the command's own processes.
    os.mkdir(f"{root}/proc", 0o555)
    _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_MASKED:
        if os.path.isfile(f"{root}/proc/{name}"):
            _bind("/dev/null", f"{root}/proc/{name}", read_only=True, extra=MS_NOSUID)
    for name in PROC_READ_ONLY:
        if os.path.isdir(f"{root}/proc/{name}"):
            _bind(f"{root}/proc/{name}", f"{root}/proc/{name}", read_only=True)
    os.mkdir(f"{root}/tmp", 0o1777)
    if spec.get("tmp"):
        _bind(spec["tmp"], f"{root}/tmp", read_only=False, extra=MS_NOSUID | MS_NODEV)
    else:
        _mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777")
    os.makedirs(f"{root}/mnt/user-data", 0o755)
    if spec.get("user_data"):
        _bind(
            spec["user_data"], f"{root}/mnt/user-data", read_only=False, extra=MS_NOSUID | MS_NODEV
        )
    if spec.get("skills"):
        os.mkdir(f"{root}/mnt/skills", 0o755)
        _bind(spec["skills"], f"{root}/mnt/skills", read_only=True, extra=MS_NOSUID | MS_NODEV)
    # Freeze the new root's own tmpfs, then make it "/" and drop the host's tree.
    _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise LaunchError(f"pivot_root: unknown system call number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the host's mount tree")
    os.chdir("/")


def apply_limits(limits: dict) -> None:
    for name, key in (
        ("RLIMIT_NPROC", "max_processes"),
        ("RLIMIT_AS", "max_memory_bytes"),
        ("RLIMIT_CPU", "max_cpu_seconds"),
        ("RLIMIT_FSIZE", "max_file_bytes"),
        ("RLIMIT_NOFILE", "max_open_files"),
    ):
        value = limits.get(key)
        if value:
            hard = int(value) + 1 if name == "RLIMIT_CPU" else int(value)  # SIGXCPU first
            resource.setrlimit(getattr(resource, name), (int(value), hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges() -> None:
    """No capability survives the exec of the command, and none can be regained."""
    for cap in range(_LAST_CAP + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _check(-1, f"drop capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "undumpable")
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "clear capabilities")


def _stdin_to_null() -> None:
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _shell(spec: dict) -> str:
    for candidate in (spec.get("shell") or "/bin/bash", "/bin/sh"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1


def _unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({what})")


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _write_maps(pid: int, uid: int, gid: int) -> None:
    """Map root of the child's user namespace to (uid, gid) outside (we are its parent)."""
    if os.geteuid() != 0:
        with open(f"/proc/{pid}/setgroups", "w") as handle:
            handle.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as handle:
        handle.write(f"0 {uid} 1\n")
    with open(f"/proc/{pid}/gid_map", "w") as handle:
        handle.write(f"0 {gid} 1\n")


def _exit_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _wait(pid: int) -> int:
    while True:
        try:
            return _exit_status(os.waitpid(pid, 0)[1])
        except InterruptedError:
            continue


def isolate(spec: dict) -> int:
    """Enter fresh namespaces as an unprivileged user; process 1 there runs the command."""
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(mapped_w)
        _die_with_parent()
        try:
            _unshare(CLONE_NEWUSER, "user")
            os.write(ready_w, b"u")
            if os.read(mapped_r, 1) != b"m":
                raise LaunchError("the user namespace was not mapped")
            flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
            if not spec.get("network"):
                flags |= CLONE_NEWNET
            _unshare(flags, "mount/pid/ipc/uts/net")
            # Open the thread's directories while still the server's user on the host
            # (the sandbox's user may not walk the host path to them). CLOEXEC: they
            # never reach the shell.
            for key in ("user_data", "tmp", "skills"):
                if spec.get(key):
                    try:
                        fd = os.open(spec[key], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    except FileNotFoundError:
                        if key != "skills":  # a configured but missing skills dir: no /mnt/skills
                            raise
                        spec[key] = None
                        continue
                    spec[key] = f"/proc/self/fd/{fd}"
            os.setgroups([])
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
        except (LaunchError, OSError) as exc:
            os.write(2, f"sandbox: isolation setup failed: {exc}\n".encode())
            os._exit(125)
        init = os.fork()
        if init == 0:
            _die_with_parent()
            os._exit(_as_init(spec))
        os._exit(_wait(init))
    os.close(ready_w)
    os.close(mapped_r)
    try:
        if os.read(ready_r, 1) == b"u":
            _write_maps(child, int(spec["uid"]), int(spec["gid"]))
            os.write(mapped_w, b"m")
    except OSError as exc:
        os.write(
            2, f"sandbox: isolation setup failed: cannot map the user namespace: {exc}\n".encode()
        )
        os.kill(child, signal.SIGKILL)
    os.close(mapped_w)
    return _wait(child)


def _as_init(spec: dict) -> int:
    try:
        build_root(spec)
        _check(_libc.sethostname(b"sandbox", 7), "sethostname")
        apply_limits(spec.get("limits") or {})
        drop_privileges()
        _stdin_to_null()
    except (LaunchError, OSError) as exc:
        os.write(2, f"sandbox: isolation setup failed: {exc}\n".encode())
        return 125
    if spec.get("probe"):
        return 0
    # The shell itself becomes process 1: when it exits, the namespace ends and
    # the kernel kills what is left; nothing of this launcher stays visible.
    try:
        os.chdir(spec.get("cwd") or "/")
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        shell = _shell(spec)
        os.execve(shell, [shell, "-c", spec["command"]], spec["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot start the shell: {exc}\n".encode())
    return 127


def main() -> int:
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    if not spec.get("isolate") and not spec.get("probe"):
        # No namespaces: limits only, then become the shell (the provider kills its group).
        apply_limits(spec.get("limits") or {})
        _stdin_to_null()
        os.chdir(spec.get("cwd") or "/")
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        shell = _shell(spec)
        os.execve(shell, [shell, "-c", spec["command"]], spec["env"])
    return isolate(spec)


if __name__ == "__main__":
    sys.exit(main())
