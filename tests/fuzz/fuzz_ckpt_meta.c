/*
 * Fuzzes the checkpoint metadata reader (pt_ckpt_meta_read: runtime/checkpoint.c) on
 * the input written as meta.json of a temporary directory. Metadata it accepts must
 * write out and read back unchanged, and its numbers must be in their ranges: the data
 * position at least the step and at most 2^32 samples a step (runtime/checkpoint.c),
 * the step within the run's steps (regressions/ckpt_meta/: a data position of
 * 2^63 - 11, once accepted, hung ptrun).
 */
#include "fuzz.h"
#include "runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[64] = "/tmp/ptfuzz-XXXXXX", path[96];
    if (!mkdtemp(dir))
        abort();
    fuzz_put(dir, "meta.json", data, size);
    pt_ckpt_meta m, back;
    pt_err err;
    if (pt_ckpt_meta_read(dir, &m, &err) == 0) {
        FUZZ_CHECK(m.step >= 0 && m.step <= m.run.steps && m.data_pos >= m.step &&
                   (m.step >= INT64_C(1) << 31 || m.data_pos <= m.step * (INT64_C(1) << 32)) &&
                   m.global_batch >= 1 && m.global_batch <= INT64_C(1) << 30);
        FUZZ_CHECK(pt_ckpt_meta_write(dir, &m, &err) == 0);
        FUZZ_CHECK(pt_ckpt_meta_read(dir, &back, &err) == 0);
        FUZZ_CHECK(strcmp(m.layout, back.layout) == 0 && m.step == back.step &&
                   m.data_pos == back.data_pos && m.world == back.world &&
                   strcmp(m.config_hash, back.config_hash) == 0 &&
                   strcmp(m.plan_hash, back.plan_hash) == 0 &&
                   m.format_version == back.format_version &&
                   strcmp(m.model.name, back.model.name) == 0 &&
                   m.model.hidden == back.model.hidden && m.model.layers == back.model.layers &&
                   m.run.seed == back.run.seed && m.run.steps == back.run.steps &&
                   m.global_batch == back.global_batch &&
                   m.train_tokens == back.train_tokens &&
                   strcmp(m.run.data, back.run.data) == 0 &&
                   strcmp(m.created_at, back.created_at) == 0);
    }
    snprintf(path, sizeof path, "%s/meta.json", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
