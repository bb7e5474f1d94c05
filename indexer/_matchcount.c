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

static void recall_matches(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                           int argc, sqlite3_value **argv) {
  int total = 0, count = 0, end = -1, i, rc;
  (void)argc;
  (void)argv;
  if (api->xPhraseCount(fts) == 1) {
    count = one_phrase(api, fts);
    if (count >= 0) {
      sqlite3_result_int(ctx, count);
      return;
    }
    count = 0;
  }
  rc = api->xInstCount(fts, &total);
  if (rc != SQLITE_OK) {
    sqlite3_result_error_code(ctx, rc);
    return;
  }
  for (i = 0; i < total; i++) {
    int phrase, column, offset, last;
    rc = api->xInst(fts, i, &phrase, &column, &offset);
    if (rc != SQLITE_OK) {
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    if (column != 0) continue;
    last = offset - 1 + api->xPhraseSize(fts, phrase);
    if (count > 0 && offset <= end) {
      if (last > end) end = last;
    } else {
      count++;
      end = last;
    }
  }
  sqlite3_result_int(ctx, count);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_matchcount_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
  fts5_api *fts = 0;
  sqlite3_stmt *stmt = 0;
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
  return fts->xCreateFunction(fts, "recall_matches", 0, recall_matches, 0);
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_matchcount",
                                    "SQLite loadable extension: recall_matches()", -1, NULL};

PyMODINIT_FUNC PyInit__matchcount(void) { return PyModule_Create(&module); }
