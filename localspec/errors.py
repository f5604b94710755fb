"""Errors the user can act on. The CLI prints them as one line, never a traceback."""

from __future__ import annotations


class LocalspecError(Exception):
    """A runtime failure (exit code 1): the request was valid but could not be carried out."""

    exit_code = 1


class PromptTooLongError(LocalspecError):
    """A prompt the context cannot hold (exit code 1, as when its tokens are counted: raise n_ctx or shorten it)."""


class InputError(LocalspecError):
    """Bad input from the user (exit code 2): a missing or broken file, an invalid setting."""

    exit_code = 2


class OutputFormatError(InputError):
    """An output format (schema, grammar, regex, tools) that turns out unusable while generating: a limit of
    llguidance's reached (a schema too large for it) or a dead end (exit code 2; HTTP 400 in `serve`)."""
