"""Where localspec keeps the user's files.

`LOCALSPEC_HOME`, when set, holds the user's files (profiles/, config.toml,
models/, the chat history, the memory); otherwise the platform's user config
folder holds profiles and config, and the user data folder the rest. Caches
(what can be rebuilt: the demo's F32 target, verdicts, draft lengths, prompt
states) stay in the platform's cache folder either way.
"""

from __future__ import annotations

import os
import re
import shlex
from importlib import resources
from pathlib import Path

import platformdirs

from ..errors import InputError

APP_NAME = "localspec"


def user_path(text: str | os.PathLike[str], what: str | None = None) -> Path:
    """A path as the user gave it, with `~` and `~user` expanded (an unknown user, or a NUL character,
    which no path can hold, is a one-line error, as is an empty one, naming `what` it is for: it would
    be the current folder)."""
    if not os.fspath(text).strip():
        raise InputError(f"{what}: the path is empty" if what else "the path is empty")
    if "\0" in os.fspath(text):
        raise InputError(f"{os.fspath(text)!r}: a path cannot hold a NUL character")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # "~nobody/...": no such user, so no home folder to expand to
        raise InputError(f"{text}: cannot expand ~ (no such user)") from None


PRIVATE_FILE_MODE = 0o600


def keep_private(path: Path) -> None:
    """`path` readable and writable by this user alone: created empty so where it is missing, narrowed to that
    where it exists (made 0644 by an earlier version). A file that cannot be opened is left to whoever opens it
    next, which says why."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), PRIVATE_FILE_MODE))  # (a FIFO)
        os.chmod(path, PRIVATE_FILE_MODE)
    except OSError:
        pass


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (through links too); False when either does not exist or cannot be looked at."""
    try:
        return a.samefile(b)
    except OSError:
        return False


def check_folder_of(path: Path, named: str) -> None:
    """InputError unless the folder `path` is to be written in exists (a mistyped folder is not made);
    `named`: how the message names the path (`--out x/y.gguf`)."""
    folder = path.parent
    if folder.is_dir():
        return
    if folder.exists():
        raise InputError(f"{named}: {folder} is not a folder")
    raise InputError(f"{named}: the folder {folder} does not exist")


MODEL_PATH_KEYS = frozenset({"target.path", "draft.path"})  # the settings `stored_model_path` stores


def hub_reference_problem(repo: str, filename: str) -> str | None:
    """Why `repo` and `filename` are not a hub repository ('org/name') and a file inside it; None when they are."""
    repo_parts, file_parts = repo.split("/"), filename.split("/")
    if len(repo_parts) != 2 or any(not part.strip() or part in (".", "..") or "\0" in part for part in repo_parts):
        return f"hf_repo {repo!r} is not 'org/name'"
    if not all(_HUB_NAME.fullmatch(part) and "--" not in part and ".." not in part for part in repo_parts):
        return (f"hf_repo {repo!r} is not 'org/name' as the hub writes them (ASCII letters, digits, '-', '_' and"
                " '.', neither first nor last a '-' or '.')")
    if not filename.strip():
        return "hf_file is empty"
    if any(not part or part in (".", "..") or "\0" in part for part in file_parts):  # ('/x', 'a//b', 'sub/' too)
        return f"hf_file {filename!r} is not a file inside the repository"
    return None


def stored_model_path(text: str, key: str) -> str:
    """A model path as a profile stores it (`key`: the setting, for the message when it is empty): a path
    with a `$VARIABLE` as written, expanded where the profile is used (as in a hand-written profile); any
    other made absolute, so that the profile works from any folder, without following symbolic links (a
    Hugging Face snapshot's link stays the model's file name, not the blob it points at today)."""
    if "$" in text:
        return text
    return os.path.abspath(user_path(text, key))


def stored_assignment(key: str, value: object) -> object:
    """A KEY=VALUE given to `profile add --set` or `profile set` as the profile stores it: a model path by
    `stored_model_path`, anything else as it is."""
    return stored_model_path(value, key) if key in MODEL_PATH_KEYS and isinstance(value, str) else value


def model_path_here(stored: str, key: str) -> Path:
    """The file a profile's model path (`key`) names here: its `$VARIABLES` and `~` expanded (a file whose own
    name holds a `$`, `model$2.gguf`, where it is there as written)."""
    return expanded_user_path(stored, key, said_as=f"{key} = {stored}")


def expanded_user_path(text: str, what: str | None = None, said_as: str | None = None) -> Path:
    """`user_path` with `$VARIABLES` expanded too, as a shell would (a path whose own name holds a `$` where it
    is there as written); InputError naming the variable where one is not set (`said_as`: how the path is named
    in that error, else as given)."""
    expanded = user_path(os.path.expandvars(text), what)
    if "$" in text and not expanded.exists():
        if user_path(text, what).exists():
            return user_path(text, what)
        unset = [name for name in _VARIABLE.findall(text) if name.strip("{}") not in os.environ]
        if unset:  # (the path would be looked for with the `$NAME` in it: "no such file" would not say why)
            raise InputError(f"{said_as or text}: ${unset[0].strip('{}')} is not set in this environment")
    return expanded


_HUB_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")  # the hub's rule, up to 96 long
_VARIABLE = re.compile(r"\$(\w+|\{\w+\})")  # a `$NAME` or `${NAME}` that os.path.expandvars expands


def _home_override() -> Path | None:
    """LOCALSPEC_HOME, the one folder for profiles, config and data when set (not blank), its `~` and `$VARIABLES`
    expanded; InputError where it names something that is not a folder (each command would fail its own way
    further on)."""
    value = os.environ.get("LOCALSPEC_HOME")
    if not value or not value.strip():  # (as if unset)
        return None
    try:  # (expanded as a profile's paths are)
        home = expanded_user_path(value, "LOCALSPEC_HOME", said_as=f"LOCALSPEC_HOME={value}")
    except InputError as exc:  # (every error names the variable: "~nobody/x: cannot expand ~" did not)
        said = str(exc).removeprefix(f"{value}: ")
        raise InputError(said if said.startswith("LOCALSPEC_HOME") else f"LOCALSPEC_HOME={value}: {said}") from None
    if not home.is_absolute():  # (profiles, history and memory would move with the current folder)
        raise InputError(f"LOCALSPEC_HOME={value}: not an absolute path (a relative one would change with the current"
                         f" folder): use {shlex.quote(str(Path.cwd() / home))}")
    try:
        if home.is_symlink() and not home.exists():  # (a link to nowhere, or a loop of links: not a folder)
            raise InputError(f"LOCALSPEC_HOME={value}: a symbolic link to nothing (or a loop of them), not a folder")
        blocking = file_in_the_way(home)
        if blocking == home:
            raise InputError(f"LOCALSPEC_HOME={value}: not a folder")
        if blocking is not None:
            raise InputError(f"LOCALSPEC_HOME={value}: {blocking} is a file, not a folder")
        if home.is_dir() and not os.access(home, os.R_OK | os.X_OK):
            raise InputError(f"LOCALSPEC_HOME={value}: a folder this user may not enter")
    except OSError as exc:  # (a folder above it this user may not enter)
        raise InputError(f"LOCALSPEC_HOME={value}: cannot reach it ({exc.strerror or exc})") from None
    return home


def file_in_the_way(folder: Path) -> Path | None:
    """The file that keeps `folder` from being one: the path itself, or the nearest of its parents that exists
    where that is a file; None where the folder is, or can be made."""
    for path in (folder, *folder.parents):
        if path.exists():
            return path if not path.is_dir() else None
    return None


def _platform_dir(path: str, what: str) -> Path:
    """A folder platformdirs names (from XDG_CONFIG_HOME, say), or InputError where a file stands in its way."""
    folder = Path(path)
    blocking = file_in_the_way(folder)
    if blocking is not None:
        raise InputError(f"the {what} folder {folder} cannot be made: {blocking} is a file, not a folder")
    return folder


def user_config_dir() -> Path:
    return _home_override() or _platform_dir(platformdirs.user_config_dir(APP_NAME), "config")


def user_profiles_dir() -> Path:
    return user_config_dir() / "profiles"


def config_file() -> Path:
    return user_config_dir() / "config.toml"


def data_dir() -> Path:
    """Where localspec keeps what it makes for the user: downloaded models, chat history."""
    return _home_override() or _platform_dir(platformdirs.user_data_dir(APP_NAME), "data")


def models_dir() -> Path:
    return data_dir() / "models"


def history_file() -> Path:
    """The SQLite database of chat conversations."""
    return data_dir() / "history.sqlite3"


def input_history_file() -> Path:
    """Lines typed at the chat prompt, for Up-arrow recall across sessions."""
    return data_dir() / "chat-input-history"


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME))


def shipped_profiles_dir() -> Path:
    """The example profiles installed with the package (the repository's `profiles/` folder)."""
    try:
        return Path(str(resources.files("localspec.shipped_profiles")))
    except ModuleNotFoundError:  # running from a source tree that was not installed
        return Path(__file__).resolve().parents[2] / "profiles"
