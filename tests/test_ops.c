/* test_ops.c - every member of the backend table on the CPU backend against
   float64: the table of cases in tests/ops.h (make test). Per member, the
   runs and those that missed; each miss names the case, the output, the
   first element off and the tolerance. Then the comparison test_cuda makes
   for each GPU ("test_cuda ops-table"), here a second CPU context against
   the first. */
#define MIRROR_IMPLEMENTATION
#include "../mirror.h"
#include "check.h"
#include "helpers.h"
#include "ops.h"

int main(void)
{
    mirror_error err = {0, ""};
    mirror_strategy *s = checked_strategy("cpu", 1);
    ops_t t, t2;
    size_t ws = 0;
    if (!s) return check_done("test_ops");
    CHECK(ops_coverage(&mirror__cpu_backend) == 0, "the table covers every member of struct mirror__backend");
    memset(&t, 0, sizeof t), memset(&t2, 0, sizeof t2);
    t.be = t2.be = &mirror__cpu_backend, t.s = t2.s = s;
    t.dev = t.be->open(s, 0, &ws, &err);
    t2.dev = t.be->open(s, 0, &ws, &err);
    CHECK(t.dev && t2.dev, "CPU contexts: %s", err.message);
    if (!t.dev || !t2.dev) return check_done("test_ops");
    ops_table(&t, NULL, "cpu", 1);
    ops_table(&t2, &t, "cpu against cpu", 0);
    t.be->close(t.dev);
    t.be->close(t2.dev);
    mirror_strategy_destroy(s);
    return check_done("test_ops");
}
