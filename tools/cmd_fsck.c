/* kvfsctl fsck - check a store; --rebuild recreates its index. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "store.h"

static void report(void *ctx, const char *line)
{
    (void)ctx;
    printf("%s\n", line);
    fflush(stdout);
}

int cmd_fsck(int argc, char **argv)
{
    static const struct option opts[] = {{"rebuild", no_argument, 0, 'r'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int rebuild = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "rh", opts, NULL)) != -1) {
        switch (c) {
        case 'r': rebuild = 1; break;
        case 'h':
            printf("usage: kvfsctl fsck [--rebuild] STORE\n"
                   "Check every object in the store directory against the index and its\n"
                   "checksums. --rebuild recreates the index from the objects alone, removes\n"
                   "unfinished ingests and moves invalid objects to STORE/lost+found.\n"
                   "Run it on a store that is not mounted.\n"
                   "Exit status: 0 consistent (or repaired), 1 problems found, 2 usage.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: kvfsctl fsck [--rebuild] STORE\n");
        return 2;
    }
    int rc = kvfs_store_fsck(argv[optind], rebuild, report, NULL);
    if (rc && rc != -EUCLEAN)
        fprintf(stderr, "kvfsctl fsck: %s: %s\n", argv[optind], strerror(-rc));
    return rc ? 1 : 0;
}
