"""`toolgym rollouts view FILE [--out page.html] [--serve]`: the rollout viewer (docs/viewer.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from toolgym.errors import ConfigError


def view(
    file: Path = typer.Argument(..., help="a JSONL rollout file (`toolgym rollout`, or a training step's)"),
    out: Path = typer.Option(None, "--out", help="write a page that opens from disk: a .html file, or a folder "
                                                 "(gets FILE's name with .html; default: beside FILE)"),
    serve: bool = typer.Option(False, "--serve", help="serve the page on 127.0.0.1 instead (for big files)"),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="--serve: the port (0: any free one)"),
    page_size: int = typer.Option(20, "--page-size", min=1, max=200, help="episodes per page of the list"),
    inline_mb: float = typer.Option(8.0, "--inline-mb", min=0.0,
                                    help="--out: episode data up to this size goes inside the page; more goes "
                                         "into a folder of chunks beside it"),
    as_json: bool = typer.Option(False, "--json", help="say what was written (or where it serves) as one JSON line"),
) -> None:
    """Look at episodes in a browser: groups, rewards, the chat turn by turn with tool calls and results,
    and for training steps each token's behaviour log-prob, advantage and clipping."""
    from toolgym.agents.token_text import read_token_text
    from toolgym.viewer.index import build_index

    if serve and out is not None:
        raise ConfigError("--out and --serve: choose one (a page on disk, or a server on 127.0.0.1)")
    index = build_index(file)
    pieces = read_token_text(file)
    if serve:
        from toolgym.viewer.server import ViewerServer

        try:
            server = ViewerServer(index, pieces, port=port, page_size=page_size)
        except OSError as exc:
            raise ConfigError(f"--port {port}: cannot listen on 127.0.0.1 ({exc.strerror}); "
                              "pick another port, or --port 0 for any free one") from exc
        if as_json:
            typer.echo(json.dumps({"url": server.url, "episodes": len(index), "file": str(file)}))
        else:
            typer.echo(f"{len(index)} episodes of {file} at {server.url} (Ctrl-C stops)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return
    from toolgym.viewer.static import write_static

    res = write_static(index, page_path(file, out), pieces,
                       inline_limit=int(inline_mb * (1 << 20)), page_size=page_size)
    if as_json:
        typer.echo(json.dumps({"page": str(res.page), "data_dir": str(res.data_dir) if res.data_dir else None,
                               "chunks": res.chunks, "episodes": res.episodes}))
        return
    where = f", episode data in {res.data_dir}/ ({res.chunks} chunks: keep it beside the page)" if res.data_dir else ""
    typer.echo(f"wrote {res.page}: {res.episodes} episodes{where}")


def page_path(file: Path, out: Path | None) -> Path:
    """Where the page goes: ``out`` when it names a .html file, ``out/<FILE's name>.html`` when it is a folder
    (one that exists, or a name without a suffix), else FILE with .html."""
    if out is None:
        return file.with_suffix(".html")
    if out.suffix.lower() in (".html", ".htm") and not out.is_dir():
        return out
    if (out.exists() or out.suffix) and not out.is_dir():
        raise ConfigError(f"--out must name an .html file or a folder, got {out}")
    return out / file.with_suffix(".html").name
