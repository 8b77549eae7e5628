"""The local sandbox's seccomp filter: a classic-BPF program for bubblewrap's --seccomp FD.

Built on the host with the standard library (no libseccomp). bubblewrap loads it (after setting
no_new_privs) right before it executes the sandbox's first process, so it holds for
the executor and everything it starts. x86_64 only: any other architecture in
`seccomp_data.arch` (e.g. 32-bit syscalls through `int 0x80`) kills the process, and
x32 syscall numbers (bit 30 set) are refused.

Denied with EPERM: namespace and mount syscalls (unshare, setns, mount, the new mount
API, pivot_root, chroot; `clone` with any CLONE_NEW* flag), cross-process access
(ptrace, process_vm_readv/writev, pidfd_getfd), kernel-wide state (modules, kexec, bpf,
perf_event_open, keyrings, reboot, swap, clocks, quotas, acct, syslog, iopl/ioperm),
userfaultfd, io_uring, handle-based opens, personality changes (only the query
personality(0xffffffff) and personality(0) pass), vhangup, lookup_dcookie. `clone3`
gets ENOSYS, so libc falls back to `clone`, whose flags the filter can read.
Denied with ENOLCK ("no locks available"): taking a file lock (`flock`, and `fcntl` F_SETLK,
F_SETLKW and their open-file-description forms). The sandbox's /usr, /etc and interpreter are the
host's files, bound by inode into every local sandbox: a lock taken there is seen from every other
sandbox, a channel between programs judged at the same time (red team round 5, x06: a solver locked
one stdlib file per bit of its answer and a copier read them). Locks on a sandbox's own files carry
nothing anyone else could read, but no program needs them to be judged, so none is taken. For the same
reason watches on files are refused (EPERM: inotify, fanotify, fcntl F_NOTIFY and F_SETLEASE: a watch
on a /usr file saw another sandbox open it), and `io_setup` gets ENOSYS (the host's count of AIO
contexts is readable in every sandbox).
Everything else is allowed.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

from toolgym.errors import SandboxUnavailable

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
OFF_NR, OFF_ARCH, OFF_ARG0_LO, OFF_ARG1_LO = 0, 4, 16, 24  # args[0]'s, args[1]'s low 32 bits (little endian)

# classic BPF opcodes
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl; checked against
# asm/unistd_64.h, open_tree_attr (6.15) against the kernel's table)
SYSCALLS_X86_64 = {
    "clone": 56, "fcntl": 72, "flock": 73, "ptrace": 101, "io_setup": 206, "inotify_init": 253,
    "inotify_add_watch": 254, "inotify_init1": 294, "fanotify_init": 300, "fanotify_mark": 301, "syslog": 103, "personality": 135, "vhangup": 153, "pivot_root": 155,
    "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
    "open_tree_attr": 467,
}

DENY_EPERM = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
    "open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "quotactl", "acct", "settimeofday", "clock_settime", "adjtimex", "iopl", "ioperm", "syslog",
    "vhangup", "lookup_dcookie",
    # watches on files: /usr and the interpreter are the host's, shared by inode with every local sandbox,
    # so a watch there sees another sandbox's opens (round-6 red team y05, y09)
    "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
)
# io_setup: the host-wide count of AIO contexts is readable (/proc/sys/fs/aio-nr) in every sandbox (y03)
DENY_ENOSYS = ("clone3", "io_setup")
DENY_ENOLCK = ("flock",)
# fcntl commands that take a lock: F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW (F_GETLK only reads)
FCNTL_LOCKS = (6, 7, 37, 38)
# fcntl commands that watch a shared inode: F_SETLEASE, F_NOTIFY (dnotify)
FCNTL_WATCHES = (1024, 1026)

CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x80, 0x20000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
# (for the legacy clone, 0x80 lies in the exit-signal byte: no valid signal has it set)
CLONE_NS_FLAGS = (CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC
                  | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)
PERSONALITY_OK = (0, 0xFFFFFFFF)  # PER_LINUX, and the query

_INSN = struct.Struct("=HBBI")  # struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }


def check_arch() -> None:
    """Raise SandboxUnavailable (one line) unless this is x86_64, the only filter we build."""
    machine = platform.machine()
    if machine not in ("x86_64", "AMD64", "amd64"):
        raise SandboxUnavailable(
            f"the local sandbox's seccomp filter is built for x86_64 only, this machine is {machine}: "
            "use backend='docker'")


def _assemble(prog: list[tuple]) -> bytes:
    """prog: (code, jt, jf, k) with jt/jf/k as ints or label names, and ('label', name) markers."""
    labels: dict[str, int] = {}
    insns: list[tuple] = []
    for item in prog:
        if item[0] == "label":
            labels[item[1]] = len(insns)
        else:
            insns.append(item)
    out = bytearray()
    for pc, (code, jt, jf, k) in enumerate(insns):
        def rel(target: int | str, pc: int = pc) -> int:
            if isinstance(target, int):
                return target
            off = labels[target] - pc - 1
            if not 0 <= off <= 255:
                raise ValueError(f"jump to {target} out of range ({off})")
            return off
        out += _INSN.pack(code, rel(jt), rel(jf), k)
    return bytes(out)


def program() -> bytes:
    """The filter as packed struct sock_filter[] (native endian), ready for --seccomp."""
    nr = SYSCALLS_X86_64
    p: list[tuple] = [
        (BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        (BPF_JEQ_K, 0, "kill", AUDIT_ARCH_X86_64),
        (BPF_LD_W_ABS, 0, 0, OFF_NR),
        (BPF_JGE_K, "eperm", 0, X32_SYSCALL_BIT),  # x32 ABI (and nr < 0)
    ]
    p += [(BPF_JEQ_K, "eperm", 0, nr[name]) for name in DENY_EPERM]
    p += [(BPF_JEQ_K, "enosys", 0, nr[name]) for name in DENY_ENOSYS]
    p += [(BPF_JEQ_K, "enolck", 0, nr[name]) for name in DENY_ENOLCK]
    p += [
        (BPF_JEQ_K, "fcntl", 0, nr["fcntl"]),
        (BPF_JEQ_K, "clone", 0, nr["clone"]),
        (BPF_JEQ_K, "personality", "allow", nr["personality"]),
        ("label", "clone"),
        (BPF_LD_W_ABS, 0, 0, OFF_ARG0_LO),
        (BPF_JSET_K, "eperm", "allow", CLONE_NS_FLAGS),
        ("label", "fcntl"),
        (BPF_LD_W_ABS, 0, 0, OFF_ARG1_LO),
        *[(BPF_JEQ_K, "enolck", 0, cmd) for cmd in FCNTL_LOCKS],
        *[(BPF_JEQ_K, "eperm", 0, cmd) for cmd in FCNTL_WATCHES],
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ("label", "personality"),
        (BPF_LD_W_ABS, 0, 0, OFF_ARG0_LO),
        (BPF_JEQ_K, "allow", 0, PERSONALITY_OK[0]),
        (BPF_JEQ_K, "allow", "eperm", PERSONALITY_OK[1]),
        ("label", "allow"),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ("label", "eperm"),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
        ("label", "enolck"),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOLCK),
        ("label", "enosys"),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        ("label", "kill"),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
    ]
    return _assemble(p)


def decode(raw: bytes) -> list[tuple[int, int, int, int]]:
    """The program as (code, jt, jf, k) tuples (for tests and debugging)."""
    return [_INSN.unpack_from(raw, i) for i in range(0, len(raw), _INSN.size)]


def evaluate(raw: bytes, nr: int, args: tuple[int, ...] = (), arch: int = AUDIT_ARCH_X86_64) -> int:
    """Run the program on one seccomp_data in Python (a tiny cBPF interpreter; tests use it)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = decode(raw)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == BPF_LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == BPF_RET_K:
            return k
        elif code in (BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K):
            hit = {BPF_JEQ_K: acc == k, BPF_JGE_K: acc >= k, BPF_JSET_K: bool(acc & k)}[code]
            pc += jt if hit else jf
        else:
            raise ValueError(f"unknown opcode {code:#x}")
        pc += 1


def program_fd() -> int:
    """A readable fd holding the program (a pipe, written and closed), for bwrap --seccomp.

    The fd is not inheritable: pass it with Popen(pass_fds=...) and close it afterwards."""
    raw = program()
    r, w = os.pipe()
    try:
        if len(raw) > 65536:  # pragma: no cover - a pipe buffer holds far more than the filter
            raise ValueError("seccomp program too large for a pipe")
        os.write(w, raw)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r
