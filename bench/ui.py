"""`recall ui` benchmark (issue 19): server time to render a search results page.
`python -m bench ui`; sizes scale with RECALL_BENCH_SCALE like `bench index` (1 → 1M events).

Corpus: the search benchmark's (bench/search_corpus.py `ensure_corpus`, 2000 sessions × 500
events, cached as JSONL under RECALL_BENCH_DIR), ingested with `Recall.ingest` into a fresh
embedded data dir `<RECALL_BENCH_DIR>/ui-data` (the index bench keeps no indexed data dir to
reuse). RECALL_BENCH_UI_DATA=<that dir> measures a data dir a previous run left instead of
ingesting again (the 1M ingest takes minutes); `ui_corpus_ingest_s_*` is then absent. The query mix is the
search bench's: 90 queries (rare, mid, common; 20 terms + 10 phrases each), interleaved.

Metrics (one run, same machine, same open `Recall`):
- `ui_search_page_ms_<size>`: median server time of `GET /search?q=…`: the ASGI app called
  in-process on one event loop, from the request scope to the last body byte (routing, the
  worker-thread hop, `search_sessions`, the highlighting of each hit's snippet, the jinja2
  render), each query once after one warm-up. No HTTP client in the clock: Starlette's
  TestClient alone adds ~2.5 ms per request here (measured on a static file).
- `ui_search_baseline_p50_ms_<size>`: median `Recall.search_sessions(q)` over the same queries
  in the same run (what `search_p50_ms_<size>` of `bench index` measures).
- `ui_search_page_ratio_vs_search_<size>` = the two medians' ratio (goal ≤ 2).
- `ui_search_page_p99_ms_<size>`, `ui_search_page_bytes_median_<size>`: tail and page size.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.corpus import vocabulary
from bench.index import interleave
from bench.search_corpus import (
    documents,
    fresh_dir,
    median,
    ms,
    percentile,
    query_mix,
    scaled_corpus,
    size_name,
)
from streams.facade import Recall


def log(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


class AsgiGet:
    """GET requests straight into an ASGI app on one event loop: (status, body bytes)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()

    def __call__(self, path: str, query: str) -> tuple[int, bytes]:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": query.encode(), "root_path": "",
                 "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 80)}
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        self.loop.run_until_complete(self.app(scope, receive, send))
        return status, b"".join(chunks)

    def close(self) -> None:
        self.loop.close()


def run() -> dict[str, Any]:
    from streams.faces.ui.app import create_app

    corpus = scaled_corpus()
    files = corpus.files()
    name = size_name(len(files) * 500)
    log("extracting documents for the query mix")
    queries = interleave(query_mix(vocabulary(corpus.seed), documents(files)))
    reuse = os.environ.get("RECALL_BENCH_UI_DATA")
    data = Path(reuse) if reuse else fresh_dir("ui-data")
    out: dict[str, Any] = {}
    with Recall.open(data) as recall:
        if reuse:
            digest = recall.index_digest()
            if digest["events"] != len(files) * 500:
                raise SystemExit(f"bench ui: {data} holds {digest['events']} events, not "
                                 f"{len(files) * 500}")
        else:
            log(f"ingest {len(files)} session files")
            start = time.perf_counter()
            recall.ingest(corpus.parts)
            out[f"ui_corpus_ingest_s_{name}"] = round(time.perf_counter() - start, 1)
        get = AsgiGet(create_app(recall, data_dir=data))
        recall.search_sessions(queries[0][1])
        get("/search", f"q={quote(queries[0][1])}")  # warm-up: templates, statements
        gc.collect()
        log(f"search and search page at {name}, {len(queries)} queries")
        plain, page, sizes = [], [], []
        for _, q in queries:
            start = time.perf_counter()
            recall.search_sessions(q)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            status, body = get("/search", f"q={quote(q)}")
            page.append(time.perf_counter() - start)
            if status != 200 or (b'class="hits"' not in body and b"No matches" not in body):
                raise SystemExit(f"bench ui: /search?q={q!r} answered {status}")
            sizes.append(len(body))
        get.close()
    out[f"ui_search_page_ms_{name}"] = ms(median(page))
    out[f"ui_search_page_p99_ms_{name}"] = ms(percentile(page, 99))
    out[f"ui_search_baseline_p50_ms_{name}"] = ms(median(plain))
    out[f"ui_search_page_ratio_vs_search_{name}"] = round(median(page) / median(plain), 2)
    out[f"ui_search_page_bytes_median_{name}"] = int(median(sizes))
    return out
