"""Which entry a ``resume`` or a ``retry`` is, from what the caller gave (refused, typed, when the
combination names none), and the parts of the input that entry takes."""

from __future__ import annotations

from typing import Literal

from ...errors import ValidationError
from ...ledger.statuses import EntryKind

ResumeMode = Literal["continue", "with_message", "from_checkpoint"]
#: An entry and the input it takes: (kind, message, checkpoint_id).
Entry = tuple[EntryKind, str | None, str | None]


def resume_entry(mode: ResumeMode, message: str | None, checkpoint_id: str | None) -> Entry:
    """Recover the saved step (``continue``), redirect it (``with_message``) or rewind to a saved
    append (``from_checkpoint``)."""
    if mode == "continue":
        if message is not None or checkpoint_id is not None:
            raise ValidationError("resume(mode='continue') takes neither a message nor a checkpoint")
        return "resume_continue", None, None
    if mode == "with_message":
        return "resume_with_message", message, None
    if mode == "from_checkpoint":
        if not checkpoint_id:
            raise ValidationError("resume(mode='from_checkpoint') needs a checkpoint_id")
        return "resume_from_checkpoint", None, checkpoint_id
    raise ValidationError(f"unknown resume mode {mode!r}")


def retry_entry(message: str | None, checkpoint_id: str | None) -> Entry:
    """Recover a failed or interrupted run, or redirect it with ``message`` (at ``checkpoint_id``)."""
    if checkpoint_id is not None:
        if not message:
            raise ValidationError("retry(checkpoint_id=...) needs a message: the message redirects the saved step")
        return "retry_from_checkpoint", message, checkpoint_id
    if message is not None:
        return "retry_with_message", message, None
    return "retry", None, None
