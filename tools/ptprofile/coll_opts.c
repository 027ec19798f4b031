/*
 * ptprofile-coll's command line: parsing and checking every option, and the size
 * rounding each collective needs. Every rank parses the same argv and so reaches the
 * same verdict on its own; only rank 0 reports it (ptprofile_coll.c).
 */
#include "coll_bench.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: mpirun -np N ptprofile-coll --out FILE [options]\n"
    "\n"
    "Measures collectives over groups of ranks and writes one JSON line per sample\n"
    "(ptprofile reads them into costs.db). The group of size g is world ranks\n"
    "0..g-1; the other ranks wait. Each sample is the median over repeats of the\n"
    "slowest rank's time.\n"
    "\n"
    "Options (defaults in brackets):\n"
    "  --out FILE                  output file, written by rank 0 (required)\n"
    "  --backend mpi|nccl          communication library [mpi]\n"
    "  --min-bytes N               smallest size; K, M, G suffixes are binary [1024]\n"
    "  --max-bytes N               largest size [268435456 = 256M]\n"
    "  --ops LIST                  comma list of allreduce, allgather, reducescatter,\n"
    "                              alltoall, broadcast, sendrecv [all]\n"
    "  --groups LIST               comma list of group sizes [2..N]\n"
    "  --repeats N                 timed repeats per point, after warm-up [5]\n"
    "  --max-seconds-per-point S   fewer repeats where a point would take longer [10]\n"
    "  --quick                     sizes 1K..16M by x4, 3 repeats (explicit options\n"
    "                              still apply)\n"
    "  --progress auto|bar|lines|none  rank 0's progress on stderr: a bar with ETA, or\n"
    "                              a line per (op, group); auto is a bar on a terminal\n"
    "                              (under mpirun stderr is a pipe: ask for bar) [auto]\n"
    "  --help                      this text\n"
    "\n"
    "Sizes go by powers of two from --min-bytes to --max-bytes. Bytes follow\n"
    "nccl-tests: per rank for allreduce, broadcast, alltoall and sendrecv; the whole\n"
    "gathered buffer for allgather and reducescatter. Elements are fp32.\n";

void pt_cb_usage(FILE *f)
{
    fputs(usage_text, f);
}

/* The largest size: MPI counts are int, and 4 GiB of fp32 stays well inside. */
#define PT_CB_MAX_BYTES ((int64_t)4 << 30)

static int parse_bytes(const char *opt, const char *text, int64_t *out, pt_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (errno || end == text || *end || v < 0 || v > (PT_CB_MAX_BYTES >> shift))
        return pt_err_set(err, "%s '%s': want a byte count from 4 to %lld, optionally "
                          "with a K, M or G suffix", opt, text, (long long)PT_CB_MAX_BYTES);
    *out = (int64_t)v << shift;
    return 0;
}

static int parse_int(const char *opt, const char *text, int lo, int hi, int *out, pt_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return pt_err_set(err, "%s '%s': want an integer from %d to %d", opt, text, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_seconds(const char *text, double *out, pt_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || !(v > 0))
        return pt_err_set(err, "--max-seconds-per-point '%s': want a positive number of "
                          "seconds", text);
    *out = v;
    return 0;
}

/* Copies the next comma-separated item of *list into buf; 0 at the end of the list. */
static int next_item(const char **list, char *buf, size_t cap)
{
    if (!*list)
        return 0;
    const char *comma = strchr(*list, ',');
    size_t n = comma ? (size_t)(comma - *list) : strlen(*list);
    snprintf(buf, cap, "%.*s", (int)n, *list);
    *list = comma ? comma + 1 : NULL;
    return 1;
}

static int parse_ops(const char *text, bool ops[PT_COLL_COUNT], pt_err *err)
{
    char item[64];
    memset(ops, 0, sizeof(bool) * PT_COLL_COUNT);
    for (const char *p = text; next_item(&p, item, sizeof item);) {
        pt_coll c;
        if (pt_coll_parse(item, &c, err) != 0)
            return pt_err_set(err, "--ops: unknown collective '%s' (expected allreduce, "
                              "allgather, reducescatter, alltoall, broadcast or sendrecv)",
                              item);
        ops[c] = true;
    }
    return 0;
}

/* Group sizes as a set over 2..world, kept as a flag per size then listed ascending. */
static int parse_groups(const char *text, int world, pt_cb_opts *o, pt_err *err)
{
    char item[64];
    bool *want = calloc((size_t)world + 1, sizeof *want);
    if (!want)
        return pt_err_set(err, "out of memory");
    int rc = 0;
    for (const char *p = text; rc == 0 && next_item(&p, item, sizeof item);) {
        int g = 0;
        if (parse_int("--groups", item, 2, 1 << 20, &g, err) != 0)
            rc = -1;
        else if (g > world)
            rc = pt_err_set(err, "--groups %d: larger than the world of %d ranks (mpirun -np)",
                            g, world);
        else
            want[g] = true;
    }
    o->groups = rc == 0 ? malloc(sizeof *o->groups * (size_t)world) : NULL;
    if (rc == 0 && !o->groups)
        rc = pt_err_set(err, "out of memory");
    for (int g = 2; rc == 0 && g <= world; g++)
        if (want[g])
            o->groups[o->ngroups++] = g;
    free(want);
    return rc;
}

static int default_groups(int world, pt_cb_opts *o, pt_err *err)
{
    o->groups = malloc(sizeof *o->groups * (size_t)(world > 1 ? world : 1));
    if (!o->groups)
        return pt_err_set(err, "out of memory");
    for (int g = 2; g <= world; g++)
        o->groups[o->ngroups++] = g;
    return 0;
}

enum { OPT_OUT = 256, OPT_BACKEND, OPT_MIN, OPT_MAX, OPT_OPS, OPT_GROUPS, OPT_REPEATS,
       OPT_CAP, OPT_QUICK, OPT_PROGRESS, OPT_HELP };

static const struct option long_options[] = {
    {"out", required_argument, NULL, OPT_OUT},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"min-bytes", required_argument, NULL, OPT_MIN},
    {"max-bytes", required_argument, NULL, OPT_MAX},
    {"ops", required_argument, NULL, OPT_OPS},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"repeats", required_argument, NULL, OPT_REPEATS},
    {"max-seconds-per-point", required_argument, NULL, OPT_CAP},
    {"quick", no_argument, NULL, OPT_QUICK},
    {"progress", required_argument, NULL, OPT_PROGRESS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* What the command line said, before defaults and cross-checks. */
typedef struct {
    const char *min, *max, *repeats, *groups, *ops, *cap, *progress;
    bool quick;
} raw_opts;

static int bad_option(int argc, char **argv, pt_err *err)
{
    const char *arg = optind - 1 < argc ? argv[optind - 1] : "?";
    if (optopt)
        return pt_err_set(err, "option '%s' needs a value (see --help)", arg);
    return pt_err_set(err, "unknown option '%s' (see --help)", arg);
}

static int read_argv(int argc, char **argv, pt_cb_opts *o, raw_opts *r, pt_err *err)
{
    opterr = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "", long_options, NULL)) != -1;) {
        switch (c) {
        case OPT_OUT: o->out = optarg; break;
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_MIN: r->min = optarg; break;
        case OPT_MAX: r->max = optarg; break;
        case OPT_OPS: r->ops = optarg; break;
        case OPT_GROUPS: r->groups = optarg; break;
        case OPT_REPEATS: r->repeats = optarg; break;
        case OPT_CAP: r->cap = optarg; break;
        case OPT_QUICK: r->quick = true; break;
        case OPT_PROGRESS: r->progress = optarg; break;
        case OPT_HELP: o->help = true; break;
        default: return bad_option(argc, argv, err);
        }
    }
    if (optind < argc)
        return pt_err_set(err, "unexpected argument '%s' (see --help)", argv[optind]);
    return 0;
}

static int parse_progress(const char *text, pt_cb_progress_mode *out, pt_err *err)
{
    static const char *const names[] = {"auto", "bar", "lines", "none"};
    for (int m = 0; m < 4; m++)
        if (strcmp(text, names[m]) == 0) {
            *out = (pt_cb_progress_mode)m;
            return 0;
        }
    return pt_err_set(err, "--progress '%s': want auto, bar, lines or none", text);
}

static int check_backend(const char *name, pt_err *err)
{
    if (strcmp(name, "mpi") == 0)
        return 0;
    if (strcmp(name, "nccl") == 0)
        return pt_comm_have_nccl()
                   ? 0
                   : pt_err_set(err, "--backend nccl: this ptprofile-coll was built without "
                                     "NCCL (CMake found no CUDA toolkit and NCCL, or was "
                                     "given -DPT_WITH_NCCL=OFF)");
    return pt_err_set(err, "--backend '%s': want mpi or nccl", name);
}

/* Options in order: --quick's defaults first, so explicit options override them. */
static int apply(const raw_opts *r, int world, pt_cb_opts *o, pt_err *err)
{
    if (r->quick) {
        o->max_bytes = (int64_t)16 << 20;
        o->step = 4;
        o->repeats = 3;
    }
    if ((r->min && parse_bytes("--min-bytes", r->min, &o->min_bytes, err) != 0) ||
        (r->max && parse_bytes("--max-bytes", r->max, &o->max_bytes, err) != 0) ||
        (r->repeats && parse_int("--repeats", r->repeats, 1, 1000000, &o->repeats, err) != 0) ||
        (r->cap && parse_seconds(r->cap, &o->max_seconds_per_point, err) != 0) ||
        (r->ops && parse_ops(r->ops, o->ops, err) != 0) ||
        (r->progress && parse_progress(r->progress, &o->progress, err) != 0) ||
        check_backend(o->backend, err) != 0)
        return -1;
    if (o->min_bytes < 4)
        return pt_err_set(err, "--min-bytes %lld: want at least 4 (one fp32 element)",
                          (long long)o->min_bytes);
    if (o->max_bytes < o->min_bytes)
        return pt_err_set(err, "--max-bytes %lld is smaller than --min-bytes %lld",
                          (long long)o->max_bytes, (long long)o->min_bytes);
    if (!o->out || !*o->out)
        return pt_err_set(err, "--out FILE is required (see --help)");
    if (world < 2)
        return pt_err_set(err, "needs at least 2 ranks, has %d: run it as mpirun -np N "
                          "ptprofile-coll ... with N >= 2", world);
    return r->groups ? parse_groups(r->groups, world, o, err) : default_groups(world, o, err);
}

int pt_cb_opts_parse(int argc, char **argv, int world, pt_cb_opts *o, pt_err *err)
{
    *o = (pt_cb_opts){.backend = "mpi", .min_bytes = 1024, .max_bytes = (int64_t)256 << 20,
                      .step = 2, .repeats = 5, .max_seconds_per_point = 10};
    for (int c = 0; c < PT_COLL_COUNT; c++)
        o->ops[c] = true;
    raw_opts r = {0};
    if (read_argv(argc, argv, o, &r, err) != 0)
        return -1;
    if (o->help)
        return 0;
    if (apply(&r, world, o, err) != 0) {
        pt_cb_opts_free(o);
        return -1;
    }
    return 0;
}

void pt_cb_opts_free(pt_cb_opts *o)
{
    free(o->groups);
    o->groups = NULL;
    o->ngroups = 0;
}

int64_t pt_cb_round_bytes(pt_coll op, int group, int64_t bytes)
{
    bool shared = op == PT_COLL_ALLGATHER || op == PT_COLL_REDUCESCATTER ||
                  op == PT_COLL_ALLTOALL;
    int64_t unit = shared ? 4 * (int64_t)group : 4;
    return bytes - bytes % unit;
}
