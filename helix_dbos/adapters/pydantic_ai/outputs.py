"""A pydantic-ai agent's ``output_type`` read into the one output tool the runtime offers.

The runtime offers structured output as one ``final_result`` tool whose validated argument is the
run's output (stored as JSON). What maps onto that is taken: one type (a model, dataclass,
TypedDict, scalar, generic alias like ``list[X]``), a union of types (``A | B``: one
``final_result`` whose ``response`` is any of them, validated against the union, where
pydantic-ai's own loop offers one tool per member), and ``ToolOutput(T)`` without its own name.
Everything else is refused here, naming the construct and why, before anything is written.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from ...definitions.agents import FINISH_TOOL
from ...errors import UnsupportedFeatureError

_ONE_TOOL = f"the runtime offers structured output as one {FINISH_TOOL!r} tool, recorded as the run's output"


def _is_type(item: Any) -> bool:
    return inspect.isclass(item) or typing.get_origin(item) is not None


def _is_union(output: Any) -> bool:
    return typing.get_origin(output) in (typing.Union, types.UnionType)


def read_output_type(output: Any, agent_name: str) -> Any | None:
    """The type the ``final_result`` tool validates (``None``: text output), or a typed refusal."""
    from pydantic_ai.output import NativeOutput, PromptedOutput, TextOutput, ToolOutput

    where = f"agent {agent_name!r}: output_type="
    if output is str or output is None:
        return None
    if isinstance(output, ToolOutput):
        if output.name not in (None, FINISH_TOOL):
            raise UnsupportedFeatureError(
                f"{where}ToolOutput(..., name={output.name!r}) is not supported, because {_ONE_TOOL}: drop name="
            )
        return read_output_type(output.output, agent_name)
    if isinstance(output, NativeOutput):
        raise UnsupportedFeatureError(
            f"{where}NativeOutput(...) is not supported, because native structured output is JSON text in the "
            f"reply under the provider's response format, and {_ONE_TOOL}: give the type itself"
        )
    if isinstance(output, PromptedOutput):
        raise UnsupportedFeatureError(
            f"{where}PromptedOutput(...) is not supported, because prompted output is JSON text the model is asked "
            f"for in the prompt, and {_ONE_TOOL}: give the type itself"
        )
    if isinstance(output, TextOutput):
        raise UnsupportedFeatureError(
            f"{where}TextOutput(...) is not supported, because its function turns the reply's text into the output "
            "inside pydantic-ai's loop, which does not run here: give str and post-process the run's output"
        )
    if isinstance(output, (list, tuple)):
        raise UnsupportedFeatureError(
            f"{where}[...] (a sequence of output types) is not supported, because pydantic-ai offers one output tool "
            f"per item and {_ONE_TOOL}: give a union (A | B) of the types instead"
        )
    if _is_union(output):
        members = typing.get_args(output)
        if str in members:
            raise UnsupportedFeatureError(
                f"{where}{output!r} is not supported, because a union with str lets a text reply be the output, and "
                f"{_ONE_TOOL}: give the structured types only, or str alone"
            )
        odd = [m for m in members if not (_is_type(m) or m is type(None))]
        if odd:
            raise UnsupportedFeatureError(
                f"{where}{output!r} is not supported, because its members {odd!r} are not types "
                "(output functions or markers): give a union of types"
            )
        return output
    if _is_type(output):
        return output
    if callable(output):
        label = getattr(output, "__qualname__", repr(output))
        raise UnsupportedFeatureError(
            f"{where}{label} (an output function) is not supported, because it would run inside the planning of "
            "a reply, which is replayed on recovery (so it could run again) and has no ledger row to answer it: "
            "give its argument type as output_type and call the function on the run's output"
        )
    raise UnsupportedFeatureError(f"{where}{output!r} is not supported: give a type, a union of types, or str")
