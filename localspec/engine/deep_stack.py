"""Work that recurses on the native stack, run on a thread with a deep one.

llguidance compiles a grammar (checking it, or building a matcher from it) by
recursion in native code: a JSON schema chaining 1,100 definitions through
`$ref`s (82 KB, one request's `response_format`) overflowed a thread's 8 MiB
stack and ended the process without a word, `serve` included. On a thread with
DEEP_STACK_BYTES of stack the same compile ends in llguidance's own limits
("schema too large"), an error like any other. The stack is address space, not
memory: only the pages the recursion reaches are ever touched.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

DEEP_STACK_BYTES = 256 << 20

_Result = TypeVar("_Result")
_STACK_SIZE_LOCK = threading.Lock()  # (`threading.stack_size` is one setting for every thread started)


def on_a_deep_stack(work: Callable[[], _Result]) -> _Result:
    """`work()` run on a thread with DEEP_STACK_BYTES of stack: what it returns, or what it raises."""
    outcome: list[_Result] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # (handed to the caller's thread, as if raised there)
            failure.append(exc)

    with _STACK_SIZE_LOCK:
        before = threading.stack_size(DEEP_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="deep-stack", daemon=True)
            thread.start()
        finally:
            threading.stack_size(before)
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
