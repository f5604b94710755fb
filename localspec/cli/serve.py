"""`localspec serve`: the speculative engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import copy
import os
import signal
import socket
from typing import Any

import click
import uvicorn
from sse_starlette.sse import AppStatus

from ..app.generation_queue import GenerationQueue
from ..app.http_protocol import H11WithHeaderDeadline
from ..app.memory import serve_owner
from ..app.serving import ServedModel, create_app
from ..app.web_origin import allowed_origin
from ..errors import InputError, LocalspecError
from ..shown import shown_name
from .common import is_loopback
from .loading import load_session, resolve_plan
from .options import (
    PROFILE_OPTION,
    TEMPLATE_VARIABLES_OPTION,
    VERBOSE_OPTION,
    WholeNumbers,
    setting_flags,
    setting_options,
    template_variables_from_option,
)


@click.command()
@PROFILE_OPTION
@setting_options(exclude=("speculative.memory", "target.prompt_cache", "draft.prompt_cache"))  # (serve keeps its models loaded)
@click.option("--memory/--no-memory", "memory", default=None,
              help="Keep a memory of what each API key's requests wrote, to draft from (off unless given).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback unless told otherwise).")
@click.option("--port", type=WholeNumbers(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", show_envvar=True,
              help="Require `Authorization: Bearer KEY` on every endpoint but /health (empty: no key).")
@click.option("--allow-origin", "allowed_origins", multiple=True, metavar="ORIGIN",
              help="A web page (https://ui.example) that may call the API beside this machine's own pages (repeatable;"
                   " '*': any page).")
@click.option("--queue", "queue_size", type=WholeNumbers(0, 1000), default=8, show_default=True,
              help="Requests that may wait while one generates; more get 429.")
@TEMPLATE_VARIABLES_OPTION
@VERBOSE_OPTION
def serve(profile: str | None, memory: bool | None, host: str, port: int, api_key: str | None,
          allowed_origins: tuple[str, ...], queue_size: int, template_kwargs: str | None, verbose: bool,
          **options: Any) -> None:
    """Serve the profile's models over an OpenAI-compatible API (/v1/chat/completions, /v1/completions).

    Settings in a request (temperature, top_p, max_tokens, stop, seed, draft_max,
    strategy, p_min, ...) override the profile's for that request; a field spelled
    nearly like one of them is refused, naming the one meant.

    It keeps no memory of what it served unless started with --memory: then
    the clients of one API key draft from what that key's requests wrote before
    (a memory per key, apart from `run` and `chat`'s).

    \b
    Examples:
      localspec serve
      localspec serve -p qwen2.5-7b --port 8000 --api-key secret
    """
    api_key = _checked_api_key(api_key, click.get_current_context().get_parameter_source("api_key")
                               == click.core.ParameterSource.ENVIRONMENT)
    variables = template_variables_from_option(template_kwargs)  # (a request's chat_template_kwargs add to them)
    allowed_origins = _checked_origins(allowed_origins)
    flags = setting_flags(options)
    if memory is not None:
        flags["speculative.memory"] = memory
    plan = resolve_plan(profile, flags, verbose=verbose)
    memory_owner = serve_owner(api_key) if memory else None  # never from a profile: the operator turns it on
    model_id = plan.profile_name or plan.target.path.stem
    if host.startswith("[") and host.endswith("]"):  # (an IPv6 address as a URL writes it, and as serve prints it)
        host = host[1:-1]
    listener = _bind(host, port)  # before loading: a taken port is one line, not a load and then uvicorn's error
    port = listener.getsockname()[1]
    if not is_loopback(host) and api_key is None:
        click.echo(f"warning: listening on {host} without --api-key: anyone who can reach it can use it", err=True)
    AppStatus.disable_automatic_graceful_drain()  # streams end themselves, with an error event, on shutdown
    with listener, load_session(plan, load_draft=plan.generation.speculative.uses_draft_model, verbose=verbose,
                                        memory_owner=memory_owner) as session:
        session.template_variables = variables
        queue = GenerationQueue(session, queue_size)
        served = ServedModel(queue, plan.generation, model_id)
        # No lifespan: the app has no start-up or shutdown hooks, and uvicorn logs a cancelled lifespan task
        # as an error traceback when Ctrl-C comes while it starts.
        app = create_app(served, api_key, allowed_origins=allowed_origins, listening_on=listener.getsockname()[0])
        config = uvicorn.Config(app, http=H11WithHeaderDeadline,
                                log_level="info" if verbose else "warning",
                                timeout_graceful_shutdown=5, lifespan="off", log_config=_log_config())
        server = uvicorn.Server(config)
        served.shutting_down = lambda: server.should_exit
        handler_before = signal.getsignal(signal.SIGINT)
        interrupted = _stop_on_ctrl_c(server)
        config.load()  # uvicorn's imports, before the word that Ctrl-C stops it
        where = f"[{host}]" if ":" in host else host  # (an IPv6 address is bracketed in a URL)
        click.echo(f"localspec: serving {model_id} at http://{where}:{port}/v1 (Ctrl-C stops)", err=True)
        try:
            server.run(sockets=[listener])
        finally:
            signal.signal(signal.SIGINT, handler_before)
            queue.close()  # the worker may still be finishing (and remembering) a reply
    if interrupted:
        raise KeyboardInterrupt


def _checked_origins(origins: tuple[str, ...]) -> tuple[str, ...]:
    """--allow-origin's values: each `*` or SCHEME://HOST[:PORT], as a browser writes an `Origin`
    (`web_origin.allowed_origin`)."""
    for origin in origins:
        try:
            allowed_origin(origin)
        except ValueError as exc:
            raise InputError(f"--allow-origin {shown_name(origin)!r}: {exc}") from None
    return origins


def _stop_on_ctrl_c(server: uvicorn.Server) -> list[int]:
    """Until uvicorn's own handler takes over (and after it hands back), Ctrl-C asks the server to stop instead of
    raising KeyboardInterrupt wherever the main thread happens to be (one raised inside an import or a finalizer
    is printed as "Exception ignored" and lost: the server then ran on); the list returned fills when it came."""
    interrupted: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        interrupted.append(signum)
        server.should_exit = True  # uvicorn, when it starts, shuts down at once

    signal.signal(signal.SIGINT, stop)
    return interrupted


def _log_config() -> dict:
    """uvicorn's logging, with its access lines (--verbose) on stderr beside the rest: stdout carries results
    only, and `serve` has none (a server started with `>&-` would otherwise fail at every request's line)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def _checked_api_key(api_key: str | None, from_environment: bool = False) -> str | None:
    """The key clients must send, or None. An empty key (flag or LOCALSPEC_API_KEY) means no key, with a warning;
    an invalid one is refused, naming where it came from."""
    if not api_key:
        if api_key == "" or os.environ.get("LOCALSPEC_API_KEY") == "":
            click.echo("warning: the API key is empty: serving without one (every client is let in)", err=True)
        return None
    if not api_key.isascii() or not api_key.isprintable() or " " in api_key:
        named = "LOCALSPEC_API_KEY" if from_environment else "--api-key"
        raise InputError(f"{named} must be printable ASCII without spaces (it travels in an HTTP header)")
    return api_key


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, ready for uvicorn to listen on; a one-line error when that is impossible."""
    if not host.strip():
        raise InputError("--host is empty: give a host name or address (127.0.0.1, 0.0.0.0 for every interface)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host}: {exc.strerror}") from None
    except UnicodeError:  # a label too long, an empty one (a..b), text the IDNA codec cannot encode
        raise InputError(f"cannot listen on {host}: not a host name or address") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart without waiting
        listener.bind(address)
    except OSError as exc:
        listener.close()
        raise LocalspecError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listener
