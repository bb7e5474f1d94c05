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
#include <string.h>
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

static void top_keep(Top *top, sqlite3_int64 rowid, int count);

/* The kept rows as the packed answer, best first: pop the worst key each time and fill from
   the end (16 bytes a row: score, rowid, little-endian). Empties the heap. */
static void pack_top(Top *top, unsigned char *out) {
  int i;
  for (i = top->used - 1; i >= 0; i--) {
    Entry worst = top->heap[0];
    int b, n = i;
    top->heap[0] = top->heap[n];
    if (n > 0) floor_sift_down(top->heap, n, 0);
    for (b = 0; b < 8; b++) {
      out[16 * i + b] = (unsigned char)((sqlite3_uint64)worst.score >> (8 * b));
      out[16 * i + 8 + b] = (unsigned char)((sqlite3_uint64)worst.rowid >> (8 * b));
    }
  }
}


static int top_visit(const Fts5ExtensionApi *api, Fts5Context *fts, void *user) {
  int count = 0, rc = count_matches(api, fts, &count);
  if (rc != SQLITE_OK) return rc;
  top_keep((Top *)user, api->xRowid(fts), count);
  return SQLITE_OK;
}

static void recall_top(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                       int argc, sqlite3_value **argv) {
  Top top;
  sqlite3_int64 size;
  unsigned char *out;
  int rc;
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
  pack_top(&top, out);
  sqlite3_free(top.heap);
  sqlite3_result_blob(ctx, out, (int)(16 * (sqlite3_int64)top.used), sqlite3_free);
}

/* recall_scan(k, token, ...): recall_top's answer for the one-phrase query of these tokens
 * (the table's own tokenizer's output for the query), read straight from the events_fts
 * segment that holds every document, without FTS5's per-row iterator and callbacks: the term's
 * doclist is copied out of its leaf pages once and walked as plain varints (format:
 * SQLite's ext/fts5/fts5_index.c). Rows are visited in rowid order and kept in the same heap
 * as recall_top's, so the blob is byte for byte the same. NULL when the table is in any other
 * shape (several segments, the V2 structure, delete markers, anything unexpected): the caller
 * then asks recall_top. */
#define SCAN_MAX_TOKENS 16
#define SCAN_MAX_TERM 2048

static int scan_varint(const unsigned char *p, const unsigned char *end, sqlite3_uint64 *out) {
  sqlite3_uint64 v = 0;
  int i;
  if (p < end && *p < 0x80) { /* most values: one byte */
    *out = *p;
    return 1;
  }
  for (i = 0; i < 9; i++) {
    if (p + i >= end) return 0;
    if (i == 8) {
      *out = (v << 8) | p[i];
      return 9;
    }
    v = (v << 7) | (p[i] & 0x7f);
    if (!(p[i] & 0x80)) {
      *out = v;
      return i + 1;
    }
  }
  return 0;
}

/* A varint of a doclist buffer, which ends in DOCLIST_PAD zero bytes (so no read runs past
 * it): the byte after it. */
#define DOCLIST_PAD 16
static inline const unsigned char *doclist_varint(const unsigned char *p, sqlite3_uint64 *v) {
  unsigned int b0 = p[0], b1 = p[1];
  if (!(b0 & b1 & 0x80)) {
    /* One or two bytes, without a branch on which: rowid deltas are about as often one as
     * the other, and a mispredicted branch per entry was most of a long walk's time. */
    unsigned int two = b0 >> 7;
    *v = ((sqlite3_uint64)(b0 & 0x7f) << (7 * two)) | (b1 & (0u - two));
    return p + 1 + two;
  }
  if (!(p[2] & 0x80)) {
    *v = ((sqlite3_uint64)(b0 & 0x7f) << 14) | ((sqlite3_uint64)(b1 & 0x7f) << 7) | p[2];
    return p + 3;
  }
  return p + scan_varint(p, p + 9, v);
}

typedef struct {
  unsigned char *buf;
  sqlite3_int64 n, cap;
  sqlite3_int64 *marks; /* offsets in buf where a rowid is stored whole, not as a delta */
  int nmarks, capmarks;
} Doclist;

static void doclist_free(Doclist *d) {
  sqlite3_free(d->buf);
  sqlite3_free(d->marks);
  memset(d, 0, sizeof(*d));
}

static int doclist_append(Doclist *d, const unsigned char *p, sqlite3_int64 n) {
  if (n <= 0) return SQLITE_OK;
  if (d->n + n + DOCLIST_PAD > d->cap) {
    sqlite3_int64 cap = d->cap ? d->cap : 4096;
    unsigned char *grown;
    while (cap < d->n + n + DOCLIST_PAD) cap *= 2;
    grown = (unsigned char *)sqlite3_realloc64(d->buf, (sqlite3_uint64)cap);
    if (grown == 0) return SQLITE_NOMEM;
    d->buf = grown;
    d->cap = cap;
  }
  memcpy(d->buf + d->n, p, (size_t)n);
  d->n += n;
  memset(d->buf + d->n, 0, DOCLIST_PAD);
  return SQLITE_OK;
}

static int doclist_mark(Doclist *d, sqlite3_int64 at) {
  if (d->nmarks > 0 && d->marks[d->nmarks - 1] >= at) {
    return d->marks[d->nmarks - 1] == at ? SQLITE_OK : SQLITE_CORRUPT;
  }
  if (d->nmarks == d->capmarks) {
    int cap = d->capmarks ? d->capmarks * 2 : 64;
    sqlite3_int64 *grown =
        (sqlite3_int64 *)sqlite3_realloc64(d->marks, (sqlite3_uint64)cap * sizeof(sqlite3_int64));
    if (grown == 0) return SQLITE_NOMEM;
    d->marks = grown;
    d->capmarks = cap;
  }
  d->marks[d->nmarks++] = at;
  return SQLITE_OK;
}

#define SEGMENT_ROWID(segid, pgno) (((sqlite3_int64)(segid) << 37) + (sqlite3_int64)(pgno))

/* The one segment of events_fts: SQLITE_OK with *segid set; SQLITE_DONE if the table has any
 * other shape. */
static int scan_segment(sqlite3 *db, int *segid, int *first, int *last) {
  sqlite3_stmt *st = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT block FROM events_fts_data WHERE id = 10", -1, &st, 0);
  const unsigned char *a, *end;
  sqlite3_uint64 levels, segments, writes, v[3];
  int n, k, i, j, found = 0;
  if (rc != SQLITE_OK) return SQLITE_DONE; /* no events_fts here */
  rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_DONE : rc;
  }
  a = (const unsigned char *)sqlite3_column_blob(st, 0);
  n = sqlite3_column_bytes(st, 0);
  rc = SQLITE_DONE;
  if (a == 0 || n < 8 || (a[4] == 0xff && a[5] == 0x00 && a[6] == 0x00 && a[7] == 0x01)) goto out;
  end = a + n;
  a += 4;
  if (!(k = scan_varint(a, end, &levels))) goto out;
  a += k;
  if (!(k = scan_varint(a, end, &segments))) goto out;
  a += k;
  if (!(k = scan_varint(a, end, &writes))) goto out;
  a += k;
  if (segments != 1 || levels > 64) goto out;
  for (i = 0; i < (int)levels; i++) {
    sqlite3_uint64 merge, nseg;
    if (!(k = scan_varint(a, end, &merge))) goto out;
    a += k;
    if (!(k = scan_varint(a, end, &nseg))) goto out;
    a += k;
    if (nseg > 1) goto out;
    for (j = 0; j < (int)nseg; j++) {
      int f;
      for (f = 0; f < 3; f++) {
        if (!(k = scan_varint(a, end, &v[f]))) goto out;
        a += k;
      }
      if (v[0] == 0 || v[0] > 65535 || v[1] == 0 || v[2] < v[1] || v[2] > 0x7fffffff) goto out;
      *segid = (int)v[0];
      *first = (int)v[1];
      *last = (int)v[2];
      found++;
    }
  }
  if (found == 1) rc = SQLITE_OK;
out:
  sqlite3_finalize(st);
  return rc;
}

/* The doclist of `key` (the index's term: '0' then the token) in segment `segid`, copied out of
 * its leaf pages: SQLITE_OK (d->n == 0 if the term is absent), SQLITE_DONE for anything this
 * reader does not expect, or an error. */
static int scan_doclist(sqlite3 *db, int segid, int first, int last, const unsigned char *key,
                        int nkey, Doclist *d) {
  sqlite3_stmt *idx = 0, *pages = 0;
  unsigned char term[SCAN_MAX_TERM];
  int rc, pg = first, tlen = 0, on_first = 1;
  sqlite3_int64 expect;
  rc = sqlite3_prepare_v2(db,
                          "SELECT pgno FROM events_fts_idx WHERE segid = ?1 AND term <= ?2"
                          " ORDER BY term DESC LIMIT 1", -1, &idx, 0);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_int(idx, 1, segid);
  sqlite3_bind_blob(idx, 2, key, nkey, SQLITE_STATIC);
  rc = sqlite3_step(idx);
  if (rc == SQLITE_ROW) {
    pg = (int)(sqlite3_column_int64(idx, 0) >> 1);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_OK;
  }
  sqlite3_finalize(idx);
  if (rc != SQLITE_OK) return rc;
  if (pg < first) pg = first;
  if (pg > last) return SQLITE_OK;
  rc = sqlite3_prepare_v2(db, "SELECT id, block FROM events_fts_data WHERE id BETWEEN ?1 AND ?2",
                          -1, &pages, 0);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_int64(pages, 1, SEGMENT_ROWID(segid, pg));
  sqlite3_bind_int64(pages, 2, SEGMENT_ROWID(segid, last));
  expect = SEGMENT_ROWID(segid, pg);
  for (;;) {
    const unsigned char *a;
    int nn, row_off, sz_leaf, termless, k;
    rc = sqlite3_step(pages);
    if (rc == SQLITE_DONE) {
      rc = on_first ? SQLITE_DONE : SQLITE_OK; /* (the idx pointed past the pages) */
      break;
    }
    if (rc != SQLITE_ROW) break;
    if (sqlite3_column_int64(pages, 0) != expect++) {
      rc = SQLITE_DONE; /* a missing leaf: not a shape this reader knows */
      break;
    }
    a = (const unsigned char *)sqlite3_column_blob(pages, 1);
    nn = sqlite3_column_bytes(pages, 1);
    rc = SQLITE_DONE;
    if (a == 0 || nn < 4) break;
    row_off = (a[0] << 8) | a[1];
    sz_leaf = (a[2] << 8) | a[3];
    if (sz_leaf < 4 || sz_leaf > nn) break;
    termless = sz_leaf >= nn;
    if (on_first) {
      /* Find the term among the page's terms (fts5LeafSeek): the footer holds their offsets. */
      const unsigned char *foot = a + sz_leaf, *end = a + nn;
      sqlite3_uint64 value;
      int term_off, next_off, off, first_term = 1;
      if (termless) break;
      if (!(k = scan_varint(foot, end, &value))) break;
      foot += k;
      term_off = (int)value;
      for (;;) {
        sqlite3_uint64 keep = 0, fresh;
        int cmp, m;
        off = term_off;
        if (off < 4 || off >= sz_leaf) goto corrupt;
        if (!first_term) {
          if (!(k = scan_varint(a + off, a + sz_leaf, &keep))) goto corrupt;
          off += k;
        }
        if (!(k = scan_varint(a + off, a + sz_leaf, &fresh))) goto corrupt;
        off += k;
        if (keep > (sqlite3_uint64)tlen || keep + fresh > SCAN_MAX_TERM ||
            off + (sqlite3_int64)fresh > sz_leaf)
          goto corrupt;
        memcpy(term + keep, a + off, (size_t)fresh);
        tlen = (int)(keep + fresh);
        off += (int)fresh;
        next_off = -1;
        if (foot < end) {
          if (!(k = scan_varint(foot, end, &value))) goto corrupt;
          foot += k;
          next_off = term_off + (int)value;
        }
        m = tlen < nkey ? tlen : nkey;
        cmp = memcmp(term, key, (size_t)m);
        if (cmp == 0) cmp = tlen - nkey;
        if (cmp > 0 || (cmp < 0 && next_off < 0)) { /* absent */
          rc = SQLITE_OK;
          goto done;
        }
        if (cmp == 0) {
          rc = doclist_mark(d, 0);
          if (rc == SQLITE_OK) rc = doclist_append(d, a + off, (next_off < 0 ? sz_leaf : next_off) - off);
          if (rc != SQLITE_OK || next_off >= 0) goto done; /* (ends on this page) */
          break;
        }
        term_off = next_off;
        first_term = 0;
      }
      on_first = 0;
      rc = SQLITE_OK;
      continue;
    }
    {
      /* A following page: [4, first rowid) ends the previous entry, a rowid stored whole
       * follows; the doclist ends at the page's first term, if it has one. */
      int end_off = sz_leaf;
      if (!termless) {
        sqlite3_uint64 value;
        if (!(k = scan_varint(a + sz_leaf, a + nn, &value))) break;
        end_off = (int)value;
        if (end_off < 4 || end_off > sz_leaf) break;
      }
      if (row_off != 0) {
        if (row_off < 4 || row_off >= end_off) break;
        rc = doclist_mark(d, d->n + row_off - 4);
        if (rc != SQLITE_OK) break;
      }
      rc = doclist_append(d, a + 4, end_off - 4);
      if (rc != SQLITE_OK || !termless) break;
    }
  }
  goto done;
corrupt:
  rc = SQLITE_DONE;
done:
  sqlite3_finalize(pages);
  return rc;
}

typedef struct {
  const Doclist *d;
  sqlite3_int64 pos;
  int mark;
  sqlite3_int64 next_mark; /* marks[mark], or past the end */
  sqlite3_int64 ahead;     /* the rowid stored at marks[mark], or past any rowid */
  sqlite3_int64 rowid;
  const unsigned char *list; /* the current entry's position list */
  int nlist;
  int eof;
} Reader;

/* The rowid stored whole at mark m. */
static inline sqlite3_int64 mark_rowid(const Doclist *d, int m) {
  sqlite3_uint64 value;
  doclist_varint(d->buf + d->marks[m], &value);
  return (sqlite3_int64)value;
}

#define NO_ROWID ((sqlite3_int64)(((sqlite3_uint64)1 << 63) - 1))

/* The next entry: 1, 0 at the end, -1 on what this reader does not expect. */
static inline int reader_next(Reader *r) {
  const Doclist *d = r->d;
  const unsigned char *p;
  sqlite3_uint64 value, header;
  sqlite3_int64 at = r->pos;
  if (at >= d->n) {
    r->eof = 1;
    return 0;
  }
  p = doclist_varint(d->buf + at, &value);
  if (at >= r->next_mark) {
    if (at != r->next_mark) return -1; /* an entry across a stored rowid */
    r->rowid = (sqlite3_int64)value;
    r->mark++;
    if (r->mark < d->nmarks) {
      r->next_mark = d->marks[r->mark];
      r->ahead = mark_rowid(d, r->mark);
    } else {
      r->next_mark = d->n + 1;
      r->ahead = NO_ROWID;
    }
  } else {
    if (value == 0 || at == 0) return -1;
    r->rowid += (sqlite3_int64)value;
  }
  p = doclist_varint(p, &header);
  at = p - d->buf;
  if ((header & 1) || at + (sqlite3_int64)(header >> 1) > d->n) return -1; /* a delete marker */
  r->list = p;
  r->nlist = (int)(header >> 1);
  r->pos = at + (sqlite3_int64)(header >> 1);
  return 1;
}

/* Advance to the first entry at or past `target` (1, 0 at the end, -1 as reader_next). Each
 * leaf page's first rowid is stored whole (a mark), so a target pages ahead — a phrase of a
 * rare and a common token — is reached by a binary search over the marks, not entry by entry
 * (what FTS5's doclist index does). */
static void reader_jump(Reader *r, sqlite3_int64 target) {
  const Doclist *d = r->d;
  int lo = r->mark, hi = d->nmarks - 1; /* the last mark at or before target */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (mark_rowid(d, mid) <= target) lo = mid;
    else hi = mid - 1;
  }
  r->mark = lo;
  r->pos = d->marks[lo];
  r->next_mark = d->marks[lo];
  r->ahead = mark_rowid(d, lo);
}

static inline int reader_seek(Reader *r, sqlite3_int64 target) {
  int k = 1;
  if (r->rowid >= target && r->pos > 0) return 1;
  if (r->ahead <= target) reader_jump(r, target); /* (the next leaf page's first rowid) */
  while ((r->rowid < target || r->pos == 0) && (k = reader_next(r)) > 0) {
  }
  return k;
}

/* The positions of column 0 in a position list into out (at most max): how many, or -1. */
static int scan_positions(const unsigned char *p, int n, int *out, int max) {
  const unsigned char *end = p + n;
  sqlite3_uint64 value;
  int count = 0, k;
  sqlite3_int64 at = 0;
  if (out == 0) {
    /* Counting only: each varint ends with its one byte below 0x80; 0 and 1 (a column
     * marker) stand alone only as such a byte after another varint's end, so any of them
     * sends the list to the full decode below. */
    const unsigned char *q = p;
    int ends = 0, odd = 0;
    for (; q < end; q++) {
      if (*q < 0x80) {
        ends++;
        odd |= (*q <= 1) && (q == p || q[-1] < 0x80);
      }
    }
    if (!odd && (n == 0 || end[-1] < 0x80)) return ends;
  }
  while (p < end) {
    if (!(k = scan_varint(p, end, &value))) return -1;
    p += k;
    if (value == 0) return -1;
    if (value == 1) break; /* the next column's positions: not column 0 */
    at += (sqlite3_int64)value - 2;
    if (out != 0) {
      if (count >= max) return -1;
      out[count] = (int)at;
    }
    count++;
  }
  return count;
}

/* Whether a row with at most `most` matches cannot enter a full heap: its score could at
 * best tie the k-th kept one, and top_keep replaces only on a strictly larger score. A position
 * takes at least one byte of a position list, so its size in bytes bounds the count (of one
 * token, and so of a phrase: at most as many instances as its rarest token's positions). */
static inline int top_beyond(const Top *top, sqlite3_int64 rowid, int most) {
  return top->used == top->size &&
         (sqlite3_int64)most * (LENGTH_MASK + 1) + (LENGTH_MASK - (rowid & LENGTH_MASK)) <=
             top->heap[0].score;
}

static void top_keep(Top *top, sqlite3_int64 rowid, int count) {
  Entry e;
  e.rowid = rowid;
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
}

/* The phrase instances in the readers' current rows (all on one rowid), merged the way
 * highlight() merges them: the match count, or -1. */
static int scan_phrase_count(Reader *r, int ntok, int **pos, int *cap) {
  int n[SCAN_MAX_TOKENS], i, t, count = 0, end = -1;
  int at[SCAN_MAX_TOKENS];
  for (t = 0; t < ntok; t++) {
    /* (a list of n bytes holds at most n positions) */
    int need = r[t].nlist;
    if (need > cap[t]) {
      int *grown = (int *)sqlite3_realloc64(pos[t], (sqlite3_uint64)need * sizeof(int));
      if (grown == 0) return -1;
      pos[t] = grown;
      cap[t] = need;
    }
    n[t] = scan_positions(r[t].list, r[t].nlist, pos[t], cap[t]);
    if (n[t] < 0) return -1;
    at[t] = 0;
  }
  for (i = 0; i < n[0]; i++) {
    int p = pos[0][i], ok = 1;
    for (t = 1; t < ntok && ok; t++) {
      while (at[t] < n[t] && pos[t][at[t]] < p + t) at[t]++;
      ok = at[t] < n[t] && pos[t][at[t]] == p + t;
    }
    if (!ok) continue;
    if (count > 0 && p <= end) {
      if (p + ntok - 1 > end) end = p + ntok - 1;
    } else {
      count++;
      end = p + ntok - 1;
    }
  }
  return count;
}

/* A connection's doclist buffers, kept from one recall_scan to the next (up to SCAN_KEEP bytes
 * in all, so a search process holds at most that much per shard connection): copying a long
 * doclist into fresh memory cost as much in page faults and regrowth as in the copy itself. A
 * call while they are in use (a nested one) copies into its own. */
#define SCAN_KEEP (8 << 20)
typedef struct {
  int busy;
  Doclist lists[SCAN_MAX_TOKENS];
} ScanCache;

static void scan_cache_destroy(void *p) {
  ScanCache *cache = (ScanCache *)p;
  int t;
  for (t = 0; t < SCAN_MAX_TOKENS; t++) doclist_free(&cache->lists[t]);
  sqlite3_free(cache);
}

static void recall_scan(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  ScanCache *cache = (ScanCache *)sqlite3_user_data(ctx);
  Doclist own[SCAN_MAX_TOKENS], *lists = own;
  sqlite3_int64 kept = 0;
  Reader r[SCAN_MAX_TOKENS];
  int *pos[SCAN_MAX_TOKENS], cap[SCAN_MAX_TOKENS];
  unsigned char key[SCAN_MAX_TERM + 1];
  Top top;
  sqlite3_int64 size;
  unsigned char *out = 0;
  int ntok = argc - 1, segid = 0, first = 0, last = 0, rc, t, bad = 0, empty = 0;
  if (argc < 2 || ntok > SCAN_MAX_TOKENS) return; /* NULL: recall_top answers */
  size = sqlite3_value_int64(argv[0]);
  if (size < 1 || size > MAX_FLOOR) {
    sqlite3_result_error(ctx, "recall_scan: k out of range", -1);
    return;
  }
  /* A connection inside a write transaction may hold FTS5 rows not yet flushed to a segment
   * (readers never do): recall_top sees those, so it answers. */
  if (sqlite3_txn_state(db, "main") == SQLITE_TXN_WRITE) return;
  rc = scan_segment(db, &segid, &first, &last);
  if (rc == SQLITE_DONE) return;
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  if (cache != 0 && !cache->busy) {
    cache->busy = 1;
    lists = cache->lists;
    for (t = 0; t < SCAN_MAX_TOKENS; t++) lists[t].n = lists[t].nmarks = 0;
  } else {
    cache = 0;
    memset(own, 0, sizeof(own));
  }
  memset(r, 0, sizeof(r));
  memset(pos, 0, sizeof(pos));
  memset(cap, 0, sizeof(cap));
  top.heap = 0;
  for (t = 0; t < ntok && !bad && !empty; t++) {
    const unsigned char *token = sqlite3_value_text(argv[t + 1]);
    int ntoken = sqlite3_value_bytes(argv[t + 1]);
    if (token == 0 || ntoken < 1 || ntoken >= SCAN_MAX_TERM) {
      bad = 1;
      break;
    }
    key[0] = '0'; /* the main index's prefix byte (FTS5_MAIN_PREFIX) */
    memcpy(key + 1, token, (size_t)ntoken);
    rc = scan_doclist(db, segid, first, last, key, ntoken + 1, &lists[t]);
    if (rc == SQLITE_DONE) bad = 1;
    else if (rc != SQLITE_OK) goto error;
    else if (lists[t].n == 0) empty = 1;
    r[t].d = &lists[t];
    r[t].next_mark = lists[t].nmarks > 0 ? lists[t].marks[0] : lists[t].n + 1;
    r[t].ahead = lists[t].nmarks > 0 ? mark_rowid(&lists[t], 0) : NO_ROWID;
  }
  if (bad) goto cleanup; /* NULL */
  top.size = (int)size;
  top.used = 0;
  top.heap = (Entry *)sqlite3_malloc64((sqlite3_uint64)size * sizeof(Entry));
  if (top.heap == 0) {
    rc = SQLITE_NOMEM;
    goto error;
  }
  if (!empty) {
    if (ntok == 1) {
      int k;
      while ((k = reader_next(&r[0])) > 0) {
        int count;
        if (top_beyond(&top, r[0].rowid, r[0].nlist)) continue;
        count = scan_positions(r[0].list, r[0].nlist, 0, 0);
        if (count < 0) break;
        top_keep(&top, r[0].rowid, count);
      }
      if (k != 0) bad = 1;
    } else {
      /* The rarest token's list drives the walk. A row whose driving list alone bounds its
       * count below entering the full heap (top_beyond) is passed without reading the other
       * lists there: they advance only to rows that may enter, and a row leaf pages ahead is
       * reached by reader_seek's binary search over the marks. Only rows the full walk would
       * also pass unkept are passed, in the same rowid order, so the heap is the same. */
      int drive = 0;
      for (t = 1; t < ntok; t++)
        if (lists[t].n < lists[drive].n) drive = t;
      for (t = 0; t < ntok && !bad; t++)
        if (reader_next(&r[t]) < 0) bad = 1;
      while (!bad) {
        sqlite3_int64 at = r[drive].rowid, target = at;
        int same = 1, k = 1;
        if (r[drive].eof) break;
        if (!top_beyond(&top, at, r[drive].nlist)) {
          for (t = 0; t < ntok && k > 0; t++) {
            if (t == drive) continue;
            if (r[t].eof) k = 0;
            else if (r[t].rowid < at) k = reader_seek(&r[t], at);
            if (k > 0 && r[t].rowid != at) {
              same = 0;
              if (r[t].rowid > target) target = r[t].rowid;
            }
          }
          if (k < 0) bad = 1;
          if (k <= 0) break;
          if (!same) { /* no row of them all before target */
            if ((k = reader_seek(&r[drive], target)) <= 0) {
              if (k < 0) bad = 1;
              break;
            }
            continue;
          }
          {
            int count, most = r[0].nlist;
            for (t = 1; t < ntok; t++)
              if (r[t].nlist < most) most = r[t].nlist;
            if (top_beyond(&top, at, most)) {
              count = 0; /* (cannot enter the heap: skip its positions) */
            } else {
              count = scan_phrase_count(r, ntok, pos, cap);
            }
            if (count < 0) {
              bad = 1;
              break;
            }
            if (count > 0) top_keep(&top, at, count);
          }
        }
        if ((k = reader_next(&r[drive])) <= 0) {
          if (k < 0) bad = 1;
          break;
        }
      }
    }
  }
  if (bad) goto cleanup;
  out = (unsigned char *)sqlite3_malloc64((sqlite3_uint64)top.used * 16 + 1);
  if (out == 0) {
    rc = SQLITE_NOMEM;
    goto error;
  }
  pack_top(&top, out);
  sqlite3_result_blob(ctx, out, (int)(16 * (sqlite3_int64)top.used), sqlite3_free);
  goto cleanup;
error:
  sqlite3_result_error_code(ctx, rc);
cleanup:
  sqlite3_free(top.heap);
  for (t = 0; t < SCAN_MAX_TOKENS; t++) {
    if (cache != 0 && kept + lists[t].cap <= SCAN_KEEP) kept += lists[t].cap;
    else doclist_free(&lists[t]);
    sqlite3_free(pos[t]);
  }
  if (cache != 0) cache->busy = 0;
}

/* recall_scan_pages(token, ...): how many leaf pages the largest of the tokens' doclists
 * spans in events_fts's one segment (from the term index alone: where the term's page is and
 * where the next indexed term starts), NULL where recall_scan would be NULL. A cheap guess at
 * what a floor pass will cost, before running it. */
static void recall_scan_pages(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  sqlite3_stmt *at = 0, *after = 0;
  unsigned char key[SCAN_MAX_TERM + 1];
  int segid = 0, first = 0, last = 0, rc, t;
  sqlite3_int64 most = 0;
  if (argc < 1 || sqlite3_txn_state(db, "main") == SQLITE_TXN_WRITE) return;
  rc = scan_segment(db, &segid, &first, &last);
  if (rc == SQLITE_DONE) return;
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, "SELECT pgno FROM events_fts_idx WHERE segid = ?1 AND term <= ?2"
                            " ORDER BY term DESC LIMIT 1", -1, &at, 0);
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, "SELECT pgno FROM events_fts_idx WHERE segid = ?1 AND term > ?2"
                            " ORDER BY term ASC LIMIT 1", -1, &after, 0);
  for (t = 0; t < argc && rc == SQLITE_OK; t++) {
    const unsigned char *token = sqlite3_value_text(argv[t]);
    int ntoken = sqlite3_value_bytes(argv[t]);
    sqlite3_int64 from = first, to = (sqlite3_int64)last + 1;
    if (token == 0 || ntoken < 1 || ntoken >= SCAN_MAX_TERM) {
      rc = SQLITE_DONE;
      break;
    }
    key[0] = '0';
    memcpy(key + 1, token, (size_t)ntoken);
    sqlite3_bind_int(at, 1, segid);
    sqlite3_bind_blob(at, 2, key, ntoken + 1, SQLITE_STATIC);
    if (sqlite3_step(at) == SQLITE_ROW) from = sqlite3_column_int64(at, 0) >> 1;
    rc = sqlite3_reset(at);
    sqlite3_bind_int(after, 1, segid);
    sqlite3_bind_blob(after, 2, key, ntoken + 1, SQLITE_STATIC);
    if (rc == SQLITE_OK && sqlite3_step(after) == SQLITE_ROW)
      to = sqlite3_column_int64(after, 0) >> 1;
    if (rc == SQLITE_OK) rc = sqlite3_reset(after);
    if (to - from > most) most = to - from;
  }
  sqlite3_finalize(at);
  sqlite3_finalize(after);
  if (rc == SQLITE_OK) sqlite3_result_int64(ctx, most);
  else if (rc != SQLITE_DONE) sqlite3_result_error_code(ctx, rc);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_matchcount_v3_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
  fts5_api *fts = 0;
  sqlite3_stmt *stmt = 0;
  ScanCache *cache;
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
  cache = (ScanCache *)sqlite3_malloc(sizeof(ScanCache));
  if (cache == 0) return SQLITE_NOMEM;
  memset(cache, 0, sizeof(*cache));
  /* (SQLite calls scan_cache_destroy when the function goes, also if this call fails) */
  rc = sqlite3_create_function_v2(db, "recall_scan", -1, SQLITE_UTF8, cache, recall_scan, 0, 0,
                                  scan_cache_destroy);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_create_function_v2(db, "recall_scan_pages", -1, SQLITE_UTF8, 0, recall_scan_pages,
                                  0, 0, 0);
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

/* The previous entry point, for a process that loaded indexer/matchcount.py before this build
 * replaced the module file: it registers the same functions (a superset of what v2 had). */
#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_matchcount_v2_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
  return sqlite3_matchcount_v3_init(db, error, routines);
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_matchcount",
                                    "SQLite loadable extension: recall_matches(), recall_floor()", -1, NULL};

PyMODINIT_FUNC PyInit__matchcount(void) { return PyModule_Create(&module); }
