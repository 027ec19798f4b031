/*
 * Fuzzes the Chrome trace reader (pt_trace_read_chrome: traces/trace.c) on the input
 * written to a temporary file. A trace it accepts then goes through what ptcalib and
 * ptreport do with one: per-op statistics, samples stored into an in-memory cost
 * table, the last step kept; and written out, it must read back with as many spans.
 */
#include "fuzz.h"
#include "trace.h"

/* Writes t and reads it back: the same spans, world and plan identity. */
static void round_trip(const pt_trace *t)
{
    char path[64];
    fuzz_file(NULL, 0, path);
    pt_trace back;
    pt_err err;
    FUZZ_CHECK(pt_trace_write_chrome(t, path, &err) == 0);
    FUZZ_CHECK(pt_trace_read_chrome(path, &back, &err) == 0);
    FUZZ_CHECK(back.n == t->n && back.world == t->world &&
               strcmp(back.plan_id, t->plan_id) == 0);
    pt_trace_free(&back);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    fuzz_file(data, size, path);
    pt_trace t;
    pt_err err;
    if (pt_trace_read_chrome(path, &t, &err) == 0) {
        round_trip(&t);
        pt_op_stat *stats;
        size_t n;
        if (pt_trace_op_stats(&t, &stats, &n, &err) == 0)
            free(stats);
        pt_costdb *db;
        int64_t stored;
        if (pt_costdb_open(NULL, PT_COSTDB_READ, &db, &err) == 0) {
            (void)pt_trace_to_costdb(&t, db, "cpu", PT_SOURCE_TRACE, &stored, &err);
            pt_costdb_close(db);
        }
        pt_trace_keep_steps(&t, 1);
        pt_trace_free(&t);
    }
    unlink(path);
    return 0;
}
