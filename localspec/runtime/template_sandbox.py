"""The Jinja sandbox chat templates render in, with what they may build kept small.

Jinja's immutable sandbox keeps a template from Python's internals and from
changing what it is given, but not from building huge values: a template is
code from a downloaded file, and `'a'|center(4000000000)` took 4 GB, squaring a
number fourteen times took minutes (its steps are few: the time is in the
arithmetic), `lipsum(n=10**6)` ran a Python loop the step budget does not see.
So every call, filter and operator is checked before it runs: no number passed
to one beyond MAX_ARGUMENT (a width, a count), no text it would make beyond
that (`replace`, `expandtabs`, a format's widths), no integer beyond
MAX_INTEGER_BITS, no sequence repeated beyond MAX_REPEATED; `lipsum` is gone.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_ARGUMENT = 16 * 2**20  # the largest number a call, filter or format may be given: any text's length
MAX_REPEATED = 2**20  # the longest text or list `*` may make (`'a' * 10**9` would take a gigabyte)
MAX_INTEGER_BITS = 1 << 16  # the largest integer arithmetic may make (about 20,000 digits)
# A field of a format (`{:>N}`, `%Nd`) whose width or precision has more digits than MAX_ARGUMENT has.
_WIDE_FIELD = re.compile(r"\{[^{}]*:[^{}]*\d{%d,}[^{}]*\}|%%[-#0 +]*\d{%d,}" % ((len(str(MAX_ARGUMENT)),) * 2))


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with what a template builds kept small (see the module's docstring)."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals.pop("lipsum", None)
        self.filters = {name: _checked(name, function) for name, function in self.filters.items()}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*" and any(isinstance(side, (str, list, tuple)) for side in (left, right)):
            sequence, count = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(count, int) and len(sequence) * count > MAX_REPEATED:
                raise TemplateError(f"the template repeats a value to more than {MAX_REPEATED} items")
        elif operator == "*" and _integer(left) and _integer(right):
            _check_bits(abs(left).bit_length() + abs(right).bit_length())
        if operator == "**" and isinstance(right, (int, float)) and abs(right) > 1024:
            raise TemplateError("the template raises a number to too large a power")
        if operator == "**" and _integer(left) and _integer(right) and right > 0:
            _check_bits(abs(left).bit_length() * right)
        if operator == "%" and isinstance(left, str):
            _check_format(left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (Jinja's names)
        _check_arguments(args, kwargs)
        method = getattr(__obj, "__wrapped__", __obj)  # (Jinja hands `str.format` over in a wrapper of its own)
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if isinstance(owner, str):
            _check_str_method(owner, name, args)
        return super().call(__context, __obj, *args, **kwargs)


def _checked(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that checks its arguments first (see `BoundedSandbox`), keeping what Jinja reads of it (whether
    it takes the environment or the context)."""

    passed = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0  # (Jinja's context or environment)

    @functools.wraps(function)
    def filter_(*args: Any, **kwargs: Any) -> Any:
        given = args[passed:]
        _check_arguments(given, kwargs)
        if name == "replace" and len(given) >= 3 and isinstance(given[0], str):
            _check_str_method(given[0], "replace", given[1:])
        if name == "format" and given and isinstance(given[0], str):
            _check_format(given[0])
        return function(*args, **kwargs)

    return filter_


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
    elif name in ("format", "format_map"):
        _check_format(text)
    if made > MAX_ARGUMENT:
        raise TemplateError(f"the template makes a text of more than {MAX_ARGUMENT} characters")


def _check_format(text: str) -> None:
    if _WIDE_FIELD.search(text):
        raise TemplateError(f"the template formats a field wider than {MAX_ARGUMENT} characters")


def _check_bits(bits: int) -> None:
    if bits > MAX_INTEGER_BITS:
        raise TemplateError(f"the template makes an integer of more than {MAX_INTEGER_BITS} bits")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
