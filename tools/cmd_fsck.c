/* kvfsctl fsck - check a store; --rebuild recreates its index. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "store.h"
#include "tool_util.h"

static void report(void *ctx, const char *line)
{
    (void)ctx;
    printf("%s\n", line);
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kvfsctl fsck [--rebuild] STORE\n"
               "Check every object in the store directory against the index and its\n"
               "checksums. --rebuild recreates the index from the objects alone, removes\n"
               "unfinished ingests and moves invalid objects to STORE/lost+found.\n"
               "Run it on a store that is not mounted.\n"
               "Exit status: 0 consistent (or repaired), 1 problems found, 2 usage.\n");
}

int cmd_fsck(int argc, char **argv)
{
    int rebuild = 0;
    const struct tool_opt opts[] = {TOOL_OPT("rebuild", 'r', FLAG, &rebuild), {0}};
    const struct tool_cmd cmd = {usage, opts, 1, 1};
    int rc = tool_parse_args(&cmd, argc, argv);
    if (rc != TOOL_ARGS_OK)
        return rc;
    rc = kvfs_store_fsck(argv[optind], rebuild, report, NULL);
    if (rc && rc != -EUCLEAN)
        fprintf(stderr, "kvfsctl fsck: %s: %s\n", argv[optind], strerror(-rc));
    return rc ? 1 : 0;
}
