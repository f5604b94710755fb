"""The built-in structured-output set: JSON schemas, each with a prompt that asks for it.

The data lives beside this module in `structured_set.json` (shipped as package
data): a list of `{"name", "prompt", "schema", "example"}` objects, where
`example` is an answer to the prompt that the schema accepts. The set covers
flat and nested objects, enums, arrays with bounds, numbers with ranges,
optional and nullable fields, `anyOf`, `additionalProperties: false`, and
strings with formats (date, email, ipv4, uuid) and patterns. Free-text strings
and arrays carry a maximum length, as a schema for a real service would, so a
complete answer always fits the token budget. `bench --structured` measures
speed over it; `scripts/check_structured.py` checks every output validates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ..engine.grammar import OutputFormat

DATA_FILE = "structured_set.json"


@dataclass(frozen=True)
class StructuredCase:
    """One schema and the prompt that asks for it."""

    name: str
    prompt: str
    schema: dict[str, Any]
    example: Any  # an answer the schema accepts

    def output_format(self) -> OutputFormat:
        """The schema as an output constraint, named by the case in messages."""
        return OutputFormat("json_schema", json.dumps(self.schema), origin=f"structured set: {self.name}")


def structured_set(limit: int | None = None) -> tuple[StructuredCase, ...]:
    """The built-in cases in their file's order (the first `limit` of them when given)."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    cases = tuple(StructuredCase(item["name"], item["prompt"], item["schema"], item["example"]) for item in json.loads(text))
    return cases if limit is None else cases[:limit]
