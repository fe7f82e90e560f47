/* test_ops.c - every member of the backend table on the CPU backend against
   float64: the table of cases in tests/ops.h (make test). Per member, the
   cases run and passed; each failure names the case, the output, the first
   element off and the tolerance. The same table runs on every CUDA device
   against the CPU backend in test_cuda ("test_cuda ops-table"). */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "ops.h"

int main(void)
{
    mirror_error err = {0, ""};
    mirror_strategy *s = checked_strategy("cpu", 1);
    ops_t t;
    size_t ws = 0, i, k, runs[OPS_MEMBERS], fails[OPS_MEMBERS], absent[OPS_MEMBERS];
    char name[160], why[400];
    int p;
    if (!s) return check_done("test_ops");
    CHECK(ops_coverage(&mirror__cpu_backend) == 0, "the table covers every member of struct mirror__backend");
    memset(&t, 0, sizeof t);
    t.be = &mirror__cpu_backend, t.s = s;
    t.dev = t.be->open(s, 0, &ws, &err);
    CHECK(t.dev != NULL, "a CPU context: %s", err.message);
    if (!t.dev) return check_done("test_ops");
    memset(runs, 0, sizeof runs), memset(fails, 0, sizeof fails), memset(absent, 0, sizeof absent);
    for (k = 0; k < OPS_NCASES; k++)
        for (p = 0; p <= MIRROR_PRECISION_BF16; p++) {
            const ops_case *c = &ops_cases[k];
            int missed;
            if (!(c->precisions & (1 << p))) continue;
            ops_run(&t, c, p);
            missed = !t.absent && ops_misses(&t, NULL, why, sizeof why);
            CHECK(!missed, "%s: %s", ops_case_name(c, p, name, sizeof name), why);
            for (i = 0; i < OPS_MEMBERS; i++)
                if (ops_names(c, ops_members[i].name)) runs[i]++, fails[i] += missed, absent[i] += t.absent;
        }
    ops_clear(&t);
    for (i = 0; i < OPS_MEMBERS; i++)
        if (ops_members[i].kind != OPS_DATA)
            printf("  %-22s %3zu runs%s%s\n", ops_members[i].name, runs[i], fails[i] ? ", FAILED" : "",
                   absent[i] ? " (optional: NULL on this backend)" : "");
    t.be->close(t.dev);
    mirror_strategy_destroy(s);
    return check_done("test_ops");
}
