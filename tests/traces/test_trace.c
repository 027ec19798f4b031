/*
 * pttrace: compact recording and its expansion (names, keys, micro-batches and
 * instruction indices adopted by the ops of an instruction, op-list indices; which spans are ops and which instructions), packing two
 * ranks and merging them onto one clock, the Chrome trace written and read back, and
 * the errors: a damaged packed buffer, a file cut short, a key or name too long for a
 * span; bytes that are not UTF-8 written so that the file reads back.
 */
#include "check.h"
#include "trace.h"

#include <stdlib.h>

/* One step of a rank: two instructions, each with two ops and a collective. */
static void record_step(pt_trace *t, int rank, double at)
{
    pt_kernel_op q = {.key = "gemm:fp32:m=64,n=64,k=64", .dtype = PT_DTYPE_FP32,
                      .flops = 524288, .bytes = 49152};
    pt_kernel_op a = {.key = "attn_fwd:fp32:b=1,s=64", .dtype = PT_DTYPE_BF16, .bytes = 8};
    for (int mb = 0; mb < 2; mb++) {
        double t0 = at + mb * 1e-3;
        pt_trace_add_op(t, rank, 0, "q", &q, 0, t0 + 1e-5, t0 + 2e-5);
        pt_trace_add_op(t, rank, 0, "attn", &a, 1, t0 + 3e-5, t0 + 4e-5);
        pt_trace_add_coll(t, rank, "dp_allreduce", 2, t0 + 5e-5, t0 + 6e-5);
        pt_trace_add_ins(t, rank, 0, "fwd", mb, 0, 3 + mb, t0, t0 + 7e-5);
    }
    /* the older form of an instruction: its name parsed */
    pt_trace_add(t, rank, 0, "optim_step mb-1 c-1", NULL, at + 3e-3, at + 4e-3);
}

static void test_expand(void)
{
    pt_trace t;
    pt_trace_init(&t, true);
    t.origin_s = 0;
    record_step(&t, 0, 1.0);
    CHECK_INT(t.n, 0);
    pt_err err;
    CHECK_INT(pt_trace_expand(&t, &err), 0);
    CHECK_INT(t.n, 9);
    CHECK(strcmp(t.v[0].name, "q") == 0);
    CHECK(strcmp(t.v[0].key, "gemm:fp32:m=64,n=64,k=64") == 0);
    CHECK_NEAR(t.v[0].flops, 524288, 0);
    CHECK_NEAR(t.v[0].t0_s, 1.0 + 1e-5, 1e-12);
    CHECK_NEAR(t.v[0].dur_s, 1e-5, 1e-6);
    CHECK_INT(t.v[1].dtype, PT_DTYPE_BF16);
    CHECK_INT(t.v[2].stream, 1);
    CHECK(strcmp(t.v[7].name, "fwd mb1 c0") == 0);
    CHECK(t.v[7].key[0] == 0);
    /* the ops and the collective of an instruction take its micro-batch */
    for (int i = 4; i < 8; i++)
        CHECK_INT(t.v[i].mb, 1);
    CHECK_INT(t.v[0].mb, 0);
    CHECK(strcmp(t.v[8].name, "optim_step mb-1 c-1") == 0);
    /* every span of an instruction carries its index in the program; ops their index
     * in their list */
    for (int i = 0; i < 8; i++) {
        CHECK_INT(t.v[i].ins, 3 + i / 4);
        CHECK_INT(t.v[i].op, i % 4 == 3 ? -1 : i % 4);
    }
    CHECK_INT(t.v[8].ins, -1);
    CHECK_INT(t.v[8].op, -1);
    /* ops (compute with a key, the collective) against the schedule's instructions */
    const bool is_op[9] = {true, true, true, false, true, true, true, false, false};
    for (int i = 0; i < 9; i++)
        CHECK(pt_span_is_op(&t.v[i]) == is_op[i]);
    pt_trace_free(&t);

    pt_trace off;
    pt_trace_init(&off, false);
    record_step(&off, 0, 1.0);
    CHECK_INT(pt_trace_expand(&off, &err), 0);
    CHECK_INT(off.n, 0);
    pt_trace_add(NULL, 0, 0, "q", NULL, 0, 1); /* no trace: nothing happens */
    pt_trace_free(&off);
}

/* Two ranks' packed traces laid end to end into *all; rank 1's clock runs 5 s ahead. */
static void pack_two(void **all, int64_t sizes[2])
{
    void *b[2];
    for (int r = 0; r < 2; r++) {
        pt_trace t;
        pt_trace_init(&t, true);
        double skew = 5.0 * r;
        t.origin_s = 10.0 + skew;
        t.n_sync = 2;
        t.sync_s[0] = 10.5 + skew;
        t.sync_s[1] = 20.5 + skew;
        record_step(&t, 0, 11.0 + skew);
        pt_run_rank mem = {.rank = r, .measured_memory_bytes = 100.0 * (r + 1)};
        pt_err err;
        CHECK_INT(pt_trace_pack(&t, &mem, &b[r], &sizes[r], &err), 0);
        pt_trace_free(&t);
    }
    char *p = malloc((size_t)(sizes[0] + sizes[1]));
    memcpy(p, b[0], (size_t)sizes[0]);
    memcpy(p + sizes[0], b[1], (size_t)sizes[1]);
    free(b[0]);
    free(b[1]);
    *all = p;
}

static void test_merge_and_files(const char *dir)
{
    void *all;
    int64_t sizes[2];
    pack_two(&all, sizes);
    pt_trace m;
    pt_run_rank mem[2];
    pt_err err;
    CHECK_INT(pt_trace_merge(all, sizes, 2, &m, mem, &err), 0);
    CHECK_INT(m.n, 18);
    CHECK_INT(m.world, 2);
    CHECK_NEAR(mem[1].measured_memory_bytes, 200, 0);
    /* rank 1's spans on rank 0's clock: the same times as rank 0's */
    CHECK_INT(m.v[9].rank, 1);
    CHECK_NEAR(m.v[9].t0_s, m.v[0].t0_s, 1e-9);
    CHECK_INT(m.v[9].ins, m.v[0].ins);
    CHECK_INT(m.v[10].op, 0); /* merged in time order: the instruction, then its ops */
    CHECK_INT(m.v[11].op, 1);
    CHECK(strcmp(m.v[9].key, m.v[0].key) == 0);

    char path[1024], cut[1024];
    snprintf(path, sizeof path, "%s/test_trace.json", dir);
    snprintf(cut, sizeof cut, "%s/test_trace_cut.json", dir);
    snprintf(m.plan_id, sizeof m.plan_id, "0123456789abcdef");
    snprintf(m.plan_path, sizeof m.plan_path, "/a \"quoted\"\\path");
    CHECK_INT(pt_trace_write_chrome(&m, path, &err), 0);
    pt_trace back;
    CHECK_INT(pt_trace_read_chrome(path, &back, &err), 0);
    CHECK_INT(back.n, m.n);
    CHECK_INT(back.world, 2);
    CHECK(strcmp(back.plan_path, m.plan_path) == 0);
    for (size_t i = 0; i < m.n && i < back.n; i++) {
        CHECK(strcmp(back.v[i].name, m.v[i].name) == 0);
        CHECK(strcmp(back.v[i].key, m.v[i].key) == 0);
        CHECK_INT(back.v[i].mb, m.v[i].mb);
        CHECK_INT(back.v[i].ins, m.v[i].ins);
        CHECK_INT(back.v[i].op, m.v[i].op);
        CHECK_INT(back.v[i].dtype, m.v[i].dtype);
        CHECK_NEAR(back.v[i].t0_s, m.v[i].t0_s, 1e-8);
        CHECK_NEAR(back.v[i].flops, m.v[i].flops, 0);
    }
    pt_trace_free(&back);

    /* bytes that are not UTF-8 (a Latin-1 directory; a name cut inside a character)
     * are written as U+FFFD, so that the file still reads back */
    snprintf(m.plan_path, sizeof m.plan_path, "/data/caf\xe9/plan.json");
    snprintf(m.v[0].name, sizeof m.v[0].name, "q\xc6");
    CHECK_INT(pt_trace_write_chrome(&m, path, &err), 0);
    CHECK_INT(pt_trace_read_chrome(path, &back, &err), 0);
    CHECK(strcmp(back.plan_path, "/data/caf\xef\xbf\xbd/plan.json") == 0);
    CHECK(back.n == m.n && strcmp(back.v[0].name, "q\xef\xbf\xbd") == 0);
    pt_trace_free(&back);

    /* a key or name longer than a span holds is an error naming it, not cut short
     * (a cut key would price another op); one that just fits is read whole */
    const char *field[2][2] = {{"\"q\"", "\"key\":\"%0*d\",\"dtype\":\"fp32\""},
                               {"\"%0*d\"", "\"step\":1"}};
    const int holds[2] = {(int)sizeof back.v->key - 1, (int)sizeof back.v->name - 1};
    for (int k = 0; k < 2; k++)
        for (int over = 0; over < 2; over++) {
            char fmt[512];
            snprintf(fmt, sizeof fmt, "{\"traceEvents\":[{\"name\":%s,\"ph\":\"X\","
                     "\"ts\":1,\"dur\":1,\"pid\":0,\"tid\":0,\"args\":{%s}}],"
                     "\"otherData\":{\"format\":\"%s\",\"plan_id\":\"0123456789abcdef\","
                     "\"world\":1,\"spans\":1}}", field[k][0], field[k][1], PT_TRACE_FORMAT);
            FILE *f = fopen(cut, "wb");
            if (f) {
                fprintf(f, fmt, holds[k] + over, 0);
                fclose(f);
            }
            CHECK_INT(pt_trace_read_chrome(cut, &back, &err), over ? -1 : 0);
            if (over) {
                CHECK(strstr(err.msg, k ? "name '0000" : "key '0000") != NULL);
                CHECK(strstr(err.msg, "traceEvents[0]") != NULL);
            } else {
                CHECK(back.n == 1 && strlen(k ? back.v[0].name : back.v[0].key) ==
                                         (size_t)holds[k]);
                pt_trace_free(&back);
            }
        }

    /* a file cut short is an error naming it */
    FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
    char buf[300];
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    if (out)
        fwrite(buf, 1, n, out);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    CHECK_INT(pt_trace_read_chrome(cut, &back, &err), -1);
    CHECK(strstr(err.msg, "test_trace_cut.json:1:") != NULL);
    remove(path);
    remove(cut);
    pt_trace_free(&m);

    /* a damaged buffer: a span naming a site its rank does not have */
    char *p = all;
    memset(p + sizes[0] - 24, 0x7f, 4); /* the last span's site (trace.c's rec: two
                                           doubles, then site, mb, chunk, step, ins, op) */
    CHECK_INT(pt_trace_merge(all, sizes, 2, &m, mem, &err), -1);
    CHECK(strstr(err.msg, "rank 0") != NULL);
    pt_trace_free(&m);
    sizes[1] -= 1;
    CHECK_INT(pt_trace_merge(p + sizes[0], &sizes[1], 1, &m, mem, &err), -1);
    pt_trace_free(&m);
    free(all);
}

int main(int argc, char **argv)
{
    test_expand();
    test_merge_and_files(argc > 1 ? argv[1] : ".");
    return pt_check_result();
}
