"""Typed errors of pydoca.transfer."""
from __future__ import annotations


class TransferError(Exception):
    """A transfer request or the engine failed; the message names the cause and the fix."""


class SegmentNotFound(TransferError, LookupError):
    """No segment of that name is published (or its owner is gone)."""


class StaleSegment(TransferError):
    """The segment's owner restarted or re-registered it: its generation changed. Open it again."""


class MetadataError(TransferError):
    """The metadata store could not be reached or answered nonsense."""


__all__ = ["MetadataError", "SegmentNotFound", "StaleSegment", "TransferError"]
