/* Storage and read side: the SPEC 3.6 match count as a compiled FTS5 auxiliary function.
 *
 * recall_matches(fts) is the number of spans highlight() would mark in the row: the row's phrase
 * instances in column 0, in position order, with overlapping instances merged exactly as FTS5's
 * highlight() merges them (fts5_aux.c, fts5CInstIterNext: an instance starting at or before the
 * end of the open span extends it). Plain xInstCount would count "a a" in "a a a" twice.
 *
 * indexer/matchcount.py holds the same rule in Python (the fallback when this file could not be
 * compiled) and tests/indexer/test_matchcount.py pins the two equal. Built as a CPython extension
 * module only so that setuptools compiles it; SQLite loads it with load_extension() through the
 * entry point below and calls SQLite only through the routines SQLite hands it.
 */
#include <Python.h>
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

/* One phrase (every query of ours): walk its positions in column 0 with xPhraseFirst/Next,
 * which reads the row's position list without building FTS5's instance array. */
static int one_phrase(const Fts5ExtensionApi *api, Fts5Context *fts) {
  Fts5PhraseIter iter;
  int column, offset, count = 0, end = -1, size = api->xPhraseSize(fts, 0);
  if (api->xPhraseFirst(fts, 0, &iter, &column, &offset) != SQLITE_OK) return -1;
  for (; column >= 0; api->xPhraseNext(fts, &iter, &column, &offset)) {
    int last = offset - 1 + size;
    if (column != 0) continue;
    if (count > 0 && offset <= end) {
      if (last > end) end = last;
    } else {
      count++;
      end = last;
    }
  }
  return count;
}

/* The match count of the current row into *out; an SQLite error code on failure. */
static int count_matches(const Fts5ExtensionApi *api, Fts5Context *fts, int *out) {
  int total = 0, count = 0, end = -1, i, rc;
  if (api->xPhraseCount(fts) == 1) {
    count = one_phrase(api, fts);
    if (count >= 0) {
      *out = count;
      return SQLITE_OK;
    }
    count = 0;
  }
  rc = api->xInstCount(fts, &total);
  if (rc != SQLITE_OK) return rc;
  for (i = 0; i < total; i++) {
    int phrase, column, offset, last;
    rc = api->xInst(fts, i, &phrase, &column, &offset);
    if (rc != SQLITE_OK) return rc;
    if (column != 0) continue;
    last = offset - 1 + api->xPhraseSize(fts, phrase);
    if (count > 0 && offset <= end) {
      if (last > end) end = last;
    } else {
      count++;
      end = last;
    }
  }
  *out = count;
  return SQLITE_OK;
}

static void recall_matches(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                           int argc, sqlite3_value **argv) {
  int count = 0, rc;
  (void)argc;
  (void)argv;
  rc = count_matches(api, fts, &count);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  sqlite3_result_int(ctx, count);
}

/* A floor pass (indexer/search.py) wants a shard's best k hits by (match count desc, length key
 * asc), the length key being the low LENGTH_BITS of the document id. ORDER BY ... LIMIT k costs
 * a sorter row and a result row per hit; instead
 *
 *   SELECT recall_floor_take(?3, n) FROM (SELECT count(*) AS n FROM events_fts
 *     WHERE events_fts MATCH ?1 AND recall_floor(events_fts, ?2, ?3))
 *
 * keeps the k best keys in a heap while FTS5 walks the hits (recall_floor is always 0: no row
 * leaves the virtual table, n is 0 and only makes the outer column wait for the walk) and
 * recall_floor_take returns them, best first, as a blob of
 * little-endian int64 pairs (score, document id), the score being
 * count << LENGTH_BITS | (LENGTH_MASK - length key): larger is better. The heap lives in the MATCH query's
 * auxiliary data and is also held by the connection's slot (both counted references), so the
 * outer column can read it while the cursor is open and nothing dangles whichever goes first.
 * The token (a number the caller makes unique) ties the answer to its own query. */
#define LENGTH_MASK 63 /* indexer/schema.py LENGTH_MASK */
#define MAX_FLOOR (1 << 22)

typedef struct {
  sqlite3_int64 score, rowid;
} Entry;

typedef struct {
  int refs, size, used;
  sqlite3_int64 token;
  Entry heap[1];
} Floor;

typedef struct {
  Floor *current; /* the most recently started floor query's heap on this connection */
} Slot;

static void floor_release(void *p) {
  Floor *f = (Floor *)p;
  if (f != 0 && --f->refs == 0) sqlite3_free(f);
}

static void slot_destroy(void *p) {
  Slot *slot = (Slot *)p;
  floor_release(slot->current);
  sqlite3_free(slot);
}

/* Min-heap on score: the root is the k-th best key kept so far. */
static void floor_sift_down(Entry *heap, int used, int i) {
  Entry moving = heap[i];
  int child;
  while ((child = 2 * i + 1) < used) {
    if (child + 1 < used && heap[child + 1].score < heap[child].score) child++;
    if (heap[child].score >= moving.score) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = moving;
}

static void floor_push(Floor *f, Entry e) {
  int i = f->used++, parent;
  while (i > 0 && f->heap[parent = (i - 1) / 2].score > e.score) {
    f->heap[i] = f->heap[parent];
    i = parent;
  }
  f->heap[i] = e;
}

static void recall_floor(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                         int argc, sqlite3_value **argv) {
  Floor *f;
  Entry e;
  int count = 0, rc;
  sqlite3_result_int(ctx, 0);
  if (argc != 2) {
    sqlite3_result_error(ctx, "recall_floor(fts, k, token) takes two arguments after the table",
                         -1);
    return;
  }
  f = (Floor *)api->xGetAuxdata(fts, 0);
  if (f == 0) {
    Slot *slot = (Slot *)api->xUserData(fts);
    sqlite3_int64 size = sqlite3_value_int64(argv[0]);
    if (size < 1 || size > MAX_FLOOR) {
      sqlite3_result_error(ctx, "recall_floor: k out of range", -1);
      return;
    }
    f = (Floor *)sqlite3_malloc64(sizeof(Floor) + (size_t)size * sizeof(Entry));
    if (f == 0) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
    f->refs = 1;
    f->size = (int)size;
    f->used = 0;
    f->token = sqlite3_value_int64(argv[1]);
    rc = api->xSetAuxdata(fts, f, floor_release);
    if (rc != SQLITE_OK) { /* xSetAuxdata has already called floor_release on it */
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    f->refs++;
    floor_release(slot->current);
    slot->current = f;
  }
  rc = count_matches(api, fts, &count);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  e.rowid = api->xRowid(fts);
  /* Larger is better: the count first, then the shorter length key. */
  e.score = (sqlite3_int64)count * (LENGTH_MASK + 1) + (LENGTH_MASK - (e.rowid & LENGTH_MASK));
  if (f->used < f->size) {
    floor_push(f, e);
  } else if (e.score > f->heap[0].score) {
    f->heap[0] = e;
    floor_sift_down(f->heap, f->used, 0);
  }
}

static void recall_floor_take(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  Slot *slot = (Slot *)sqlite3_user_data(ctx);
  Floor *f = slot->current;
  unsigned char *out;
  int n, i;
  (void)argc;
  if (f == 0 || f->token != sqlite3_value_int64(argv[0])) { /* no hit: recall_floor never ran */
    sqlite3_result_zeroblob(ctx, 0);
    return;
  }
  n = f->used;
  out = (unsigned char *)sqlite3_malloc64((sqlite3_uint64)n * 16 + 1);
  if (out == 0) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  /* Pop the worst key each time and fill from the end: best first. Leaves the heap empty. */
  for (i = n - 1; i >= 0; i--) {
    Entry worst = f->heap[0];
    int b;
    f->heap[0] = f->heap[--f->used];
    if (f->used > 0) floor_sift_down(f->heap, f->used, 0);
    for (b = 0; b < 8; b++) {
      out[16 * i + b] = (unsigned char)((sqlite3_uint64)worst.score >> (8 * b));
      out[16 * i + 8 + b] = (unsigned char)((sqlite3_uint64)worst.rowid >> (8 * b));
    }
  }
  slot->current = 0;
  floor_release(f);
  sqlite3_result_blob(ctx, out, n * 16, sqlite3_free);
}

/* recall_top(fts, k): the MATCH query's best k hits, walked in one call. On the query's first
 * row (the statement asks for one: LIMIT 1) it runs xQueryPhrase over phrase 0 — every row the
 * query matches, since ours are single phrases — and keeps the best k keys in a heap straight
 * from FTS5's iterator: no VDBE row, sorter row or result row per hit. The result is the same
 * blob as recall_floor_take's. */
typedef struct {
  int size, used, rc;
  Entry *heap;
} Top;

static int top_visit(const Fts5ExtensionApi *api, Fts5Context *fts, void *user) {
  Top *top = (Top *)user;
  Entry e;
  int count = 0, rc = count_matches(api, fts, &count);
  if (rc != SQLITE_OK) return rc;
  e.rowid = api->xRowid(fts);
  e.score = (sqlite3_int64)count * (LENGTH_MASK + 1) + (LENGTH_MASK - (e.rowid & LENGTH_MASK));
  if (top->used < top->size) {
    int i = top->used++, parent;
    while (i > 0 && top->heap[parent = (i - 1) / 2].score > e.score) {
      top->heap[i] = top->heap[parent];
      i = parent;
    }
    top->heap[i] = e;
  } else if (e.score > top->heap[0].score) {
    top->heap[0] = e;
    floor_sift_down(top->heap, top->used, 0);
  }
  return SQLITE_OK;
}

static void recall_top(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                       int argc, sqlite3_value **argv) {
  Top top;
  sqlite3_int64 size;
  unsigned char *out;
  int rc, i;
  if (argc != 1) {
    sqlite3_result_error(ctx, "recall_top(fts, k) takes one argument after the table", -1);
    return;
  }
  if (api->xPhraseCount(fts) != 1) {
    sqlite3_result_error(ctx, "recall_top: the query must be one phrase", -1);
    return;
  }
  size = sqlite3_value_int64(argv[0]);
  if (size < 1 || size > MAX_FLOOR) {
    sqlite3_result_error(ctx, "recall_top: k out of range", -1);
    return;
  }
  top.size = (int)size;
  top.used = 0;
  top.heap = (Entry *)sqlite3_malloc64((sqlite3_uint64)size * sizeof(Entry));
  out = (unsigned char *)sqlite3_malloc64((sqlite3_uint64)size * 16 + 1);
  if (top.heap == 0 || out == 0) {
    sqlite3_free(top.heap);
    sqlite3_free(out);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  rc = api->xQueryPhrase(fts, 0, &top, top_visit);
  if (rc != SQLITE_OK) {
    sqlite3_free(top.heap);
    sqlite3_free(out);
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  /* Pop the worst key each time and fill from the end: best first. */
  for (i = top.used - 1; i >= 0; i--) {
    Entry worst = top.heap[0];
    int b, n = i;
    top.heap[0] = top.heap[n];
    if (n > 0) floor_sift_down(top.heap, n, 0);
    for (b = 0; b < 8; b++) {
      out[16 * i + b] = (unsigned char)((sqlite3_uint64)worst.score >> (8 * b));
      out[16 * i + 8 + b] = (unsigned char)((sqlite3_uint64)worst.rowid >> (8 * b));
    }
  }
  sqlite3_free(top.heap);
  sqlite3_result_blob(ctx, out, (int)(16 * (sqlite3_int64)top.used), sqlite3_free);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_matchcount_v2_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
  fts5_api *fts = 0;
  sqlite3_stmt *stmt = 0;
  Slot *slot;
  int rc;
  (void)error;
  SQLITE_EXTENSION_INIT2(routines);
  rc = sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, 0);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_pointer(stmt, 1, (void *)&fts, "fts5_api_ptr", 0);
  sqlite3_step(stmt);
  rc = sqlite3_finalize(stmt);
  if (rc != SQLITE_OK) return rc;
  if (fts == 0 || fts->iVersion < 2) return SQLITE_ERROR;
  rc = fts->xCreateFunction(fts, "recall_matches", 0, recall_matches, 0);
  if (rc != SQLITE_OK) return rc;
  rc = fts->xCreateFunction(fts, "recall_top", 0, recall_top, 0);
  if (rc != SQLITE_OK) return rc;
  slot = (Slot *)sqlite3_malloc(sizeof(Slot));
  if (slot == 0) return SQLITE_NOMEM;
  slot->current = 0;
  rc = fts->xCreateFunction(fts, "recall_floor", slot, recall_floor, slot_destroy);
  if (rc != SQLITE_OK) { /* FTS5 does not call the destructor of a function it failed to add */
    sqlite3_free(slot);
    return rc;
  }
  /* The slot belongs to recall_floor (freed when the connection closes its FTS5 module). */
  return sqlite3_create_function_v2(db, "recall_floor_take", 2, SQLITE_UTF8, slot,
                                    recall_floor_take, 0, 0, 0);
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_matchcount",
                                    "SQLite loadable extension: recall_matches(), recall_floor()", -1, NULL};

PyMODINIT_FUNC PyInit__matchcount(void) { return PyModule_Create(&module); }
