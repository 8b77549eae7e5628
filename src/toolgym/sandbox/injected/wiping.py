"""Emptying a directory a program wrote in, through directory descriptors: no path grows with the depth,
no symlink is followed, and a process that moves dirs around meanwhile cannot redirect it. Stdlib only."""

import os
import sys


def wipe(path, spare=(), protected=lambda path: False):
    """Empty the directory `path` (not removing it) through directory descriptors: no path
    grows with the depth, no symlink is followed, a dir made unreadable is made readable
    first, and every step back up checks it returns to the dir it came from (a live
    process could move dirs around). Top-level names in `spare`, and `protected` paths,
    stay. True if everything else is gone."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return True  # no such place in this sandbox
    chain = []  # (name, (dev, ino) of its parent) for every dir we are inside, below `path`
    clean = True
    stuck = set()  # (depth, name) that could not be removed
    try:
        while True:
            subdir = None
            with os.scandir(fd) as it:
                for e in it:
                    if not chain and (e.name in spare or protected(os.path.join(path, e.name))):
                        continue
                    if (len(chain), e.name) in stuck:
                        continue
                    try:
                        if e.is_dir(follow_symlinks=False):
                            try:
                                os.rmdir(e.name, dir_fd=fd)
                            except OSError:
                                subdir = e.name
                                break
                        else:
                            os.unlink(e.name, dir_fd=fd)
                    except OSError:
                        stuck.add((len(chain), e.name))
                        clean = False
            if subdir is not None:
                try:  # through an O_PATH descriptor: never a symlink put in its place
                    pfd = os.open(subdir, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
                    try:
                        os.chmod(f"/proc/self/fd/{pfd}", 0o700)
                    finally:
                        os.close(pfd)
                except OSError:
                    pass
                try:
                    child = os.open(subdir, flags, dir_fd=fd)
                except OSError:
                    stuck.add((len(chain), subdir))
                    clean = False
                    continue
                st = os.fstat(fd)
                os.close(fd)
                fd = child
                chain.append((subdir, (st.st_dev, st.st_ino)))
                continue
            if not chain:
                return clean
            name, parent_id = chain.pop()
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != parent_id:
                return False  # moved under us: stop; the caller reports the sandbox unclean
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((len(chain), name))
                clean = False
    finally:
        os.close(fd)


def protector(workroot):
    """What a wipe must leave: the work root itself, and the interpreter's read-only prefix where
    it is re-exposed under a wiped dir (an interpreter living under /tmp, e.g. a CI clone)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} | {
        sys.prefix, sys.base_prefix, sys.exec_prefix}

    def protected(path):
        return path == workroot or any(p == path or p.startswith(path + "/") for p in prefixes)

    return protected


def listing(path, spare=(), protected=lambda path: False):
    try:
        return [n for n in os.listdir(path) if n not in spare and not protected(os.path.join(path, n))]
    except OSError:
        return []
