"""Storage and read side: the text of stored events as the index sees it — the document text of
a raw event and whether text holds CJK (which unicode61 cannot split into tokens).

Kept apart from indexer/writer.py so a read (search, session reads) does not load the writer's
record, redaction and title modules.
"""

from __future__ import annotations

import functools
import re

from projections.codec import loads
from projections.extraction import extract_text


#: Han, kana, Hangul, CJK punctuation/compat and fullwidth forms: text unicode61 cannot split.
#: Compiled when first needed: the class's large ranges make it slow to compile, and a read of
#: ASCII text (most queries) never needs it.
@functools.cache
def _cjk() -> re.Pattern[str]:
    return re.compile("[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
                      "\U00020000-\U0003ffff]")


def has_cjk(text: str) -> bool:
    return not text.isascii() and _cjk().search(text) is not None


def text_of(raw: bytes) -> str:
    """The document text of a stored raw event (the index keeps no second copy of it)."""
    return extract_text(loads(raw))
