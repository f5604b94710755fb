"""`localspec serve`: the speculative engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

from typing import Any

import click
import uvicorn
from sse_starlette.sse import AppStatus

from ..app.serving import Engine, create_app
from .common import is_loopback
from .loading import load_session, resolve_plan
from .options import PROFILE_OPTION, VERBOSE_OPTION, setting_flags, setting_options


@click.command()
@PROFILE_OPTION
@setting_options()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback unless told otherwise).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", help="Require `Authorization: Bearer KEY` on every endpoint but /health.")
@click.option("--queue", "queue_size", type=click.IntRange(0, 1000), default=8, show_default=True,
              help="Requests that may wait while one generates; more get 429.")
@VERBOSE_OPTION
def serve(profile: str | None, host: str, port: int, api_key: str | None, queue_size: int, verbose: bool, **options: Any) -> None:
    """Serve the profile's models over an OpenAI-compatible API (/v1/chat/completions, /v1/completions).

    Settings in a request (temperature, top_p, max_tokens, stop, seed, draft_max,
    strategy, ...) override the profile's for that request.

    \b
    Examples:
      localspec serve
      localspec serve -p qwen2.5-7b --port 8000 --api-key secret
    """
    plan = resolve_plan(profile, setting_flags(options), verbose=verbose)
    if not is_loopback(host) and api_key is None:
        click.echo(f"warning: listening on {host} without --api-key: anyone who can reach it can use it", err=True)
    model_id = plan.profile_name or plan.target.path.stem
    AppStatus.disable_automatic_graceful_drain()  # streams end themselves, with an error event, on shutdown
    with load_session(plan, load_draft=plan.generation.speculative.uses_draft_model, verbose=verbose) as session:
        engine = Engine(session, plan.generation, model_id, queue_size)
        config = uvicorn.Config(create_app(engine, api_key), host=host, port=port,
                                log_level="info" if verbose else "warning", timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        engine.shutting_down = lambda: server.should_exit
        click.echo(f"localspec: serving {model_id} at http://{host}:{port}/v1 (Ctrl-C stops)", err=True)
        server.run()
