"""Profiles: one TOML file that pairs a target with a draft and the settings that suit them.

A profile is validated against the settings table (`localspec.settings`) when
it is read: invalid TOML is reported with its file and line, an unknown key with
the nearest valid one, a wrong type or out-of-range value with what was
expected. Inside localspec a profile's settings are a flat mapping of dotted
keys ("sampling.temperature"), which makes precedence (flag > profile >
default) a plain dictionary merge.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..runtime.chat_template import template_problem
from ..runtime.rpc import parse_endpoints
from ..settings import ROLES, SECTIONS, SETTINGS, GenerationSettings
from .atomic import write_text_atomic
from .files import TOO_LONG_A_NUMBER, locked, parse_toml, read_user_text
from .paths import hub_reference_problem, shipped_profiles_dir, user_profiles_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NAME_CHARACTERS = "ASCII letters, digits, '.', '_' and '-'"
NAME_MAX = 64
LOCATION_KEYS = ("path", "hf_repo", "builtin")


@dataclass(frozen=True)
class Profile:
    """A validated profile: its settings as dotted keys, and where it came from."""

    name: str
    values: dict[str, Any]
    path: Path | None = None
    source: str = "user"  # "user" or "shipped"
    problem: str | None = None  # why the file is not a valid profile (`list_profiles` lists those too)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def model_ref(self, role: str) -> str | None:
        """A short description of the target or draft: path, hub file or built-in name."""
        if f"{role}.path" in self.values:
            return str(self.values[f"{role}.path"])
        if f"{role}.hf_repo" in self.values:
            return f"{self.values[f'{role}.hf_repo']}/{self.values.get(f'{role}.hf_file', '?')}"
        if f"{role}.builtin" in self.values:
            return f"builtin:{self.values[f'{role}.builtin']}"
        return None


def check_name(name: str) -> str:
    """Refuse names that are not plain file names (no path separators, no dot-files), saying why."""
    problem = name_problem(name)
    if problem is not None:
        raise InputError(f"invalid profile name {name!r}: {problem}")
    return name


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a profile name, or None when it can."""
    if PROFILE_NAME.match(name):
        return None
    if not name:
        return "it is empty"
    if len(name) > NAME_MAX:
        return f"it is {len(name)} characters long, the most is {NAME_MAX}"
    if "/" in name or "\\" in name:
        return f"no path separators: use {NAME_CHARACTERS}"
    if not name.isascii():
        return f"it has characters outside ASCII: use {NAME_CHARACTERS}"
    if not name[0].isalnum():
        return f"it must start with a letter or digit, not {name[0]!r}"
    odd = next(c for c in name if not (c.isalnum() or c in "._-"))
    return f"{odd!r} is not allowed: use {NAME_CHARACTERS}"


# -- parsing and validation ------------------------------------------------------------------


def parse_profile(text: str, where: Path | str, name: str) -> Profile:
    """Parse and validate profile TOML text (`where` names the file in error messages)."""
    values = parse_values(text, where)
    validate(values, text, where)
    if values.get("name", name) != name:
        raise InputError(f"{where}{line_of('name', text)}: {_named_otherwise(name, values['name'])}")
    return Profile(name=name, values=values)


def parse_values(text: str, where: Path | str) -> dict[str, Any]:
    """Profile TOML text to dotted-key values, refusing invalid TOML and unknown keys (values unchecked)."""
    return flatten(parse_toml(text, where), text, where)


def flatten(document: dict[str, Any], text: str, where: Path | str) -> dict[str, Any]:
    """Nested TOML tables to dotted keys, refusing unknown sections and keys."""
    values: dict[str, Any] = {}
    for key, value in document.items():
        if isinstance(value, dict):
            if key in SETTINGS:  # `description = {x = 1}` or a [description] table: a value of the wrong type
                raise InputError(f"{where}{line_of(key, text)}: {key} must be a value, not a table")
            if key not in SECTIONS or key == "":
                raise _unknown(key, text, where, is_section=True)
            for subkey, subvalue in value.items():
                dotted = f"{key}.{subkey}"
                if dotted not in SETTINGS:
                    raise _unknown(dotted, text, where)
                values[dotted] = subvalue
        else:
            if key in SECTIONS and key != "":  # `sampling = 0.7`: a section written as a value
                raise InputError(f"{where}{line_of(key, text)}: [{key}] is a section of settings, not a value")
            if key not in SETTINGS:
                raise _unknown(key, text, where)
            values[key] = value
    return values


def validate(values: dict[str, Any], text: str = "", where: Path | str = "profile") -> None:
    """Check types, ranges, the rules between settings (over the defaults) and that each model section says where its file is."""
    for dotted, value in values.items():
        if dotted not in SETTINGS:
            raise _unknown(dotted, text, where)
        problem = SETTINGS[dotted].problem(value)
        if problem is not None:
            raise InputError(f"{where}{line_of(dotted, text)}: {problem}")
    if isinstance(values.get("chat.template"), str) and (problem := template_problem(values["chat.template"])):
        raise InputError(f"{where}{line_of('chat.template', text)}: chat.template: {problem}")
    generation_keys = GenerationSettings.keys()
    GenerationSettings().with_values({k: v for k, v in values.items() if k in generation_keys}, str(where))
    if not any(k.startswith("target.") for k in values):
        raise InputError(f"{where}: a profile needs a [target] section")
    for role in ROLES:
        if any(k.startswith(f"{role}.") for k in values):
            _validate_location(values, role, where, text)
        try:
            parse_endpoints(values.get(f"{role}.rpc", ()))
        except InputError as exc:  # (as `--rpc` refuses it, before anything runs)
            raise InputError(f"{where}{line_of(f'{role}.rpc', text)}: {role}.rpc: {exc}") from None


def _validate_location(values: dict[str, Any], role: str, where: Path | str, text: str = "") -> None:
    given = [k for k in LOCATION_KEYS if f"{role}.{k}" in values]
    if len(given) != 1:
        raise InputError(f"{where}: [{role}] needs exactly one of path, hf_repo (with hf_file) or builtin")
    path = values.get(f"{role}.path")
    if isinstance(path, str) and (not path.strip() or "\0" in path):  # (no file has such a name: said here, not later)
        problem = "is empty" if not path.strip() else "holds a NUL character"
        raise InputError(f"{where}{line_of(f'{role}.path', text)}: {role}.path {problem}")
    if given == ["hf_repo"] and f"{role}.hf_file" not in values:
        raise InputError(f"{where}: [{role}] hf_repo needs hf_file too")
    if f"{role}.hf_file" in values and given != ["hf_repo"]:
        raise InputError(f"{where}: [{role}] hf_file needs hf_repo")
    if given == ["hf_repo"]:
        problem = hub_reference_problem(str(values[f"{role}.hf_repo"]), str(values[f"{role}.hf_file"]))
        if problem is not None:
            raise InputError(f"{where}: [{role}] {problem}")


def _unknown(key: str, text: str, where: Path | str, is_section: bool = False) -> InputError:
    if not is_section and key in SECTIONS and key:  # (`profile set p target=5`: a section, named as a key)
        keys = ", ".join(sorted(dotted for dotted in SETTINGS if dotted.startswith(f"{key}.")))
        return InputError(f"{where}{line_of(key, text)}: {key!r} is a section of settings, not a key: {keys}")
    candidates = [s for s in SECTIONS if s] if is_section else list(SETTINGS)
    hint = did_you_mean(key, candidates)
    outer, _, inner = key.partition(".")
    if outer in SECTIONS and inner in SECTIONS and inner:  # (`sampling.temperature = …` written under [target])
        hint = f" ('{inner}' is a section of its own, not part of [{outer}]: write it before [{outer}] or under a" \
               f" [{inner}] header)"
    kind = "section" if is_section else "key"
    return InputError(f"{where}{line_of(key, text)}: unknown {kind} {key!r}{hint}")


def nearest_name(key: str, candidates: list[str]) -> str | None:
    """The known dotted name `key` most likely meant: one whose last part is the same (`draft_max` at the top:
    `speculative.draft_max`), else in the same section (any, for a name without one) one that begins with it
    (`sampling.temp`, `temp`), else the closest spelling (`sampling.temprature`; of the last parts, for a name
    without a section: `temprature`); None where nothing is close."""
    section, _, leaf = key.rpartition(".")
    same_leaf = [c for c in candidates if c.rpartition(".")[2] == leaf]
    if same_leaf:
        return same_leaf[0]
    if len(leaf) >= 3:
        begun = [c for c in candidates if (not section or c.rpartition(".")[0] == section)
                 and c.rpartition(".")[2].startswith(leaf)]
        if len(begun) == 1:
            return begun[0]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
    if close or section:
        return close[0] if close else None
    by_leaf = {c.rpartition(".")[2]: c for c in candidates}
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[close[0]] if close else None


def did_you_mean(name: str, known: list[str]) -> str:
    """' (did you mean 'x'?)' naming the known (dotted) name nearest `name` (`nearest_name`), or '' when none is
    near."""
    near = nearest_name(name, known)
    return f" (did you mean {near!r}?)" if near else ""


_TABLE_HEADER = re.compile(r"^\s*\[+\s*([^\]]+?)\s*\]+")
_ASSIGNED_KEY = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def line_of(dotted: str, text: str) -> str:
    """':N' for the line that sets the dotted key (a `key =` line under its [section], a `section.key =`
    line, or the key's own [table] header; else the line setting the table it is in, as an inline table
    `target = { path = 5 }` sets `target.path`), else ''."""
    section = ""
    inside: str | None = None  # the quotes of the multi-line string this line is in (its lines are text, not keys)
    for number, line in enumerate(text.splitlines(), start=1):
        was_inside, inside = inside, _multiline_string_after(line, inside)
        if was_inside is not None:
            continue
        header = _TABLE_HEADER.match(line)
        if header:
            section = _plain_key(header.group(1))
            if section == dotted or section.startswith(dotted + "."):
                return f":{number}"
            continue
        assigned = _ASSIGNED_KEY.match(line)
        key = ".".join(part for part in (section, _plain_key(assigned.group(1)) if assigned else "") if part)
        if assigned and (key == dotted or key.startswith(dotted + ".")):  # (`sampling.x = 1` under [target] sets
            return f":{number}"                                            # `target.sampling`)
    return line_of(dotted.rpartition(".")[0], text) if "." in dotted else ""


def _multiline_string_after(line: str, inside: str | None) -> str | None:
    """The quotes (\"\"\" or \'\'\') of the multi-line string still open after `line`, given the one open before it."""
    position = 0
    while True:
        if inside is None:
            starts = [(line.find(quotes, position), quotes) for quotes in ('"""', "'''")]
            found = min(((at, quotes) for at, quotes in starts if at >= 0), default=None)
            if found is None:
                return None
            position, inside = found[0] + 3, found[1]
        else:
            end = line.find(inside, position)
            if end < 0:
                return inside
            position, inside = end + 3, None


def _plain_key(key: str) -> str:
    """A TOML key as dotted text: 'draft . "n_ctx"' -> 'draft.n_ctx'."""
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


# -- reading and writing ---------------------------------------------------------------------


def profile_file(name: str) -> Path | None:
    """The file a profile name resolves to: the user's first, then the shipped one. Whatever `profile list`
    lists under the name (a folder or a dangling link too) is what the name resolves to: reading it then says
    what is wrong with it."""
    check_name(name)
    for folder in (user_profiles_dir(), shipped_profiles_dir()):
        candidate = folder / f"{name}.toml"
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return None


def load_profile(name: str) -> Profile:
    """Read and validate the profile called `name`."""
    return read_profile_file(_existing_file(name))


def _existing_file(name: str) -> Path:
    path = profile_file(name)
    if path is None:
        raise InputError(missing_profile_text(name))
    return path


def hiding_shipped_text(name: str, what: str) -> str:
    """The note that user profile `name` (a shipped profile's name: no escaping needed) now hides the shipped one
    (`what` it is to that one)."""
    return (f"note: {what} {name!r}, which it hides from now on (`localspec profile remove {name}` brings that one"
            " back)")


def missing_profile_text(name: str) -> str:
    """Why `name` cannot be loaded when no file holds it, with the profiles that can."""
    names = sorted(p.name for p in list_profiles() if p.problem is None)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6) or [
        known for known in names if known.lower() == name.lower()]
    meant = f"did you mean {close[0]!r}? " if close else ""
    return f"no profile named {name!r} ({meant}known: {', '.join(names) or 'none'})"


def read_profile_file(path: Path) -> Profile:
    profile = parse_profile(read_user_text(path), path, path.stem)
    return Profile(name=path.stem, values=profile.values, path=path, source=_source_of(path))


def _source_of(path: Path) -> str:
    return "user" if path.parent == user_profiles_dir() else "shipped"


def list_profiles() -> list[Profile]:
    """Every profile file, user profiles hiding shipped ones of the same name.

    A file that is not a valid profile (or whose name cannot be one) is listed
    with empty values and `problem` saying why, so that it is not silently missing.
    """
    found: dict[str, Path] = {}
    for folder in (shipped_profiles_dir(), user_profiles_dir()):
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found[path.stem] = path
    profiles = []
    for path in found.values():
        problem = name_problem(path.stem)
        if problem is not None:
            profiles.append(Profile(path.stem, {}, path, _source_of(path), f"not a valid profile name: {problem}"))
            continue
        try:
            profiles.append(read_profile_file(path))
        except InputError as exc:
            profiles.append(Profile(path.stem, {}, path, _source_of(path), _without_file(str(exc), path)))
    return sorted(profiles, key=lambda p: p.name)


def _without_file(message: str, path: Path) -> str:
    """'/x/p.toml:4: unknown key …' -> 'line 4: unknown key …' (the file is listed beside it)."""
    return re.sub(rf"^{re.escape(str(path))}(?::(\d+))?: ", lambda m: f"line {m[1]}: " if m[1] else "", message)


def render_profile(values: dict[str, Any], base_text: str = "") -> str:
    """TOML text for `values`; edits `base_text` in place so the user's comments survive."""
    import tomlkit  # (only where profiles are written: a one-shot run need not import it)

    document = tomlkit.parse(base_text) if base_text else tomlkit.document()
    for section in SECTIONS:
        keys = [key.rpartition(".")[2] for key in SETTINGS if key.rpartition(".")[0] == section]
        if section:
            present = {k: v for k, v in values.items() if k.startswith(f"{section}.")}
            if not present and section in document:
                _emptied(document, section)
            if not present:
                continue
            if section not in document:
                document[section] = tomlkit.table()
            table = document[section]
            for key in list(table.keys()):
                if f"{section}.{key}" not in values:
                    del table[key]
            for key in keys:
                if f"{section}.{key}" in values:
                    _set_if_changed(table, key, values[f"{section}.{key}"])
        else:
            for key in keys:
                if key in values:
                    _set_if_changed(document, key, values[key])
                elif key in document:
                    del document[key]
    return tomlkit.dumps(document)


def _emptied(document: Any, section: str) -> None:
    """Take every setting out of `document`'s [section]: the table goes too, unless the user wrote comments in it
    (which then stay under its header, where they were, rather than being lost)."""
    import tomlkit.items

    table = document[section]
    if not isinstance(table, tomlkit.items.Table):
        del document[section]  # (an inline table or a dotted key: nothing of the user's between its lines)
        return
    for key in list(table.keys()):
        del table[key]
    if not any(isinstance(item, tomlkit.items.Comment) for _, item in table.value.body):
        del document[section]


def _set_if_changed(table: Any, key: str, value: Any) -> None:
    """Set `key` in a tomlkit table unless it holds `value` already: a value left as it was keeps how the
    file wrote it (a multi-line string, an array over several lines with its comments, 8_192)."""
    if key in table:
        held = table[key]
        if (held.unwrap() if hasattr(held, "unwrap") else held) == value:
            return
    table[key] = value


def save_profile(name: str, values: dict[str, Any], *, replace: bool = True) -> Path:
    """Validate and write the user profile `name` atomically, keeping comments of an existing valid file;
    without `replace`, one that exists (checked under its lock: two writers cannot both find none) is InputError."""
    check_name(name)
    _check_same_name(name, values)
    validate(values, where=f"profile {name}")
    path = user_profiles_dir() / f"{name}.toml"
    with locked(path):
        if not replace and (path.exists() or path.is_symlink()):
            raise profile_exists(name, path)
        write_text_atomic(path, render_profile(values, _text_to_keep(path)))
    return path


def _check_same_name(name: str, values: dict[str, Any]) -> None:
    """InputError where a profile is to be written with a `name` other than its own: the file name is what
    commands go by, so another name would be shown but never found."""
    given = values.get("name")
    if given is not None and given != name:
        raise InputError(f"profile {name}: {_named_otherwise(name, given)}")


def _named_otherwise(name: str, given: Any) -> str:
    return (f"name = {given!r}, but a profile is named by its file ({name}.toml): to have a profile {given!r},"
            f" copy the file to {given}.toml (localspec profile path {name}), or take the name out")


def profile_exists(name: str, path: Path) -> InputError:
    return InputError(f"profile {name!r} exists ({path}); pass --force to overwrite")


def _text_to_keep(path: Path) -> str:
    """The file's text, whose comments a rewrite keeps; '' when there is no file or it is unreadable or not TOML (it is replaced)."""
    try:
        text = read_user_text(path) if path.exists() else ""
        parse_toml(text, path)
    except InputError:
        return ""
    return text


def update_profile(name: str, changes: dict[str, Any], unset: tuple[str, ...] = ()) -> Path:
    """Set `changes` in profile `name` and remove the keys `unset`, under its lock so that concurrent
    updates all survive.

    A shipped profile becomes a user profile, its comments kept. The file is read
    again inside the lock, and only the result is validated: a change may repair
    a profile that is invalid today. Giving a model a new location (`draft.path`,
    `draft.hf_repo`, `draft.builtin`) replaces the one it had. A key to unset that
    the profile does not set is InputError.
    """
    _existing_file(name)  # refuses a name that is invalid or not a profile
    _check_same_name(name, changes)
    unset = tuple(dict.fromkeys(unset))  # (a key given twice is unset once)
    path = user_profiles_dir() / f"{name}.toml"
    for dotted, value in changes.items():  # a value given here is named as given, not by a line of the file
        if (problem := SETTINGS[dotted].problem(value)) is not None:
            raise InputError(f"profile {name}: {problem}")
    for dotted in unset:
        if dotted not in SETTINGS:
            raise _unknown(dotted, "", f"profile {name}")
    with locked(path):
        current = path if path.is_file() else _existing_file(name)
        text = read_user_text(current)
        values = parse_values(text, current)
        for dotted in unset:
            if dotted not in values:
                raise InputError(f"profile {name} does not set {dotted}")
            del values[dotted]
        values = {**_without_replaced_locations(values, changes), **changes}
        validate(values, text, where=f"profile {name}")
        _check_same_name(name, values)  # (a file written by hand with another name is refused where it is read)
        rendered = render_profile(values, text)
        if "\r\n" in text:  # (a file written with Windows line endings keeps them, its new lines too)
            rendered = rendered.replace("\r\n", "\n").replace("\n", "\r\n")
        write_text_atomic(path, rendered)
    return path


_LOCATION_KINDS = (("path",), ("hf_repo", "hf_file"), ("builtin",))  # the ways a model section says where its file is


def _without_replaced_locations(values: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`values` without the location keys of each model whose location `changes` gives in another way."""
    dropped = set()
    for role in ROLES:
        given = {kind for kind in _LOCATION_KINDS if any(f"{role}.{key}" in changes for key in kind)}
        if given:
            dropped |= {f"{role}.{key}" for kind in _LOCATION_KINDS if kind not in given for key in kind}
    return {key: value for key, value in values.items() if key not in dropped}


def parse_assignment(assignment: str) -> tuple[str, Any]:
    """'sampling.temperature=0.7' -> ("sampling.temperature", 0.7); values are TOML, else strings."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError(f"expected key=value, got {assignment!r}")
    if key not in SETTINGS:
        raise _unknown(key, "", repr(assignment.strip()))
    return key, parse_value(raw, SETTINGS[key].kind)


def typed_form(value: Any) -> str:
    """A setting's value as `profile set` and chat's `/set` take it back (`parse_value` reads it): TOML's form
    (`true`, `"hybrid"`, `["###"]`), `(not set)` for none."""
    import tomlkit  # (only where values are shown: a one-shot run need not import it)

    return "(not set)" if value is None else tomlkit.item(value).as_string()


def parse_value(raw: str, kind: type) -> Any:
    """A value typed by a person: TOML syntax where it parses (numbers, ["a", "b"]), else the text itself
    ([INST]); a single string (or a number, a word) where a list is expected becomes a one-item list. A list
    whose first item is quoted but that does not parse (["a",), or a quoted string that does not ("a" "b"), is
    an InputError, not a string to keep. A number where one is
    expected is read as the command line's flags read it: `.7` and `5.` are numbers, `0x10` is not."""
    number = _number_as_a_flag_reads_it(raw, kind)
    if number is not None:
        return number
    if kind in (int, float) and (raw.strip().lower().startswith(("0x", "0o", "0b", "+0x", "-0x"))
                                 or not written_plainly(raw)):
        return raw.strip()  # (text, refused as not a number: TOML would read 0x10 as 16 and 1_0 as 10)
    try:
        document = tomllib.loads(f"v = {raw.strip()}")
        if set(document) != {"v"}:  # a line break, then more TOML: not one value (kept as text, or refused)
            raise tomllib.TOMLDecodeError("more than one value")
        value = document["v"]
    except tomllib.TOMLDecodeError:
        text = raw.strip()
        quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"  # ("a" "b", "\ud800": not TOML's)
        if kind is list and (re.match(r"\[\s*[\"']", text) or quoted):  # (["a", too)
            raise InputError(f"{text[:40]!r} is not a list nor a string: write [\"a\", \"b\"] (TOML), or one"
                             " string (quoted as TOML quotes it, or not at all)") from None
        value = raw.strip()
    except RecursionError:  # brackets nested thousands deep: text
        value = raw.strip()
    except ValueError:  # Python's limit on the digits of an integer read from text
        raise InputError(f"{raw.strip()[:20]}...: {TOO_LONG_A_NUMBER}") from None
    if kind is str and not isinstance(value, str) or kind is list and not isinstance(value, (str, list)):
        value = raw.strip()  # text that reads as TOML (true, 1.5, a date) is still text where text is expected
    if kind is list and isinstance(value, str):
        value = [value]
    return value


def written_plainly(number: str) -> bool:
    """Whether a number's text is written as flags take it: ASCII alone, no `_` (Python reads "1_0" as 10 and
    "٣" or "３" as 3; TOML reads 1_0 as 10)."""
    return number.isascii() and "_" not in number


def _number_as_a_flag_reads_it(raw: str, kind: type) -> int | float | None:
    """`raw` as `--temperature` or `--seed` reads it, where `kind` is a number and it reads as one (decimal
    digits; a float's point, exponent and NaN or infinity, which the checks after refuse); else None."""
    text = raw.strip()
    if not text or not written_plainly(text):
        return None
    try:
        return int(text) if kind is int else float(text) if kind is float else None
    except ValueError:
        return None
