/*
 * ptprofile's side of the collective measurements: it launches ptprofile-coll
 * under mpirun (the collectives need every rank), waits for it, and stores the
 * JSON-lines results it wrote into the cost table, replacing older samples of the
 * same configuration. Large send/receive points also give the link's bandwidth and
 * the smallest its latency, which fill the device description of an unprofiled
 * cluster.
 */
#include "ptprofile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether `name` is an executable on PATH. */
static bool on_path(const char *name)
{
    const char *path = getenv("PATH");
    char dir[1024];
    while (path && *path) {
        size_t len = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)len, path, name);
        if (len && access(dir, X_OK) == 0)
            return true;
        path += len + (path[len] == ':');
    }
    return false;
}

int pt_prof_coll_check(const pt_coll_job *job, pt_err *err)
{
    char prof[1024];
    snprintf(prof, sizeof prof, "%s/ptprofile-coll", job->self_dir);
    if (!on_path("mpirun"))
        return pt_err_set(err, "mpirun not found: install openmpi-bin (scripts/setup.sh does), or "
                               "pass --no-collectives");
    if (access(prof, X_OK) != 0)
        return pt_err_set(err, "cannot run '%s': %s", prof, strerror(errno));
    return 0;
}

static int launch(const pt_coll_job *job, const char *out, pt_err *err)
{
    char prof[1024], np[16], repeats[16];
    snprintf(prof, sizeof prof, "%s/ptprofile-coll", job->self_dir);
    snprintf(np, sizeof np, "%d", job->np);
    snprintf(repeats, sizeof repeats, "%d", job->repeats);
    if (pt_prof_coll_check(job, err))
        return -1;
    const char *argv[24];
    int a = 0;
    argv[a++] = "mpirun";
    if (geteuid() == 0)
        argv[a++] = "--allow-run-as-root";
    /* More ranks than cores is fine for measuring (the local cluster is one rank
     * per core, so it is rarely needed). */
    argv[a++] = "--oversubscribe";
    argv[a++] = "-q"; /* our one-line errors without mpirun's banner after them */
    argv[a++] = "-np";
    argv[a++] = np;
    argv[a++] = prof;
    argv[a++] = "--backend";
    argv[a++] = job->backend;
    argv[a++] = "--out";
    argv[a++] = out;
    argv[a++] = "--repeats";
    argv[a++] = repeats;
    if (job->quick)
        argv[a++] = "--quick";
    argv[a++] = "--progress";
    argv[a++] = isatty(fileno(stderr)) ? "bar" : "lines";
    argv[a] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return pt_err_set(err, "cannot start mpirun: %s", strerror(errno));
    if (pid == 0) {
        execvp("mpirun", (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return pt_err_set(err, "waiting for mpirun: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return pt_err_set(err, "the collective profiler failed (mpirun -np %d %s exited with "
                               "status %d); its messages are above", job->np, prof,
                          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}

/* Stores one result line; keeps what the link figures need. */
static int store_line(json_t *j, const char *backend, pt_costdb *db, int64_t *stored,
                      double *best_bw, double *min_lat, pt_err *err)
{
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type || strcmp(type, "coll") != 0)
        return 0;
    pt_coll_op op;
    const char *name = json_string_value(json_object_get(j, "op"));
    if (!name || pt_coll_parse(name, &op.op, err))
        return -1;
    op.bytes = json_number_value(json_object_get(j, "bytes"));
    op.group = (int)json_integer_value(json_object_get(j, "group"));
    op.ranks_per_node = (int)json_integer_value(json_object_get(j, "ranks_per_node"));
    double t = json_number_value(json_object_get(j, "time_s"));
    if (pt_costdb_put_coll(db, backend, &op, t, PT_SOURCE_PROFILE, err))
        return -1;
    (*stored)++;
    if (op.op == PT_COLL_SENDRECV && op.ranks_per_node == op.group) {
        double bw = op.bytes / t;
        if (bw > *best_bw)
            *best_bw = bw;
        if (*min_lat <= 0 || t < *min_lat)
            *min_lat = t;
    }
    return 0;
}

static int store_results(const char *path, const char *backend, pt_costdb *db, char *library,
                         size_t n, int64_t *stored, double *bw, double *lat, pt_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pt_err_set(err, "the collective profiler left no results in '%s': %s", path,
                          strerror(errno));
    char line[4096];
    int rc = pt_costdb_begin(db, err);
    for (int lineno = 1; rc == 0 && fgets(line, sizeof line, f); lineno++) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        if (!j) {
            rc = pt_err_set(err, "%s:%d: %s", path, lineno, je.text);
            break;
        }
        const char *lib = json_string_value(json_object_get(j, "library"));
        if (lib)
            snprintf(library, n, "%s", lib);
        rc = store_line(j, backend, db, stored, bw, lat, err);
        json_decref(j);
    }
    fclose(f);
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    return rc;
}

int pt_prof_collectives(const pt_coll_job *job, pt_costdb *db, char *library, size_t n,
                        int64_t *stored, double *link_bw_Bps, double *link_latency_s,
                        pt_err *err)
{
    char out[1024];
    snprintf(out, sizeof out, "%s/ptprofile-coll.%d.jsonl", job->scratch, (int)getpid());
    *stored = 0;
    *link_bw_Bps = *link_latency_s = 0;
    library[0] = '\0';
    int rc = launch(job, out, err);
    if (rc == 0)
        rc = store_results(out, job->backend, db, library, n, stored, link_bw_Bps,
                           link_latency_s, err);
    remove(out);
    return rc;
}
