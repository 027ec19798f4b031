/*
 * The profiles the project ships (costmodels/profiles/DEVICE.sql, compiled in by
 * embed.cmake): ptprofile's measurements of a device, kept as SQL text and opened
 * into an in-memory cost table, so that a planner with no measurements of its own
 * prices this project's kernels from a real device rather than the analytic model.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

int pt_costdb_open_shipped(const char *device, pt_costdb **out, pt_err *err)
{
    *out = NULL;
    for (const pt_shipped_sql *s = pt_shipped_sqls; s->device; s++) {
        if (strcmp(s->device, device) != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "the shipped profile of %s (costmodels/profiles/%s.sql)",
                 device, device);
        return pt_costdb_open_sql(name, s->sql, out, err);
    }
    return 1;
}

int pt_costdb_profile_about(const pt_costdb *db, const char *device, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    if (!db || !db->sql || cap == 0)
        return -1;
    /* the first run's date, how many there were, and the libraries of the last that
     * finished: what the samples were measured on */
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT substr(min(started_at), 1, 10), count(*), "
                           "(SELECT versions FROM profile_runs WHERE device = ?1 "
                           " AND status = 'done' ORDER BY id DESC LIMIT 1) "
                           "FROM profile_runs WHERE device = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, device, -1, SQLITE_TRANSIENT);
    int rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 1) > 0) {
        const unsigned char *date = sqlite3_column_text(st, 0), *v = sqlite3_column_text(st, 2);
        int runs = sqlite3_column_int(st, 1);
        snprintf(buf, cap, "measured %s by %d ptprofile run%s; %s", date ? (const char *)date : "?",
                 runs, runs == 1 ? "" : "s", v ? (const char *)v : "no run finished");
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}
