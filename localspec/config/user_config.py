"""The user's config.toml: which profile runs when none is named."""

from __future__ import annotations

import sys

import tomlkit

from ..errors import InputError
from .atomic import write_text_atomic
from .paths import config_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN_KEYS = ("default_profile",)


def read_config() -> dict:
    """The parsed config (empty when there is no file); a corrupt file is a one-line error."""
    path = config_file()
    if not path.is_file():
        return {}
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc} (fix or delete the file)") from None
    unknown = [key for key in config if key not in KNOWN_KEYS]
    if unknown:
        raise InputError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(KNOWN_KEYS)})")
    if "default_profile" in config and not isinstance(config["default_profile"], str):
        raise InputError(f"{path}: default_profile must be a string")
    return config


def default_profile_name() -> str | None:
    return read_config().get("default_profile")


def set_default_profile(name: str) -> None:
    """Store `name` as the default profile, keeping the rest of the file as it is."""
    read_config()  # refuse to rewrite a corrupt file: the user may want what is in it
    path = config_file()
    document = tomlkit.parse(path.read_text(encoding="utf-8")) if path.is_file() else tomlkit.document()
    document["default_profile"] = name
    write_text_atomic(path, tomlkit.dumps(document))
