/*
 * Fuzzes the cost database loaders (costmodels/db.c and what reads from it) on the
 * input written to a temporary file and opened as ptplan opens --db: the samples,
 * devices, fits and runs read into memory, then the lookups the planner prices ops
 * with, the profile an unprofiled cluster takes, and the runs ptreport and ptcalib read.
 */
#include "fuzz.h"
#include "planner.h"

/* The kernels and collectives priced: keys like ptprofile's on the CPU (sampled in
 * the seed corpus) and like a GPU's (analytic or fitted). */
static const pt_kernel_op kernels[] = {
    {"gemm:fp32:m=64,n=64,k=64", PT_DTYPE_FP32, 524288.0, 49152.0, 0},
    {"gemm:fp32:m=96,n=64,k=48", PT_DTYPE_FP32, 589824.0, 55296.0, 0},
    {"attn_fwd:bf16:b=1,s=4096,a=32,d=128", PT_DTYPE_BF16, 2.2e11, 1.0e8, 0.5},
    {"gelu_bwd:fp32:n=65536", PT_DTYPE_FP32, 0, 786432.0, 0},
};
static const pt_coll_op colls[] = {
    {PT_COLL_ALLREDUCE, 1 << 20, 2, 2},
    {PT_COLL_ALLGATHER, 3e8, 16, 8},
    {PT_COLL_SENDRECV, 4096, 2, 1},
};

/* The runs recorded, each with its ranks, spans and op statistics. */
static void read_runs(const pt_costdb *db)
{
    pt_run_record *runs;
    size_t n;
    pt_err err;
    if (pt_costdb_runs(db, &runs, &n, &err) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        pt_run_rank *ranks;
        pt_span *spans;
        pt_op_stat *stats;
        size_t m;
        if (pt_costdb_run_ranks(db, runs[i].id, &ranks, &m, &err) == 0)
            free(ranks);
        if (pt_costdb_run_spans(db, runs[i].id, &spans, &m, &err) == 0)
            free(spans);
        if (pt_costdb_run_op_stats(db, runs[i].id, &stats, &m, &err) == 0)
            free(stats);
    }
    free(runs);
}

/* Prices every op for a cluster of `device` whose figures come from the profile. */
static void price(const pt_costdb *db, const char *device)
{
    pt_cluster c;
    pt_err err;
    if (pt_cluster_get("dgx-h100", &c, &err))
        abort();
    snprintf(c.device.name, sizeof c.device.name, "%s", device);
    memset(c.device.peak_flops, 0, sizeof c.device.peak_flops);
    c.device.memory_bw_Bps = 0;
    c.intra.bw_Bps = 0;
    c.inter.bw_Bps = 0;
    pt_cluster_apply_profile(&c, db);
    pt_cost_hw hw;
    pt_cost_hw_of(&c, &hw);
    pt_kernel_fits *fits = malloc(sizeof *fits);
    if (!fits)
        abort();
    pt_costdb_kernel_fits(db, device, fits);
    pt_link_fit intra, inter;
    pt_costdb_link_fits(db, hw.backend, &intra, &inter);
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        (void)pt_cost_kernel(db, &hw, &kernels[i]);
        (void)pt_cost_kernel_fitted(&hw, &kernels[i], fits);
    }
    for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
        (void)pt_cost_coll(db, &hw, &colls[i]);
        (void)pt_cost_coll_fitted(&hw, &colls[i], &intra, &inter);
    }
    int64_t runs[16], profiled;
    (void)pt_costdb_sample_runs(db, device, runs, 16, &profiled);
    free(fits);
}

/* Removes the database and what SQLite may have left beside it. */
static void remove_db(const char *path)
{
    static const char *const sides[] = {"", "-journal", "-wal", "-shm"};
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        char p[80];
        snprintf(p, sizeof p, "%s%s", path, sides[i]);
        unlink(p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    fuzz_file(data, size, path);
    pt_costdb *db;
    pt_err err;
    if (pt_costdb_open(path, PT_COSTDB_READ, &db, &err) == 0) {
        pt_costdb_id id;
        pt_costdb_identity(db, &id);
        price(db, "cpu");
        price(db, "H100-SXM5-80GB");
        read_runs(db);
        pt_costdb_close(db);
    }
    remove_db(path);
    return 0;
}
