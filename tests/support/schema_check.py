"""A JSON Schema as a provider receives it: valid Draft 2020-12, and self-contained."""

from __future__ import annotations

from typing import Any

import jsonschema


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [*([node["$ref"]] if isinstance(node.get("$ref"), str) else []), *(r for v in node.values() for r in _refs(v))]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def assert_self_contained(schema: dict[str, Any]) -> None:
    """A valid Draft 2020-12 schema whose every ``$ref`` points inside itself at something that is there."""
    jsonschema.Draft202012Validator.check_schema(schema)
    for ref in _refs(schema):
        assert ref.startswith("#/"), ref
        target: Any = schema
        for key in ref[2:].split("/"):
            assert isinstance(target, dict) and key in target, f"{ref} resolves to nothing in {schema}"
            target = target[key]
    jsonschema.Draft202012Validator(schema).is_valid({})  # resolving every reference while validating raises if one dangles
