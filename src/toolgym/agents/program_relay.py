"""The launcher of an untrusted agent program inside its jail (standard library only: it runs there as
``python -I -c SOURCE``, never imported by toolgym at run time).

Why: the jail has no network (its own network namespace holds only ``lo``), yet the program expects an
OpenAI endpoint at a ``base_url``. This relay listens on the jail's own loopback and copies each connection
to the recording proxy's Unix socket, the one path bound into the jail; then it starts the program with
``OPENAI_BASE_URL`` pointing at itself and exits with the program's status (it is the jail's PID 1, so
everything the program left behind dies with it).

    python -I -c SOURCE SOCKET -- PROGRAM ARGS...
"""

import os
import socket
import subprocess
import sys
import threading


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def serve(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(path)
        except OSError:
            conn.close()
            up.close()
            continue
        for a, b in ((conn, up), (up, conn)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def main(argv: list[str]) -> int:
    path, sep, program = argv[0], argv[1], argv[2:]
    if sep != "--" or not program:
        print("usage: relay SOCKET -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    env = dict(os.environ, OPENAI_BASE_URL=f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    return subprocess.call(program, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
