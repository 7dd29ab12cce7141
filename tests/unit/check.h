/* check.h - minimal assertions for unit tests: exit 0 pass, 1 fail. */
#ifndef KVFS_CHECK_H
#define KVFS_CHECK_H
#include <stdio.h>
#include <stdlib.h>
static int check_failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); check_failures++; } } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); if (_a != _b) { fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %lld, %s = %lld\n", __FILE__, __LINE__, #a, _a, #b, _b); check_failures++; } } while (0)
#define CHECK_DONE() do { if (check_failures) { fprintf(stderr, "%d check(s) failed\n", check_failures); return 1; } printf("ok\n"); return 0; } while (0)
#endif
