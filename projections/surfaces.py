"""Stage 2 of the flow: tag each event current / shadowed / log-only, derived from the one fold."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from projections.events import as_wire

if TYPE_CHECKING:
    from projections.eventmodels import Event
    from projections.fold import SurfaceFold


class Surface(StrEnum):
    """Where an event stands for the model (PROTOCOL §2, "Classification used by retrieval")."""

    CURRENT = "current"
    SHADOWED = "shadowed"
    LOG_ONLY = "log-only"


SURFACE_VALUES: frozenset[str] = frozenset(s.value for s in Surface)


def surfaces_from_fold(count: int, fold: SurfaceFold, *, base_seq: int = 0) -> list[Surface]:
    """Per-seq surfaces for `count` events starting at `base_seq`, from an existing fold result."""
    out = [Surface.LOG_ONLY] * count
    for rep in fold.replacements:
        for seq in rep.shadowed_seqs:
            if base_seq <= seq < base_seq + count:
                out[seq - base_seq] = Surface.SHADOWED
    for seq in fold.nodes:
        out[seq - base_seq] = Surface.CURRENT
    return out


def classify_surfaces(events: Iterable[Event | Mapping[str, Any]]) -> list[Surface]:
    """One surface per event in seq order; an invalid log raises SESSION_QUERY_INVALID_SURFACE."""
    from projections.fold import fold_surface  # the fold loads with the first log it folds

    listed: Sequence[Mapping[str, Any]] = [as_wire(e) for e in events]
    return surfaces_from_fold(len(listed), fold_surface(listed))
