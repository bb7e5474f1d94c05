"""Storage and read side: the read path's locks and thread-local state.

They are `threading`'s own (its Lock, RLock and local are these `_thread` types), taken from
`_thread` so that a short read (`recall search`) never imports `threading`, whose import costs
it more than a search. Threads themselves are started with `threading`, where they are needed.
"""

from __future__ import annotations

from _thread import RLock
from _thread import _local as local
from _thread import allocate_lock as Lock

__all__ = ["Lock", "RLock", "local"]
