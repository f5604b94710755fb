"""The Jinja sandbox chat templates render in, with what they may build and how long they may run kept small.

Jinja's sandbox keeps a template from Python's internals; what it is given
(`given`: the messages and tools) it may not change, while lists and maps it
makes itself it may (Kimi K2's template appends to a list of its own, as
llama.cpp's Jinja engine lets it). Templates may use `{% break %}` and
`{% continue %}` (Command R7B's, Kimi K3's) and Hugging Face's
`{% generation %}` block (LFM2.5's; written as its content), as Hugging Face's
renderer allows. The sandbox does not keep a template from building huge values or running long
inside one step: a template is code from a downloaded file (and `serve` holds
its models while one renders). `'a'|center(4000000000)` took 4 GB, `[[1]]|
tojson(indent=10**10)` 40 GB, squaring a number in a loop of 40 steps ran for
hours, `wordwrap` over a long run of spaces for hours, `lipsum(n=10**6)` was a
Python loop the step budget (chat_template.py) never sees. Two guards:

- before a call, filter or operator runs, what would make one huge value at
  once is refused: a number beyond MAX_ARGUMENT given to a call or as a filter's
  argument (a width, a count; not the value filtered, nor what a format writes),
  a format field that wide or built from another field, a `replace`,
  `expandtabs`, `indent`, `join`, format, `tojson` or `string` whose text would
  be longer, an indent of JSON past MAX_JSON_INDENT, an integer past MAX_INTEGER_BITS, a sequence
  repeated past MAX_REPEATED; `lipsum` is gone;
- while it renders, a watchdog thread ends a rendering that runs past
  RENDER_SECONDS or grows the process past RENDER_BYTES (what the first guard
  cannot foresee: a value doubled at every step, a filter's Python loop), by
  raising RenderingOverrun in the rendering thread.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sized

from jinja2 import TemplateError, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable

MAX_ARGUMENT = 16 * 2**20  # the largest width or count a call or filter may be given: any text's length
MAX_REPEATED = 2**20  # the longest text or list `*` may make (`'a' * 10**9` would take a gigabyte)
MAX_INTEGER_BITS = 1 << 16  # the largest integer arithmetic may make (about 20,000 digits)
MAX_JSON_INDENT = 64
RENDER_SECONDS = 10.0  # a long chat with tools renders in milliseconds
RENDER_BYTES = 1 << 30  # what the process may grow by while a template renders
_WATCH_EVERY_S = 0.01
_DIGITS = len(str(MAX_ARGUMENT))
# A format field (`{:>N}`, `%-Nd`, `%(name)Ns`, `%*d`) whose width or precision is wider than MAX_ARGUMENT, or is
# given by another field; possessive-free but linear: no part can match the same text two ways.
_WIDE_BRACE_FIELD = re.compile(r"\{[^{}:]*:[^{}]*(?:\d{%d}|\{)" % _DIGITS)
_WIDE_PERCENT_FIELD = re.compile(r"%%(?:\([^()]*\))?[-#0 +]*(?:\d{%d}|\*|\.\d{%d}|\.\*)" % (_DIGITS, _DIGITS))


class RenderingOverrun(TemplateError):
    """A rendering ran past RENDER_SECONDS or grew the process past RENDER_BYTES."""


class GivenList(list):  # type: ignore[type-arg]
    """A list the template is given (not one it made): it may not change it."""


class GivenDict(dict):  # type: ignore[type-arg]
    """A map the template is given: it may not change it."""


# Named as the types they are in what a template's errors say ("'dict object' has no attribute 'x'").
GivenList.__module__ = GivenDict.__module__ = "builtins"
GivenList.__name__, GivenDict.__name__ = "list", "dict"


def given(value: Any) -> Any:
    """`value` (JSON-like data: messages, tools) copied into lists and maps the sandbox keeps a template from
    changing, however deep (without recursion: an earlier call's arguments may be nested deeper than Python's
    stack goes)."""
    if not isinstance(value, (dict, list, tuple)):
        return value
    copy = _empty_like(value)
    pending = [(value, copy)]
    while pending:  # (each container filled with its members, containers among them copied empty and queued)
        original, filling = pending.pop()
        for key, item in original.items() if isinstance(original, dict) else enumerate(original):
            member = _empty_like(item) if isinstance(item, (dict, list, tuple)) else item
            if isinstance(filling, dict):
                filling[key] = member
            else:
                filling.append(member)
            if member is not item:
                pending.append((item, member))
    return copy


def _empty_like(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> GivenDict | GivenList:
    return GivenDict() if isinstance(value, dict) else GivenList()


class _GenerationBlock(Extension):
    """Hugging Face's `{% generation %}…{% endgeneration %}` (it marks an assistant's text for training masks):
    its content, as it is."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class BoundedSandbox(SandboxedEnvironment):
    """Jinja's sandbox with what one step of a template builds kept small (see the module's docstring), what it
    is given (`given`) kept as it is, and the loop controls and block tags chat templates use.
    Filters added after it is made are held to it too only through `add_filter`."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **options: Any) -> None:
        super().__init__(extensions=[loopcontrols, _GenerationBlock], finalize=_written, **options)
        self.globals.pop("lipsum", None)
        for name, function in list(self.filters.items()):
            self.add_filter(name, function)

    def add_filter(self, name: str, function: Callable[..., Any]) -> None:
        self.filters[name] = _checked(name, function)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        """Jinja's sandbox's rule; a method that changes a value only for a list or map the template made."""
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return type(obj) in (list, dict) or not modifies_known_mutable(obj, attr)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)) \
                and len(left) + len(right) > MAX_REPEATED:
            raise TemplateError(f"the template makes a list of more than {MAX_REPEATED} items")
        if operator == "*" and any(isinstance(side, (str, list, tuple)) for side in (left, right)):
            sequence, count = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(count, int) and len(sequence) * count > MAX_REPEATED:
                raise TemplateError(f"the template repeats a value to more than {MAX_REPEATED} items")
            if isinstance(count, int) and not isinstance(sequence, str):  # (a megabyte text repeated a million times)
                _check_length(_text_size(sequence) * count)
        elif operator == "*" and _integer(left) and _integer(right):
            _check_bits(abs(left).bit_length() + abs(right).bit_length())
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 1024:
            raise TemplateError("the template raises a number to too large a power")
        if operator == "**" and _integer(left) and _integer(right) and right > 0:
            _check_bits(abs(left).bit_length() * right)
        if operator == "%" and isinstance(left, str):
            _check_format(left)
            _check_length(len(left) + _fields(left) * _text_size(right, each=True))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's names)
        method = getattr(__obj, "__wrapped__", __obj)  # (Jinja hands `str.format` over in a wrapper of its own)
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if isinstance(owner, str):
            _check_str_method(owner, name, args)
            if name in ("format", "format_map"):
                _check_length(len(owner) + _fields(owner) * _text_size([*args, *kwargs.values()], each=True))
        changed, added = owner, args
        if getattr(method, "__objclass__", None) in (list, dict) and args:  # (`dict.update(d, …)`, unbound)
            changed, added = args[0], args[1:]
        if isinstance(changed, (list, dict)) and modifies_known_mutable(changed, name):
            if type(changed) not in (list, dict):
                raise TemplateError("the template changes a value it was given (the messages or tools)")
            if name in ("extend", "update") and added and not isinstance(added[-1], Sized):  # (a `map` filter's)
                args = (*args[:-1], list(itertools.islice(args[-1], MAX_REPEATED + 1)))
                added = (*added[:-1], args[-1])
            count = (len(added[-1]) if name in ("extend", "update") and added else 1) + len(kwargs)
            if len(changed) + count > MAX_REPEATED:
                raise TemplateError(f"the template grows a list or map past {MAX_REPEATED} items")
        if not (isinstance(owner, str) and name in ("format", "format_map")):  # (what a format writes: any number)
            _check_arguments(args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)


def _checked(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that checks its arguments first (see `BoundedSandbox`), keeping what Jinja reads of it (whether
    it takes the environment or the context)."""
    passed = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0  # (Jinja's context or environment)

    @functools.wraps(function)
    def filter_(*args: Any, **kwargs: Any) -> Any:
        value, options = (args[passed], args[passed + 1:]) if len(args) > passed else (None, ())
        if name != "format":  # (the values a format writes: any number)
            _check_arguments(options, kwargs)
        if name == "format" and isinstance(value, str):
            _check_format(value)
        if name == "replace" and isinstance(value, str):
            _check_str_method(value, "replace", options)
        if name == "indent" and isinstance(value, str):
            width = options[0] if options else kwargs.get("width", 4)
            _check_length(len(value) + (value.count("\n") + 1) * (len(width) if isinstance(width, str) else width))
        if name == "join" and isinstance(value, (list, tuple, range)):
            separator = options[0] if options else kwargs.get("d", "")
            _check_length(len(value) * len(str(separator)) + _text_size(value))
        if name == "tojson":
            indent = options[0] if options else kwargs.get("indent")
            if _integer(indent) and indent > MAX_JSON_INDENT:
                raise TemplateError(f"the template indents JSON by more than {MAX_JSON_INDENT}")
        if name in ("tojson", "string", "pprint"):
            _check_length(_text_size(value))
        if name == "format" and isinstance(value, str):
            _check_length(len(value) + _fields(value) * _text_size([*options, *kwargs.values()], each=True))
        return function(*args, **kwargs)

    return filter_


def _written(value: Any) -> Any:
    """What `{{ … }}` writes, a list or map refused first where its text would be longer than MAX_ARGUMENT."""
    if isinstance(value, (list, tuple, dict)):
        _check_length(_text_size(value))
    return value


def checked_size(value: Any) -> Any:
    """`value`, refused (TemplateError) where its text would be longer than MAX_ARGUMENT."""
    _check_length(_text_size(value))
    return value


def _check_arguments(args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        if _integer(value) and abs(value) > MAX_ARGUMENT:
            raise TemplateError(f"the template passes a number beyond {MAX_ARGUMENT} to a call or filter")


def _check_str_method(text: str, name: str, args: tuple[Any, ...] | list[Any]) -> None:
    """Refuse a text method call that would make a text longer than MAX_ARGUMENT."""
    made = len(text)
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        made += (text.count(args[0]) if args[0] else len(text) + 1) * max(len(args[1]) - len(args[0]), 0)
    elif name == "expandtabs":
        size = args[0] if args and _integer(args[0]) else 8
        made += text.count("\t") * max(size, 0)
    elif name == "join" and args and isinstance(args[0], (list, tuple, range)):
        made = made * len(args[0]) + _text_size(args[0])
    elif name in ("format", "format_map"):
        _check_format(text)
    _check_length(made)


def _text_size(value: Any, each: bool = False) -> int:
    """About how many characters `value` writes as text (its strings in full, other scalars a few; nested lists
    and maps summed), counted only up to just past MAX_ARGUMENT; with `each`, the largest of its members'."""
    sizes, stack, total, seen = [], [value], 0, set()
    while stack and total <= MAX_ARGUMENT:
        item = stack.pop()
        if isinstance(item, str):
            size = len(item)
        elif isinstance(item, (list, tuple, dict)) and id(item) in seen:  # (a list that holds itself: `[...]`)
            size = 5
        elif isinstance(item, (list, tuple, dict)):
            seen.add(id(item))
            members = list(item.items()) if isinstance(item, dict) else item
            if each and item is value:
                sizes = [_text_size(member) for member in members[:1 << 16]]
                return max(sizes, default=0)
            stack.extend(members)
            size = 2
        else:
            size = 24
        total += size
    return total


def _fields(text: str) -> int:
    """At most how many fields a format text has (each may write any of the values given)."""
    return text.count("%") + text.count("{")


def _check_length(made: int) -> None:
    if made > MAX_ARGUMENT:
        raise TemplateError(f"the template makes a text of more than {MAX_ARGUMENT} characters")


def _check_format(text: str) -> None:
    if _WIDE_BRACE_FIELD.search(text) or _WIDE_PERCENT_FIELD.search(text):
        raise TemplateError(f"the template formats a field wider than {MAX_ARGUMENT} characters, or one whose"
                            " width another field gives")


def _check_bits(bits: int) -> None:
    if bits > MAX_INTEGER_BITS:
        raise TemplateError(f"the template makes an integer of more than {MAX_INTEGER_BITS} bits")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- the watchdog ----------------------------------------------------------------------------------------------------

@contextmanager
def watched_rendering() -> Iterator[None]:
    """Within the block (this thread's rendering), RenderingOverrun is raised in this thread once it has run
    RENDER_SECONDS or the process has grown RENDER_BYTES since it began (checked every 10 ms by another thread)."""
    seconds, grown_bytes = RENDER_SECONDS, RENDER_BYTES
    rendering = threading.get_ident()
    done = threading.Event()
    lock = threading.Lock()  # (an overrun is raised only before the block ends)
    started, size = time.monotonic(), _resident_bytes()
    why: list[str] = []

    def watch() -> None:
        while not done.wait(_WATCH_EVERY_S):
            if time.monotonic() - started > seconds:
                reason = f"the template renders for more than {seconds:g} s"
            elif _resident_bytes() - size > grown_bytes:
                reason = f"the template takes more than {grown_bytes >> 20} MiB"
            else:
                continue
            with lock:
                if not done.is_set():
                    why.append(reason)
                    _raise_in(rendering, RenderingOverrun)
            return

    watchdog = threading.Thread(target=watch, name="template-watchdog", daemon=True)
    landed = False
    try:
        watchdog.start()  # (in the block: an overrun may land while it starts)
        yield
    except RenderingOverrun:
        landed = True
        raise RenderingOverrun(why[0] if why else "the template overran") from None
    finally:
        with lock:
            done.set()
        if why and not landed:  # raised as the block ended: it lands within a few instructions, here
            try:
                for _ in range(10_000_000):
                    pass
            except RenderingOverrun:
                raise RenderingOverrun(why[0]) from None


def _raise_in(thread: int, exception: type[BaseException]) -> None:
    """Have `exception` raised in `thread` at its next Python instruction. (Never called to cancel one: a NULL
    exception leaves CPython 3.11's eval breaker set, and a traced generator then hangs.)"""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exception))


def _resident_bytes() -> int:
    """The process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource  # (not on Windows)
        except ImportError:
            return 0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


