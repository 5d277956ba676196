"""Internal: the views in their JSON form: the response models HTTP publishes and ``--json`` prints.

Each model is derived from a view in ``views.py`` (its fields, types, defaults and field notes),
never written out again by hand, so the OpenAPI document, the CLI's JSON and the Python objects
cannot drift. Only what JSON needs differently is said here: the transcript as pydantic-ai's JSON,
``total_tokens`` (a property in Python), and the models' published names (``RunOut``...), which
generated HTTP clients use as class names.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from . import views as v
from .runtime.floor import transcript

_CONFIG = ConfigDict(from_attributes=True)


def derive(view: type[Any], name: str, *, types: Mapping[str, Any] | None = None, extra: Mapping[str, tuple[Any, FieldInfo]] | None = None) -> type[BaseModel]:
    """A pydantic model with exactly ``view``'s fields (a dataclass or a TypedDict), named ``name``.

    ``types`` swaps a field's type for its JSON model (a nested view's derived model); ``extra``
    adds fields JSON carries that the view computes (a property). Validation reads attributes, so
    ``Model.model_validate(view_instance)`` is the whole conversion.
    """
    hints = typing.get_type_hints(view)
    swap = dict(types or {})
    fields: dict[str, Any] = {}
    if dataclasses.is_dataclass(view):
        for f in dataclasses.fields(view):
            if f.default is not dataclasses.MISSING:
                info = Field(default=f.default, description=f.metadata.get("doc"))
            elif f.default_factory is not dataclasses.MISSING:
                info = Field(default_factory=f.default_factory, description=f.metadata.get("doc"))
            else:
                info = Field(description=f.metadata.get("doc"))
            fields[f.name] = (swap.pop(f.name, hints[f.name]), info)
    else:  # a TypedDict: every key is required
        for key in view.__annotations__:
            fields[key] = (swap.pop(key, hints[key]), Field())
    if swap:
        raise TypeError(f"{view.__name__} has no field(s) {sorted(swap)}")
    for key, spec in (extra or {}).items():
        fields[key] = spec
    model: type[BaseModel] = create_model(name, __config__=_CONFIG, __doc__=view.__doc__, __module__=__name__, **fields)
    return model


UsageOut = derive(v.Usage, "UsageOut", extra={"total_tokens": (int, Field(description="input_tokens + output_tokens."))})
PendingCallOut = derive(v.PendingCall, "PendingCallOut")
RunOut = derive(v.RunResult, "RunOut", types={"pending": list[PendingCallOut], "usage": UsageOut})  # type: ignore[valid-type]
AttemptOut = derive(v.AttemptRecord, "AttemptOut")
CallOut = derive(v.CallView, "CallOut", types={"attempts": list[AttemptOut]})  # type: ignore[valid-type]
RunRow = derive(v.RunRecord, "RunRow")
CheckpointOut = derive(v.CheckpointRecord, "CheckpointOut")
SessionOut = derive(
    v.SessionView,
    "SessionOut",
    types={
        "messages": list[dict[str, Any]],
        "runs": list[RunRow],  # type: ignore[valid-type]
        "checkpoints": list[CheckpointOut],  # type: ignore[valid-type]
        "calls": list[CallOut],  # type: ignore[valid-type]
    },
)
SessionSummary = derive(v.SessionSummary, "SessionSummary")
ExecutorOut = derive(
    v.ExecutorRecord,
    "ExecutorOut",
    types={"pending_runs": typing.Annotated[int, Field(description="Workflows DBOS still holds pending for this executor id.")],
           "took_over": typing.Annotated[list[str], Field(description="Executors whose runs this one took over.")]},
)

StopOut = derive(v.StopReceipt, "StopOut")


def run_out(result: v.RunResult) -> BaseModel:
    return RunOut.model_validate(result)


def session_out(view: v.SessionView) -> BaseModel:
    """The session with its transcript as pydantic-ai's JSON (exact, also a lone surrogate in a key)."""
    fields = {f.name: getattr(view, f.name) for f in dataclasses.fields(view)}
    return SessionOut.model_validate({**fields, "messages": [transcript.dump(m) for m in view.messages]})


def summary_out(row: v.SessionSummary) -> BaseModel:
    return SessionSummary.model_validate(row)


def executor_out(row: v.ExecutorRecord) -> BaseModel:
    return ExecutorOut.model_validate(row)
