"""The user's config.toml: which profile runs when none is named."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .atomic import write_text_atomic
from .files import locked, parse_toml, read_user_text
from .paths import config_file
from .profiles import did_you_mean, line_of, name_problem

KNOWN_KEYS = ("default_profile",)


def read_config() -> dict:
    """The parsed config (empty when there is no file); a corrupt file is a one-line error."""
    path = config_file()
    if not path.exists() and not path.is_symlink():  # (a dangling link or a loop is read, to say so)
        return {}
    return _parse(read_user_text(path), path)


def _parse(text: str, path: Path, *, check_default: bool = True) -> dict:
    """The config's settings from its text, checked (`default_profile`'s value only where `check_default`)."""
    config = parse_toml(text, path)
    unknown = [key for key in config if key not in KNOWN_KEYS]
    if unknown:
        hint = did_you_mean(unknown[0], list(KNOWN_KEYS)) or f" (known: {', '.join(KNOWN_KEYS)})"
        raise InputError(f"{path}{line_of(unknown[0], text)}: unknown key {unknown[0]!r}{hint}")
    if not check_default:
        return config
    where = f"{path}{line_of('default_profile', text)}"
    if "default_profile" in config and not isinstance(config["default_profile"], str):
        raise InputError(f"{where}: default_profile must be a string")
    if "default_profile" in config and name_problem(config["default_profile"]) is not None:
        raise InputError(f"{where}: default_profile {config['default_profile']!r}: {name_problem(config['default_profile'])}")
    return config


def default_profile_name() -> str | None:
    return read_config().get("default_profile")


def set_default_profile(name: str) -> None:
    """Store `name` as the default profile, keeping the rest of the file as it is (under its lock).

    A file that is not TOML or holds a key it should not is refused, not rewritten (the user may want what
    is in it); a wrong `default_profile` is what this replaces."""
    import tomlkit  # (only where the config is written: a one-shot run need not import it)

    path = config_file()
    with locked(path):
        text = read_user_text(path) if path.exists() else ""
        _parse(text, path, check_default=False)
        document = tomlkit.parse(text)
        document["default_profile"] = name
        write_text_atomic(path, tomlkit.dumps(document))
