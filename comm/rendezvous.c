/*
 * The file rendezvous: how the ranks of a run that has no MPI (srun without PMIx, or a
 * launcher that only sets RANK and WORLD_SIZE) find each other. The launcher's
 * environment gives each process its rank and the world size; the processes then
 * meet through small files in a directory that every node sees (PT_RENDEZVOUS), which
 * is all NCCL needs: each group's unique id travels from the group's first rank to
 * the others as one file. Nothing here knows about NCCL; comm.c and comm_nccl.c use
 * it.
 *
 * Files are named <key>.<name> (a broadcast, written by its root) and
 * <key>.<name>.<rank> (a barrier, one per rank), plus <key>.abort (the reason of a
 * rank that failed). Each is written under a temporary name and renamed into place:
 * rename() replaces atomically (POSIX.1-2017, rename()), also on NFS, whose server
 * performs the rename in one operation, so a reader sees either no file or the whole
 * file. Readers poll, backing off from 10 ms to 200 ms.
 */
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

/* ---- The environment ------------------------------------------------------------------- */

/* A whole decimal integer in [lo, hi], or -1 with err naming the variable. */
static int env_int(const char *var, long lo, long hi, int *out, pt_err *err)
{
    const char *s = getenv(var);
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return pt_err_set(err, "%s='%s': expected a whole number from %ld to %ld", var,
                          s ? s : "", lo, hi);
    *out = (int)v;
    return 0;
}

static bool key_ok(const char *k)
{
    if (!*k)
        return false;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
              (*k >= '0' && *k <= '9') || *k == '.' || *k == '_' || *k == '-'))
            return false;
    return true;
}

int pt_rdv_from_env(pt_rdv *r, pt_err *err)
{
    memset(r, 0, sizeof *r);
    r->timeout_s = 300;
    /* Slurm sets SLURM_PROCID (the task's rank) and SLURM_NTASKS (the step's task
     * count) in every task srun starts (srun(1), OUTPUT ENVIRONMENT VARIABLES);
     * torchrun and most other launchers set RANK and WORLD_SIZE. */
    const char *rv = "SLURM_PROCID", *sv = "SLURM_NTASKS", *lv = "SLURM_LOCALID";
    if (!getenv(rv) || !getenv(sv))
        rv = "RANK", sv = "WORLD_SIZE", lv = "LOCAL_RANK";
    if (getenv(rv) && getenv(sv)) {
        if (env_int(sv, 1, 1L << 30, &r->size, err) ||
            env_int(rv, 0, r->size - 1, &r->rank, err))
            return -1;
        r->source = rv[0] == 'S' ? "SLURM_PROCID/SLURM_NTASKS" : "RANK/WORLD_SIZE";
        if (getenv(lv) && env_int(lv, 0, r->size - 1, &r->local_rank, err))
            return -1;
    }
    const char *dir = getenv("PT_RENDEZVOUS");
    if (dir && *dir) {
        struct stat st;
        if (stat(dir, &st) != 0)
            return pt_err_set(err, "PT_RENDEZVOUS=%s: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return pt_err_set(err, "PT_RENDEZVOUS=%s: not a directory", dir);
        if (strlen(dir) >= sizeof r->dir)
            return pt_err_set(err, "PT_RENDEZVOUS=%s: path too long", dir);
        snprintf(r->dir, sizeof r->dir, "%s", dir);
    }
    const char *key = getenv("PT_RENDEZVOUS_KEY"), *job = getenv("SLURM_JOB_ID"),
               *step = getenv("SLURM_STEP_ID");
    if (key)
        snprintf(r->key, sizeof r->key, "%s", key);
    else if (job)
        snprintf(r->key, sizeof r->key, "%s.%s", job, step ? step : "0");
    else
        snprintf(r->key, sizeof r->key, "run");
    if (!key_ok(r->key))
        return pt_err_set(err, "rendezvous key '%s' (PT_RENDEZVOUS_KEY or SLURM_JOB_ID): "
                               "use letters, digits, '.', '_' and '-' only", r->key);
    const char *t = getenv("PT_RENDEZVOUS_TIMEOUT");
    if (t) {
        char *end = NULL;
        double v = strtod(t, &end);
        if (!*t || *end || !(v > 0 && v < 1e7))
            return pt_err_set(err, "PT_RENDEZVOUS_TIMEOUT='%s': expected seconds > 0", t);
        r->timeout_s = v;
    }
    return 0;
}

/* ---- Files ------------------------------------------------------------------------------ */

static void path_of(const pt_rdv *r, const char *name, int rank, char *out, size_t cap)
{
    if (rank >= 0)
        snprintf(out, cap, "%s/%s.%s.%d", r->dir, r->key, name, rank);
    else
        snprintf(out, cap, "%s/%s.%s", r->dir, r->key, name);
}

/* Writes bytes to path through a temporary file renamed into place. */
static int write_atomic(const char *path, const void *buf, size_t bytes, pt_err *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return pt_err_set(err, "rendezvous: cannot create '%s': %s", tmp, strerror(errno));
    const char *p = buf;
    size_t left = bytes;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return pt_err_set(err, "rendezvous: cannot write '%s': %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    /* on disk before it is visible under its name: a reader on another node must
     * never see a short file */
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return pt_err_set(err, "rendezvous: cannot publish '%s': %s", path, strerror(e));
    }
    return 0;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_for(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int pt_rdv_aborted(const pt_rdv *r, pt_err *err)
{
    char path[1100], why[400] = "";
    path_of(r, "abort", -1, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(why, 1, sizeof why - 1, f);
    fclose(f);
    why[n] = '\0';
    if (n > 0 && why[n - 1] == '\n')
        why[n - 1] = '\0';
    return pt_err_set(err, "rendezvous in %s: %s", r->dir, why[0] ? why : "a rank aborted");
}

void pt_rdv_abort(const pt_rdv *r, const char *why)
{
    char path[1100], text[400];
    path_of(r, "abort", -1, path, sizeof path);
    snprintf(text, sizeof text, "rank %d aborted: %s\n", r->rank, why ? why : "");
    write_atomic(path, text, strlen(text), NULL);
}

/* ---- Barrier and broadcast --------------------------------------------------------------- */

void pt_rank_list_add(pt_rank_list *l, int rank)
{
    if (l->listed < 16 && l->len < l->cap) {
        l->len += (size_t)snprintf(l->out + l->len, l->cap - l->len, "%s%d",
                                   l->listed ? ", " : "", rank);
        l->listed++;
    } else {
        l->more++;
    }
}

void pt_rank_list_end(pt_rank_list *l)
{
    if (l->more && l->len < l->cap)
        snprintf(l->out + l->len, l->cap - l->len, " and %d more", l->more);
}

/* Lists the ranks whose barrier file is missing into out ("3, 5, 9 and 12 more"). */
static void missing_ranks(const pt_rdv *r, const char *name, char *out, size_t cap)
{
    pt_rank_list l = {out, cap, 0, 0, 0};
    out[0] = '\0';
    for (int k = 0; k < r->size; k++) {
        char path[1100];
        path_of(r, name, k, path, sizeof path);
        if (!exists(path))
            pt_rank_list_add(&l, k);
    }
    pt_rank_list_end(&l);
}

int pt_rdv_barrier(const pt_rdv *r, const char *name, pt_err *err)
{
    char path[1100], stamp[64];
    path_of(r, name, r->rank, path, sizeof path);
    int n = snprintf(stamp, sizeof stamp, "%ld\n", (long)getpid());
    if (write_atomic(path, stamp, (size_t)n, err))
        return -1;
    double t0 = now_s(), nap = 0.01;
    /* ranks that have arrived never leave, so the count only grows: recheck from the
     * first one still missing */
    for (int next = 0;;) {
        while (next < r->size) {
            path_of(r, name, next, path, sizeof path);
            if (!exists(path))
                break;
            next++;
        }
        if (next == r->size)
            return 0;
        if (pt_rdv_aborted(r, err))
            return -1;
        if (now_s() - t0 > r->timeout_s) {
            char miss[200];
            missing_ranks(r, name, miss, sizeof miss);
            return pt_err_set(err, "rendezvous in %s: rank %d waited %.0f s at '%s' for ranks "
                                   "that never arrived: %s (world of %d; is the directory "
                                   "shared by every node, and did every rank start?)",
                              r->dir, r->rank, r->timeout_s, name, miss, r->size);
        }
        pause_for(nap);
        nap = nap * 2 < 0.2 ? nap * 2 : 0.2;
    }
}

int pt_rdv_bcast(const pt_rdv *r, const char *name, int root, void *buf, size_t bytes,
                 pt_err *err)
{
    char path[1100];
    path_of(r, name, -1, path, sizeof path);
    if (r->rank == root)
        return write_atomic(path, buf, bytes, err);
    double t0 = now_s(), nap = 0.01;
    while (!exists(path)) {
        if (pt_rdv_aborted(r, err))
            return -1;
        if (now_s() - t0 > r->timeout_s)
            return pt_err_set(err, "rendezvous in %s: rank %d waited %.0f s for '%s' from "
                                   "rank %d, which never wrote it",
                              r->dir, r->rank, r->timeout_s, path, root);
        pause_for(nap);
        nap = nap * 2 < 0.2 ? nap * 2 : 0.2;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_err_set(err, "rendezvous: cannot read '%s': %s", path, strerror(errno));
    size_t got = fread(buf, 1, bytes, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != bytes || extra != EOF)
        return pt_err_set(err, "rendezvous: '%s' holds %s bytes, %zu expected (a file of "
                               "another run? use a fresh PT_RENDEZVOUS_KEY)", path,
                          got != bytes ? "fewer" : "more", bytes);
    return 0;
}

void pt_rdv_cleanup(const pt_rdv *r)
{
    DIR *d = opendir(r->dir);
    if (!d)
        return;
    size_t klen = strlen(r->key);
    struct dirent *e;
    while ((e = readdir(d))) {
        /* this run's files, and temporaries a killed writer left */
        if (strncmp(e->d_name, r->key, klen) != 0 || e->d_name[klen] != '.')
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}
