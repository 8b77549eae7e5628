"""`toolgym sandbox`: run code in the sandbox, say which backend `auto` picks, build the image.

    toolgym sandbox run [--backend B] [-l python|cpp|bash] -c CODE [--stdin S] [--timeout T] [--json]
    toolgym sandbox doctor [--json]
    toolgym sandbox build-image [--force] [--method debootstrap|dockerfile] [--mirror URL]
"""

from __future__ import annotations

import json
import sys

import typer

from toolgym._text import printable

app = typer.Typer(no_args_is_help=True, help="Run code in the sandbox; check or build the image.")


def _fail(msg: str) -> None:
    typer.echo(printable(f"error: {msg}"), err=True)  # errors quote files, plug-ins and program text
    raise typer.Exit(2)


@app.command("run")
def run_cmd(
    code: str = typer.Option(..., "-c", "--code", help="program text ('-' reads it from stdin)"),
    backend: str = typer.Option("auto", "--backend", "-b", help="auto, docker or local"),
    language: str = typer.Option("python", "--language", "-l", help="python, cpp or bash"),
    stdin: str = typer.Option("", "--stdin", help="text given to the program on stdin"),
    timeout: float = typer.Option(10.0, "--timeout", help="wall-clock limit in seconds"),
    memory_mb: int = typer.Option(512, "--memory-mb", help="memory limit"),
    as_json: bool = typer.Option(False, "--json", help="print the ExecResult as JSON"),
) -> None:
    """Run one program in a fresh sandbox and print its output (exit status mirrors the program's)."""
    from toolgym.errors import ToolgymError
    from toolgym.sandbox import Limits, open_sandbox

    if code == "-":
        code = sys.stdin.read()
    try:
        limits = Limits(timeout_s=timeout, memory_mb=memory_mb)
        with open_sandbox(backend, limits, pool_size=1) as sb:
            r = sb.run(code, language=language, stdin=stdin)
    except (ToolgymError, ValueError) as exc:
        _fail(str(exc))
        return
    if as_json:
        typer.echo(json.dumps({"backend": sb.backend, **r.to_dict()}, indent=2))
    else:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.status != "ok":
            typer.echo(f"[{sb.backend}] status={r.status} exit_code={r.exit_code}", err=True)
    raise typer.Exit(0 if r.status == "ok" else 1)


@app.command("doctor")
def doctor_cmd(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Say which backend `auto` picks here, and why."""
    from toolgym.sandbox.doctor import doctor_report

    rep = doctor_report()
    if as_json:
        typer.echo(json.dumps(rep, indent=2))
        return
    d, loc = rep["docker"], rep["local"]
    typer.echo(f"auto -> {rep['auto'] or 'none'}: {rep['reason']}")
    typer.echo(f"docker: engine={'yes' if d['engine'] else 'no'} image={d['image']} "
               f"present={'yes' if d['image_present'] else 'no'}" + (f" ({d['error']})" if d["error"] else ""))
    cg = ", ".join(k for k, v in loc["cgroups"].items() if v) or "none"
    typer.echo(f"local: tool={loc['tool'] or 'none'} root={'yes' if loc['root'] else 'no'} cgroups={cg} "
               f"({loc['isolation']})")


@app.command("build-image")
def build_image_cmd(
    force: bool = typer.Option(False, "--force", help="rebuild even if the tag exists"),
    method: str = typer.Option("debootstrap", "--method", help="debootstrap (offline, apt mirror) or dockerfile"),
    mirror: str = typer.Option("http://deb.debian.org/debian", "--mirror", help="Debian mirror for debootstrap"),
) -> None:
    """Build the sandbox image (debootstrap + docker import); skipped if the tag exists."""
    from toolgym.errors import ToolgymError
    from toolgym.sandbox.image import build_image

    try:
        name = build_image(force=force, method=method, mirror=mirror, log=lambda m: typer.echo(m, err=True))
    except ToolgymError as exc:
        _fail(str(exc))
        return
    typer.echo(name)
