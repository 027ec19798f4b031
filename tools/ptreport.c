/*
 * ptreport — shows how right the predictions are. From the runs in costs.db (ptrun
 * --record) it draws, with gnuplot, as PNG and SVG: predicted against measured MFU
 * over all runs with the y = x line and error bands; step time across runs and git
 * revisions; per-op predicted against measured times of the latest traced run; that
 * run's pipeline timeline predicted above measured, on one time scale; predicted against
 * measured memory per rank; and the loss curves of the runs' logs. Runs are labelled
 * with their layout. It writes the data and gnuplot scripts beside the pictures and an
 * index page (index.md) that links them.
 * Exit code: 0 done, 1 bad input or failure.
 */
#include "planner.h"
#include "trace.h"
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: ptreport [options]\n"
    "\n"
    "Draws predicted against measured for the runs recorded in the cost table (ptrun\n"
    "--record) with gnuplot, PNG and SVG, and writes DIR/index.md linking them.\n"
    "\n"
    "  --db FILE    the cost table [$PT_COSTS_DB, else ~/.local/share/ptplan/costs.db]\n"
    "  --out DIR    where the report goes [report]\n"
    "  --log FILE   a ptrun --log file to draw the loss of (repeatable) [the runs' logs]\n"
    "  -h, --help   this text\n";

#define MAX_LOGS 16

typedef struct {
    char db[512];
    const char *out;
    const char *logs[MAX_LOGS];
    int n_logs;
} options;

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_DB = 256, O_OUT, O_LOG };
    static const struct option longopts[] = {{"db", 1, 0, O_DB}, {"out", 1, 0, O_OUT},
                                             {"log", 1, 0, O_LOG}, {"help", 0, 0, 'h'},
                                             {0, 0, 0, 0}};
    *o = (options){.out = "report"};
    pt_cli_default_db(o->db, sizeof o->db, false);
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_DB: snprintf(o->db, sizeof o->db, "%s", optarg); break;
        case O_OUT: o->out = optarg; break;
        case O_LOG:
            if (o->n_logs == MAX_LOGS) {
                fprintf(stderr, "ptreport: at most %d --log files\n", MAX_LOGS);
                return -1;
            }
            o->logs[o->n_logs++] = optarg;
            break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return pt_cli_bad_option("ptreport", c, argv[optind - 1]);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ptreport: unexpected argument '%s' (see ptreport --help)\n",
                argv[optind]);
        return -1;
    }
    return 0;
}

/* ---- Files and gnuplot ---------------------------------------------------------------- */

typedef struct {
    const options *o;
    char dir[1024];           /* where files are written: the staging folder in --out */
    int write_errno;          /* the first failed write of a file (a full disk), 0: none */
    bool made_out;            /* --out was created by this run */
    pt_costdb *db, *before;   /* before: the tables without trace samples (as profiled) */
    pt_run_record *runs;
    size_t n_runs;
    FILE *index;
    int drawn;
} report;

static FILE *open_in(const report *R, const char *name, pt_err *err)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", R->dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        pt_err_set(err, "cannot write '%s/%s': %s", R->o->out, name, strerror(errno));
    return f;
}

/* Closes a file written in the report, keeping the first failure for make_report: a
 * data or script file cut short by a full disk must not become a picture. */
static void close_out(report *R, FILE *f)
{
    errno = 0;
    bool bad = ferror(f) != 0;
    bad = fclose(f) != 0 || bad;
    if (bad && !R->write_errno)
        R->write_errno = errno ? errno : EIO;
}

/* Runs gnuplot with the arguments argv (argv[0] "gnuplot", NULL-terminated) and waits for
 * it: in the folder dir (NULL: this one), its standard error into the file err_name there
 * and its standard output too when out_too. No shell stands between: --out is only ever
 * an argument to chdir here, never part of a command line. Returns gnuplot's exit status
 * (0: done), 127 when it could not be started in dir, -1 when no process could be made
 * or gnuplot did not exit by itself (a signal). */
static int run_gnuplot(const char *dir, char *const argv[], const char *err_name, bool out_too)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = dir && chdir(dir) != 0
                     ? -1
                     : open(err_name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0 || dup2(fd, STDERR_FILENO) < 0 || (out_too && dup2(fd, STDOUT_FILENO) < 0))
            _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs the gnuplot script `name`.gp (already written in the report folder) twice, into
 * name.png and name.svg, from inside the folder so the script's data paths are local.
 * name is one of this file's fixed chart names and size is ours ("W,H"): nothing of the
 * input is in the command gnuplot is given, only in the script, quoted (gp_string). */
static int gnuplot(const report *R, const char *name, const char *size, pt_err *err)
{
    char cmd[512], log_name[64];
    snprintf(cmd, sizeof cmd,
             "set terminal pngcairo size %s font ',10'; set output '%s.png'; load '%s.gp'; "
             "set terminal svg size %s dynamic font 'sans,10'; set output '%s.svg'; "
             "load '%s.gp'", size, name, name, size, name, name);
    snprintf(log_name, sizeof log_name, "%s.gnuplot.log", name);
    char *const argv[] = {"gnuplot", "-e", cmd, NULL};
    int rc = run_gnuplot(R->dir, argv, log_name, false);
    char log[2048];
    snprintf(log, sizeof log, "%s/%s", R->dir, log_name);
    if (rc != 0) {
        /* the staging folder goes: what gnuplot said is part of the message */
        char said[160] = "";
        FILE *f = fopen(log, "r");
        if (f && fgets(said, sizeof said, f))
            said[strcspn(said, "\n")] = 0;
        if (f)
            fclose(f);
        return pt_err_set(err, "gnuplot failed drawing %s/%s%s%s", R->o->out, name,
                          said[0] ? ": " : "", said);
    }
    remove(log);
    return 0;
}

/* An entry of index.md: the picture, its SVG and what it shows. */
/* The chart `name` in index.md; its data is `name`.dat unless `data` names the files. */
static void link_data(report *R, const char *name, const char *data, const char *title,
                      const char *what)
{
    fprintf(R->index, "## %s\n\n%s\n\n![%s](%s.png)\n\n[SVG](%s.svg) · data and script: ",
            title, what, title, name, name);
    if (data)
        fprintf(R->index, "%s", data);
    else
        fprintf(R->index, "`%s.dat`", name);
    fprintf(R->index, ", `%s.gp`\n\n", name);
    R->drawn++;
}

static void index_entry(report *R, const char *name, const char *title, const char *what)
{
    link_data(R, name, NULL, title, what);
}

static const char *short_rev(const char *rev)
{
    static char buf[16];
    snprintf(buf, sizeof buf, "%.7s", rev[0] ? rev : "unknown");
    return buf;
}

/* The value of `key` in a canonical layout string ("tp=2,sp=0,pp=1,...", written by
 * pt_layout_format) into v; false when the string has no such key. */
static bool layout_value(const char *canon, const char *key, char *v, size_t cap)
{
    size_t k = strlen(key);
    for (const char *s = canon; s; s = strchr(s, ',')) {
        s += *s == ',';
        if (!strncmp(s, key, k) && s[k] == '=') {
            snprintf(v, cap, "%.*s", (int)strcspn(s + k + 1, ","), s + k + 1);
            return true;
        }
    }
    return false;
}

static void append(char *out, size_t cap, const char *a, const char *b)
{
    size_t n = strlen(out);
    snprintf(out + n, cap > n ? cap - n : 0, "%s%s", a, b);
}

/* A run's layout as a label: "tp2 pp1 dp1 mbs4", with sequence parallelism, vp, cp, ZeRO,
 * recompute and (with pipelining) the schedule where they are not the default. A string
 * that is not a canonical layout is kept as it is. */
static void short_layout(const char *canon, char *out, size_t cap)
{
    enum { TP, SP, PP, VP, CP, DP, ZERO, MBS, RECOMPUTE, SCHEDULE, N_KEYS };
    static const char *const keys[N_KEYS] = {"tp", "sp", "pp", "vp", "cp",
                                             "dp", "zero", "mbs", "recompute", "schedule"};
    char v[N_KEYS][32];
    for (int i = 0; i < N_KEYS; i++)
        if (!layout_value(canon, keys[i], v[i], sizeof v[i])) {
            snprintf(out, cap, "%s", canon);
            return;
        }
    out[0] = '\0';
    append(out, cap, "tp", v[TP]);
    if (strcmp(v[SP], "0"))
        append(out, cap, " sp", "");
    append(out, cap, " pp", v[PP]);
    if (strcmp(v[VP], "1"))
        append(out, cap, " vp", v[VP]);
    if (strcmp(v[CP], "1"))
        append(out, cap, " cp", v[CP]);
    append(out, cap, " dp", v[DP]);
    if (strcmp(v[ZERO], "0"))
        append(out, cap, " zero", v[ZERO]);
    append(out, cap, " mbs", v[MBS]);
    if (strcmp(v[RECOMPUTE], "none"))
        append(out, cap, " recompute=", v[RECOMPUTE]);
    if (strcmp(v[PP], "1"))
        append(out, cap, " ", v[SCHEDULE]);
}

/* The longest label (the first double-quoted field of a line) of a data file written
 * here, in characters; 0 when it has none. */
static int longest_label(const report *R, const char *name)
{
    char path[2048], line[4096];
    snprintf(path, sizeof path, "%s/%s", R->dir, name);
    FILE *f = fopen(path, "r");
    int longest = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *open = strchr(line, '"'), *close = open ? strchr(open + 1, '"') : NULL;
        if (line[0] != '#' && close && close - open - 1 > longest)
            longest = (int)(close - open - 1);
    }
    if (f)
        fclose(f);
    return longest;
}

/* Margins that leave room for xtic labels of `chars` characters turned clockwise by `deg`
 * degrees (gnuplot's "rotate by -deg"), in a font `scale` times the default: they hang
 * below the axis, and the last one past the plot's right edge. gnuplot measures bmargin
 * in character heights and rmargin in character widths; a character of the default font
 * is about half as wide as it is high. */
static void xtic_margins(FILE *gp, int chars, double deg, double scale)
{
    double rad = deg * 3.14159265358979 / 180, width = chars * scale;
    fprintf(gp, "set bmargin %d\nset rmargin %d\n", (int)ceil(0.5 * width * sin(rad)) + 2,
            (int)ceil(width * cos(rad)) + 2);
}

/* ---- Strings from input in the report's files ------------------------------------------ */

/* Every string that comes from input (a layout, model, cluster or op key, a git revision,
 * a log's file name or header line: anything read from the cost table, a log or the command
 * line) goes into a gnuplot script only through gp_string and into a data file only
 * through dat_string or dat_text, never with a bare "%s": a quote in it would end the
 * string and gnuplot run the rest as commands (system(), backquotes), a newline end the
 * command or data line. The labels drawn from them are set noenhanced, so that ^ _ @ & { }
 * and \U+ escapes print as they are. */

/* A byte of such a string as it is written: control characters become '?'. */
static int printable(unsigned char c)
{
    return c < 0x20 || c == 0x7f ? '?' : c;
}

/* Writes s into a gnuplot script as a string expression that gnuplot reads back as s,
 * nothing of it evaluated. In a single-quoted gnuplot string every character stands for
 * itself but the single quote: backslashes are ordinary characters and backquotes are not
 * substituted, unlike in double quotes (gnuplot's "help quotes"). That help says a single
 * quote is written twice, but gnuplot's scanner (scanner.c) takes a doubled quote only
 * after another character of the string, so that '''a' and 'a''''b' are misread; each
 * quote is therefore a string of its own, joined on: it's becomes 'it'."'".'s'. */
static void gp_string(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'.\"'\".'", f);
        else
            fputc(printable((unsigned char)*s), f);
    fputc('\'', f);
}

/* Writes s as one double-quoted column of a data file, which gnuplot reads back as s but
 * for double quotes, which become single ones: there a quoted field ends at the next
 * double quote, whatever stands before it, and then has its backslash escapes replaced
 * (datafile.c: df_tokenise, df_parse_string_field), so a backslash is written twice. Data
 * is never evaluated: the scripts take columns by number, with no expression on them. */
static void dat_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"')
            fputc('\'', f);
        else if (*s == '\\')
            fputs("\\\\", f);
        else
            fputc(printable((unsigned char)*s), f);
    fputc('"', f);
}

/* Writes s into a comment of a data file, on its line. */
static void dat_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(printable((unsigned char)*s), f);
}

/* ---- MFU over all runs ------------------------------------------------------------------- */

static int draw_mfu(report *R, pt_err *err)
{
    FILE *f = open_in(R, "mfu.dat", err);
    if (!f)
        return -1;
    double max = 0;
    fprintf(f, "# run predicted_mfu_pct measured_mfu_pct label layout\n");
    for (size_t i = 0; i < R->n_runs; i++) {
        const pt_run_record *r = &R->runs[i];
        char lay[128], label[160];
        short_layout(r->layout, lay, sizeof lay);
        snprintf(label, sizeof label, "#%lld %s", (long long)r->id, lay);
        fprintf(f, "%lld %.6g %.6g ", (long long)r->id, 100 * r->predicted_mfu,
                100 * r->measured_mfu);
        dat_string(f, label);
        fputc(' ', f);
        dat_string(f, r->layout);
        fputc('\n', f);
        max = fmax(max, fmax(r->predicted_mfu, r->measured_mfu) * 100);
    }
    close_out(R, f);
    if (!(f = open_in(R, "mfu.gp", err)))
        return -1;
    double top = max > 0 ? ceil(max * 1.3) : 1;
    fprintf(f,
            "set title 'MFU of every recorded run: predicted against measured'\n"
            "set xlabel 'predicted MFU (%%)'\nset ylabel 'measured MFU (%%)'\n"
            "set xrange [0:%g]\nset yrange [0:%g]\nset size ratio -1\nset grid\n"
            "set key top left\nset samples 200\n"
            "plot '+' using 1:($1*0.75):($1*1.25) with filledcurves lc rgb '#dde8f5' "
            "title '±25%%', \\\n"
            "     '+' using 1:($1*0.9):($1*1.1) with filledcurves lc rgb '#b5cdea' "
            "title '±10%%', \\\n"
            "     x with lines lc rgb 'black' dt 2 title 'y = x', \\\n"
            "     'mfu.dat' using 2:3 with points pt 7 ps 1.2 lc rgb '#c0392b' title 'runs', \\\n"
            "     'mfu.dat' using 2:3:4 with labels left offset char 0.8,0 font ',8' "
            "noenhanced notitle\n",
            top, top);
    close_out(R, f);
    if (gnuplot(R, "mfu", "700,650", err))
        return -1;
    index_entry(R, "mfu", "Predicted against measured MFU",
         "Each point is a recorded run, labelled with its id and layout; on the dashed line "
         "the prediction was exact, inside the bands it was within 10% and 25%.");
    return 0;
}

/* ---- Step time across runs and revisions ---------------------------------------------------- */

static int draw_steptime(report *R, pt_err *err)
{
    FILE *f = open_in(R, "steptime.dat", err);
    if (!f)
        return -1;
    fprintf(f, "# n predicted_s measured_s label(run id, revision, layout)\n");
    for (size_t i = 0; i < R->n_runs; i++) {
        const pt_run_record *r = &R->runs[i];
        char lay[128], label[192];
        short_layout(r->layout, lay, sizeof lay);
        snprintf(label, sizeof label, "#%lld %s %s", (long long)r->id,
                 short_rev(r->git_revision), lay);
        fprintf(f, "%zu %.6g %.6g ", i, r->predicted_step_s, r->measured_step_s);
        dat_string(f, label);
        fputc('\n', f);
    }
    close_out(R, f);
    if (!(f = open_in(R, "steptime.gp", err)))
        return -1;
    fprintf(f,
            "set title 'Step time of every recorded run: run id, git revision and layout'\n"
            "set ylabel 'seconds per step'\nset logscale y\nset grid ytics\n"
            "set xtics rotate by -45 noenhanced\nset key outside right top\n"
            "set offsets 0.5, 0.5, 0, 0\n");
    int longest = longest_label(R, "steptime.dat");
    xtic_margins(f, longest, 45, 1);
    fprintf(f,
            "plot 'steptime.dat' using 1:3:xtic(4) with points pt 7 ps 1.2 lc rgb '#c0392b' "
            "title 'measured', \\\n"
            "     'steptime.dat' using 1:2 with points pt 6 ps 1.5 lc rgb '#2c3e50' "
            "title 'predicted'\n");
    close_out(R, f);
    char size[32]; /* room for the turned labels beside a plot of about 600 x 300 */
    snprintf(size, sizeof size, "%d,%d", 700 + 5 * longest, 350 + 5 * longest);
    if (gnuplot(R, "steptime", size, err))
        return -1;
    index_entry(R, "steptime", "Step time across runs",
         "Measured (filled) and predicted (open) seconds per step of each run in the order "
         "they were recorded, labelled with the run id, the git revision and the layout.");
    return 0;
}

/* ---- Runs with spans ------------------------------------------------------------------------ */

/* The latest run that has spans stored, with them; NULL when none has. */
static const pt_run_record *latest_traced(report *R, pt_span **spans, size_t *n, pt_err *err)
{
    for (size_t i = R->n_runs; i-- > 0;) {
        if (pt_costdb_run_spans(R->db, R->runs[i].id, spans, n, err))
            return NULL;
        if (*n)
            return &R->runs[i];
        free(*spans);
    }
    *spans = NULL;
    return NULL;
}

typedef struct {
    const pt_op_sample *s;
    double median_s, total_s, predicted_s, fitted_s;
} op_bar;

static int by_total(const void *a, const void *b)
{
    const op_bar *x = a, *y = b;
    return (x->total_s < y->total_s) - (x->total_s > y->total_s);
}

#define OPS_DRAWN 14

/* The run's op samples: from its stored per-op statistics, or (a run recorded before
 * schema 5) from its stored spans. */
static int run_samples(report *R, const pt_run_record *run,
                       pt_op_sample **v, size_t *n, pt_err *err)
{
    pt_op_stat *st = NULL;
    size_t ns = 0;
    if (pt_costdb_run_op_stats(R->db, run->id, &st, &ns, err))
        return -1;
    if (ns == 0) {
        pt_trace t;
        pt_trace_init(&t, true);
        int rc = pt_costdb_run_spans(R->db, run->id, &t.v, &t.n, err) ||
                 pt_trace_op_stats(&t, &st, &ns, err);
        pt_trace_free(&t);
        if (rc)
            return -1;
    }
    int rc = pt_op_samples(st, ns, v, n, err);
    free(st);
    return rc;
}

static int draw_ops(report *R, const pt_run_record *run, pt_err *err)
{
    pt_plan plan;
    if (pt_plan_read(run->plan_path, &plan, NULL)) {
        fprintf(R->index, "## Per-op predicted against measured\n\nNot drawn: the plan of run "
                          "%lld (%s) cannot be read.\n\n", (long long)run->id, run->plan_path);
        return 0;
    }
    pt_cost_hw hw;
    pt_cluster_apply_profile(&plan.cluster, R->db);
    pt_cost_hw_of(&plan.cluster, &hw);
    pt_kernel_fits *fits = malloc(sizeof *fits);
    pt_op_sample *v = NULL;
    size_t n = 0, nb = 0;
    if (!fits)
        return pt_err_set(err, "out of memory");
    if (run_samples(R, run, &v, &n, err)) {
        free(fits);
        return -1;
    }
    pt_costdb_kernel_fits(R->db, hw.device, fits);
    op_bar *bars = calloc(n ? n : 1, sizeof *bars);
    if (!bars) {
        free(v), free(fits);
        return pt_err_set(err, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        op_bar *o = &bars[nb++];
        o->s = &v[i];
        o->median_s = v[i].st.median_s; /* the statistic ptcalib prints and stores */
        o->total_s = v[i].st.total_s;
        o->predicted_s = pt_cost_kernel(R->before, &hw, &v[i].op).time_s;
        o->fitted_s = pt_cost_kernel_fitted(&hw, &v[i].op, fits);
    }
    qsort(bars, nb, sizeof *bars, by_total);
    FILE *f = open_in(R, "ops.dat", err);
    int rc = f ? 0 : -1;
    if (f) {
        fprintf(f, "# label measured_us predicted_us fitted_us key\n");
        for (size_t i = 0; i < nb && i < OPS_DRAWN; i++) {
            const char *key = bars[i].s->op.key, *kind_end = strchr(key, ':');
            const char *shape = kind_end ? strchr(kind_end + 1, ':') : NULL;
            char label[sizeof bars[i].s->op.key + 1];
            snprintf(label, sizeof label, "%.*s %s",
                     kind_end ? (int)(kind_end - key) : (int)strlen(key), key,
                     shape ? shape + 1 : "");
            dat_string(f, label);
            fprintf(f, " %.6g %.6g %.6g ", 1e6 * bars[i].median_s, 1e6 * bars[i].predicted_s,
                    1e6 * bars[i].fitted_s);
            dat_string(f, key);
            fputc('\n', f);
        }
        close_out(R, f);
    }
    free(v), free(bars), free(fits);
    if (rc || !(f = open_in(R, "ops.gp", err)))
        return -1;
    fprintf(f,
            "set title 'Run %lld: the %d ops with the most time, per call'\n"
            "set ylabel 'microseconds per call'\nset logscale y\nset grid ytics\n"
            "set style data histograms\nset style histogram clustered gap 1\n"
            "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
            "set xtics rotate by -50 noenhanced font ',8'\nset key top right\n",
            (long long)run->id, OPS_DRAWN);
    xtic_margins(f, longest_label(R, "ops.dat"), 50, 0.8);
    fprintf(f,
            "plot 'ops.dat' using 2:xtic(1) lc rgb '#c0392b' title 'measured (median over all ranks)', \\\n"
            "     '' using 3 lc rgb '#2c3e50' title 'predicted by the tables before the run', \\\n"
            "     '' using 4 lc rgb '#95a5a6' title 'fitted analytic model'\n");
    close_out(R, f);
    if (gnuplot(R, "ops", "1000,600", err))
        return -1;
    index_entry(R, "ops", "Per-op predicted against measured",
         "Per call, for the ops of the latest traced run that took the most time: the median "
         "measured over every rank, what the cost tables predicted before any run was "
         "calibrated into them, and the analytic model with the fitted efficiencies (ptcalib).");
    return 0;
}

/* ---- Pipeline timeline ------------------------------------------------------------------------ */

/* 1 forward, 2 backward, 3 communication and the rest. The runtime names instructions
 * "fwd mb0 c0" (runtime/engine.c), the simulator "F mb0 c0" (planner/sim.c). */
static int kind_of(const char *name)
{
    if (!strncmp(name, "fwd", 3) || !strncmp(name, "F ", 2))
        return 1;
    if (!strncmp(name, "bwd", 3) || !strncmp(name, "B ", 2))
        return 2;
    return 3;
}

/* One box per instruction: rank row, start and end in ms from the step's start; *end_ms
 * becomes the latest end drawn. */
static void box(FILE *f, int rank, int stream, double t0_ms, double t1_ms, const char *name,
                double *end_ms)
{
    double y = rank + (stream ? 0.22 : -0.08), h = stream ? 0.12 : 0.3;
    *end_ms = fmax(*end_ms, t1_ms);
    fprintf(f, "%.6g %.6g %.6g %.6g %.6g %.6g %d\n", 0.5 * (t0_ms + t1_ms), y, t0_ms, t1_ms,
            y - h, y + h, kind_of(name));
}

/* The measured step: on each rank the instructions after its second-to-last optimizer
 * step (the last whole step), on the common clock, from the earliest of them. */
static int measured_timeline(FILE *f, const pt_span *v, size_t n, int world, double *end_ms)
{
    double from = INFINITY;
    int drawn = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < world; r++) {
            double last = -INFINITY, before = -INFINITY;
            for (size_t i = 0; i < n; i++)
                if (v[i].rank == r && !v[i].key[0] && !strncmp(v[i].name, "optim", 5)) {
                    before = last;
                    last = v[i].t0_s + v[i].dur_s;
                }
            for (size_t i = 0; i < n; i++) {
                const pt_span *s = &v[i];
                if (s->rank != r || s->key[0] || s->t0_s < before || s->t0_s > last)
                    continue;
                if (pass == 0)
                    from = fmin(from, s->t0_s);
                else {
                    box(f, r, s->stream, 1e3 * (s->t0_s - from),
                        1e3 * (s->t0_s + s->dur_s - from), s->name, end_ms);
                    drawn++;
                }
            }
        }
    return drawn;
}

static int predicted_timeline(FILE *f, const pt_plan *p, const pt_costdb *db, double *end_ms,
                              pt_err *err)
{
    json_t *events = json_array();
    pt_candidate c;
    int rc = pt_evaluate(&p->model, &p->cluster, &p->train, db, &p->layout, events, &c, err);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (rc || !name || !ph || strcmp(ph, "X"))
            continue;
        double ts = json_number_value(json_object_get(e, "ts")) * 1e-3;
        double dur = json_number_value(json_object_get(e, "dur")) * 1e-3;
        box(f, (int)json_integer_value(json_object_get(e, "pid")),
            (int)json_integer_value(json_object_get(e, "tid")) ? 1 : 0, ts, ts + dur, name, end_ms);
    }
    json_decref(events);
    return rc;
}

static int draw_timeline(report *R, const pt_run_record *run, const pt_span *v, size_t n,
                         pt_err *err)
{
    pt_plan plan;
    if (pt_plan_read(run->plan_path, &plan, NULL))
        return 0; /* draw_ops said why */
    pt_cluster_apply_profile(&plan.cluster, R->db);
    FILE *f = open_in(R, "timeline_predicted.dat", err);
    if (!f)
        return -1;
    fprintf(f, "# x y xlow xhigh ylow yhigh kind(1 fwd, 2 bwd, 3 other)\n");
    double end_ms = 0; /* of both steps: one time scale, so they compare by eye */
    int rc = predicted_timeline(f, &plan, R->db, &end_ms, err);
    close_out(R, f);
    if (rc || !(f = open_in(R, "timeline_measured.dat", err)))
        return -1;
    fprintf(f, "# x y xlow xhigh ylow yhigh kind(1 fwd, 2 bwd, 3 other)\n");
    measured_timeline(f, v, n, (int)run->world, &end_ms);
    double right = end_ms > 0 ? 1.02 * end_ms : 1;
    close_out(R, f);
    if (!(f = open_in(R, "timeline.gp", err)))
        return -1;
    const char *style = "with boxxyerror fs solid 0.8 border rgb 'white' lc variable notitle";
    fprintf(f,
            "set palette defined (1 '#2e86c1', 2 '#e67e22', 3 '#27ae60')\nunset colorbox\n"
            "set linetype 1 lc rgb '#2e86c1'\nset linetype 2 lc rgb '#e67e22'\n"
            "set linetype 3 lc rgb '#27ae60'\n"
            "set multiplot layout 2,1\nset ylabel 'rank'\nset ytics 1\n"
            "set yrange [-0.6:%lld-0.4]\nset xlabel 'ms from the start of the step'\n"
            "set grid xtics\n"
            "set title 'Predicted step (simulator): forward blue, backward orange, transfers "
            "and reductions green'\n"
            "set xrange [0:%.6g]\n"
            "plot 'timeline_predicted.dat' using 1:2:3:4:5:6:7 %s\n"
            "set title 'Measured step (the last whole step of run %lld, all ranks on one "
            "clock)'\n"
            "set xrange [0:%.6g]\n"
            "plot 'timeline_measured.dat' using 1:2:3:4:5:6:7 %s\n"
            "unset multiplot\n",
            (long long)run->world, right, style, (long long)run->id, right, style);
    close_out(R, f);
    if (gnuplot(R, "timeline", "1000,650", err))
        return -1;
    link_data(R, "timeline", "`timeline_predicted.dat`, `timeline_measured.dat`",
              "Pipeline timeline, predicted beside measured",
              "One row per rank (compute below, the communication stream above it); the "
              "simulator's step from the plan on top, the measured last step of the run below, "
              "both on the same time scale.");
    return 0;
}

/* ---- Memory per rank ----------------------------------------------------------------------------- */

static int draw_memory(report *R, pt_err *err)
{
    const pt_run_record *run = NULL;
    pt_run_rank *ranks = NULL;
    size_t n = 0;
    for (size_t i = R->n_runs; i-- > 0 && !run;) {
        if (pt_costdb_run_ranks(R->db, R->runs[i].id, &ranks, &n, err))
            return -1;
        if (n)
            run = &R->runs[i];
        else
            free(ranks);
    }
    if (!run)
        return 0;
    FILE *f = open_in(R, "memory.dat", err);
    if (!f) {
        free(ranks);
        return -1;
    }
    double mib = 1024.0 * 1024.0;
    fprintf(f, "# rank predicted_MiB allocated_MiB peak_rss_MiB\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "\"rank %d (stage %d)\" %.6g %.6g %.6g\n", ranks[i].rank, ranks[i].stage,
                ranks[i].predicted_memory_bytes / mib, ranks[i].measured_memory_bytes / mib,
                ranks[i].peak_rss_bytes / mib);
    close_out(R, f);
    free(ranks);
    if (!(f = open_in(R, "memory.gp", err)))
        return -1;
    fprintf(f,
            "set title 'Memory per rank of run %lld (%lld ranks)'\nset ylabel 'MiB'\n"
            "set logscale y\n"
            "set grid ytics\nset style data histograms\nset style histogram clustered gap 1\n"
            "set style fill solid 0.85 border -1\nset key top left\nset xtics noenhanced\n",
            (long long)run->id, (long long)run->world);
    if (run->world > 4) { /* more rank labels than fit side by side */
        fprintf(f, "set xtics rotate by -45\n");
        xtic_margins(f, longest_label(R, "memory.dat"), 45, 1);
    }
    fprintf(f,
            "plot 'memory.dat' using 2:xtic(1) lc rgb '#2c3e50' title 'predicted (memory model)', "
            "\\\n     '' using 3 lc rgb '#c0392b' title 'allocated by the model', \\\n"
            "     '' using 4 lc rgb '#95a5a6' title 'process peak (resident set)'\n");
    close_out(R, f);
    if (gnuplot(R, "memory", "800,500", err))
        return -1;
    index_entry(R, "memory", "Memory per rank, predicted against measured",
         "For the latest run with per-rank figures: the memory model's prediction for each "
         "rank's stage, what its model allocated, and the whole process's peak resident set "
         "(which also holds the data, MPI and the program).");
    return 0;
}

/* ---- Loss curves ---------------------------------------------------------------------------------- */

/* What the loss chart shows of the logs: the curves' labels and the ranges that hold
 * every point, the last validation point included. */
typedef struct {
    const char *path[8];
    char layout[8][128];      /* short, from the log's header line; "" without one */
    int block[8];             /* its training losses' data block; validation the next */
    int n;
    double step_lo, step_hi, loss_lo, loss_hi;
} loss_chart;

/* Copies the step and validation losses of a ptrun --log file into f as two gnuplot data
 * blocks, widens c's ranges to hold them and keeps the run's layout from the log's
 * header line; the number of training steps copied, -1 when the file cannot be read. */
static int copy_losses(FILE *f, const char *path, loss_chart *c)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int steps = 0;
    c->layout[c->n][0] = '\0';
    for (int want = 0; want < 2; want++) {
        rewind(in);
        fputs("# ", f);
        dat_text(f, path);
        fprintf(f, ": %s\n", want ? "validation" : "training");
        int rows = 0;
        while (getline(&line, &cap, in) > 0) {
            json_t *j = json_loads(line, 0, NULL);
            const char *type = json_string_value(json_object_get(j, "type"));
            const char *layout = json_string_value(json_object_get(j, "layout"));
            json_t *step = json_object_get(j, "step"), *loss = json_object_get(j, "loss");
            if (type && !strcmp(type, "header") && layout && !c->layout[c->n][0])
                short_layout(layout, c->layout[c->n], sizeof c->layout[c->n]);
            if (type && !strcmp(type, want ? "val" : "step") && json_is_integer(step) &&
                json_is_number(loss)) {
                double x = (double)json_integer_value(step), y = json_number_value(loss);
                fprintf(f, "%.0f %.6g\n", x, y);
                c->step_lo = fmin(c->step_lo, x), c->step_hi = fmax(c->step_hi, x);
                c->loss_lo = fmin(c->loss_lo, y), c->loss_hi = fmax(c->loss_hi, y);
                rows++;
            }
            json_decref(j);
        }
        if (!rows)
            fprintf(f, "nan nan\n"); /* keeps the block so indexes stay paired */
        steps += want ? 0 : rows;
        fprintf(f, "\n\n");
    }
    free(line);
    fclose(in);
    return steps;
}

/* Whether two paths name one file (a log given with --log may be a run's recorded one). */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return !strcmp(a, b) || (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
                             sa.st_ino == sb.st_ino);
}

/* gather_losses' work, into the open f. */
static int copy_all_losses(report *R, FILE *f, loss_chart *c, pt_err *err)
{
    const char *paths[MAX_LOGS + 64];
    int n = 0;
    for (int i = 0; i < R->o->n_logs; i++)
        paths[n++] = R->o->logs[i];
    for (size_t i = R->n_runs; i-- > 0 && n < MAX_LOGS + 64;)
        if (R->runs[i].log_path[0])
            paths[n++] = R->runs[i].log_path;
    *c = (loss_chart){.step_lo = INFINITY, .step_hi = -INFINITY, .loss_lo = INFINITY,
                      .loss_hi = -INFINITY};
    for (int i = 0, blocks = 0; i < n && c->n < 8; i++) {
        bool seen = false;
        for (int k = 0; k < c->n; k++)
            seen |= same_file(c->path[k], paths[i]);
        if (seen)
            continue;
        int steps = copy_losses(f, paths[i], c);
        bool given = i < R->o->n_logs;
        if (given && steps < 0)
            return pt_err_set(err, "cannot read the log '%s': %s", paths[i], strerror(errno));
        if (given && steps == 0)
            return pt_err_set(err, "%s: no training steps in it (want a ptrun --log file)",
                              paths[i]);
        if (steps > 0)
            c->path[c->n] = paths[i], c->block[c->n++] = blocks;
        blocks += steps >= 0 ? 2 : 0; /* copied, if only to be skipped */
    }
    return 0;
}

/* The logs to draw, into c and as data blocks into loss.dat: those given with --log first
 * (one that cannot be read or holds no training step is an error), then the runs'
 * recorded logs, newest first, where they can still be read. */
static int gather_losses(report *R, loss_chart *c, pt_err *err)
{
    FILE *f = open_in(R, "loss.dat", err);
    if (!f)
        return -1;
    int rc = copy_all_losses(R, f, c, err);
    if (fclose(f) != 0 && rc == 0)
        rc = pt_err_set(err, "cannot write '%s/loss.dat'", R->o->out);
    return rc;
}

static int draw_loss(report *R, const loss_chart *c, pt_err *err)
{
    if (!c->n) {
        fprintf(R->index, "## Loss curves\n\nNot drawn: no run has a readable log (ptrun --log "
                          "FILE --record, or ptreport --log FILE).\n\n");
        return 0;
    }
    FILE *f = open_in(R, "loss.gp", err);
    if (!f)
        return -1;
    /* explicit ranges with a margin: a point on the border, such as the last validation,
     * would be cut in half */
    double dx = fmax(0.5, 0.03 * (c->step_hi - c->step_lo));
    double dy = c->loss_hi > c->loss_lo ? 0.05 * (c->loss_hi - c->loss_lo)
                                        : 0.05 * fabs(c->loss_hi) + 0.01;
    fprintf(f, "set title 'Loss: training per step (lines), validation (points)'\n"
               "set xlabel 'step'\nset ylabel 'loss (nats per token)'\n"
               "set grid\nset key below left noenhanced\nset xrange [%.6g:%.6g]\n"
               "set yrange [%.6g:%.6g]\nplot ", c->step_lo - dx, c->step_hi + dx,
            c->loss_lo - dy, c->loss_hi + dy);
    for (int i = 0; i < c->n; i++) {
        const char *base = strrchr(c->path[i], '/');
        char name[256];
        snprintf(name, sizeof name, "%s%s%s", base ? base + 1 : c->path[i],
                 c->layout[i][0] ? ": " : "", c->layout[i]);
        fprintf(f, "%s'loss.dat' index %d using 1:2 with lines lw 2 lc %d title ",
                i ? ", \\\n     " : "", c->block[i], i + 1);
        gp_string(f, name);
        fprintf(f, ", '' index %d using 1:2 with points pt 7 ps 1.3 lc %d notitle",
                c->block[i] + 1, i + 1);
    }
    fprintf(f, "\n");
    close_out(R, f);
    char size[32]; /* a key line below the plot per log */
    snprintf(size, sizeof size, "800,%d", 480 + 18 * c->n);
    if (gnuplot(R, "loss", size, err))
        return -1;
    index_entry(R, "loss", "Loss curves", "Training loss per step (lines) and validation loss "
                                   "(points of the same colour) from the runs' --log files, "
                                   "each named with its run's layout.");
    return 0;
}

/* ---- Main ----------------------------------------------------------------------------------------- */

static int make_report(const options *o, report *R, pt_err *err)
{
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &R->db, err) ||
        pt_costdb_open(o->db, PT_COSTDB_READ | PT_COSTDB_PROFILE_ONLY, &R->before, err) ||
        pt_costdb_runs(R->db, &R->runs, &R->n_runs, err))
        return -1;
    if (R->n_runs == 0)
        return pt_err_set(err, "%s: no runs recorded in this cost database (record one with "
                               "ptrun PLAN.json --record --db %s)", o->db, o->db);
    char *const version[] = {"gnuplot", "--version", NULL};
    if (run_gnuplot(NULL, version, "/dev/null", true) != 0)
        return pt_err_set(err, "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)");
    /* the staging folder's name, and the files' in it, must fit R->dir's buffers */
    if (strlen(o->out) > sizeof R->dir - 64)
        return pt_err_set(err, "--out: the path is too long (%zu bytes, at most %zu): '%s'",
                          strlen(o->out), sizeof R->dir - 64, o->out);
    if (mkdir(o->out, 0777) == 0)
        R->made_out = true;
    else if (errno != EEXIST)
        return pt_err_set(err, "cannot create '%s': %s", o->out, strerror(errno));
    /* everything is written into a staging folder and moved into --out only when the
     * whole report is done: a failure leaves --out as it was */
    snprintf(R->dir, sizeof R->dir, "%s/.ptreport-%ld", o->out, (long)getpid());
    if (mkdir(R->dir, 0777) != 0) {
        int e = errno;
        R->dir[0] = 0;
        return pt_err_set(err, "cannot write in '%s': %s", o->out, strerror(e));
    }
    loss_chart losses; /* first: a --log file that cannot be drawn fails before the rest */
    if (gather_losses(R, &losses, err) || !(R->index = open_in(R, "index.md", err)))
        return -1;
    fprintf(R->index, "# ptplan report\n\n%zu runs recorded in `%s`; the latest: run %lld, %s "
                      "on %s, %s, %lld ranks, revision %s, %s.\n\n", R->n_runs, o->db,
            (long long)R->runs[R->n_runs - 1].id, R->runs[R->n_runs - 1].model,
            R->runs[R->n_runs - 1].cluster, R->runs[R->n_runs - 1].layout,
            (long long)R->runs[R->n_runs - 1].world, short_rev(R->runs[R->n_runs - 1].git_revision),
            R->runs[R->n_runs - 1].created_at);
    pt_span *spans = NULL;
    size_t n = 0;
    const pt_run_record *traced = NULL;
    int rc = draw_mfu(R, err) || draw_steptime(R, err) ? -1 : 0;
    if (rc == 0)
        traced = latest_traced(R, &spans, &n, err);
    if (rc == 0 && !traced && err->msg[0])
        rc = -1;
    if (rc == 0 && traced)
        rc = draw_ops(R, traced, err) || draw_timeline(R, traced, spans, n, err) ? -1 : 0;
    else if (rc == 0)
        fprintf(R->index, "## Per-op times and timeline\n\nNot drawn: no recorded run has "
                          "spans (ptrun --record stores them).\n\n");
    if (rc == 0)
        rc = draw_memory(R, err) || draw_loss(R, &losses, err) ? -1 : 0;
    free(spans);
    return rc;
}

/* Moves the staged files into --out, index.md last (so that it never links a picture
 * not yet there); then removes the staging folder with whatever is left in it. */
static int publish(report *R, bool keep, pt_err *err)
{
    DIR *d = opendir(R->dir);
    int rc = d ? 0 : pt_err_set(err, "cannot read '%s': %s", R->dir, strerror(errno));
    char from[2048], to[2048];
    for (int pass = 0; d && pass < 2; pass++) {
        rewinddir(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            bool index = !strcmp(e->d_name, "index.md");
            if (e->d_name[0] == '.' || index != (pass == 1))
                continue;
            snprintf(from, sizeof from, "%s/%s", R->dir, e->d_name);
            snprintf(to, sizeof to, "%s/%s", R->o->out, e->d_name);
            if (keep && rc == 0 && rename(from, to) != 0)
                rc = pt_err_set(err, "cannot move '%s' into '%s': %s", e->d_name, R->o->out,
                                strerror(errno));
            if (!keep || rc)
                remove(from);
        }
    }
    if (d)
        closedir(d);
    rmdir(R->dir);
    if (!keep && R->made_out)
        rmdir(R->o->out); /* only when empty: nothing of anyone else's goes */
    return rc;
}

static int tool_main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return 1;
    report R = {.o = &o};
    pt_err err = {""};
    int rc = make_report(&o, &R, &err);
    if (R.index)
        close_out(&R, R.index);
    if (rc == 0 && R.write_errno)
        rc = pt_err_set(&err, "cannot write the report in '%s': %s; nothing was changed there",
                        o.out, strerror(R.write_errno));
    if (R.dir[0] && publish(&R, rc == 0, rc ? NULL : &err))
        rc = -1;
    if (rc)
        fprintf(stderr, "ptreport: %s\n", err.msg);
    else
        printf("report: %s/index.md (%d pictures, PNG and SVG)\n", o.out, R.drawn);
    free(R.runs);
    pt_costdb_close(R.db);
    pt_costdb_close(R.before);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptreport", tool_main(argc, argv));
}
