/* C tests of libpanto, against panto-testserver. Built with the system compiler and run
 * under valgrind memcheck by capi/tests/c/run.sh:
 *
 *   test_capi SERVER_BIN SCENARIO_DIR DEMO_SCENARIO [TEST_NAME]
 *   test_capi --list        # the name of every test, one a line
 *
 * The tests live in the other test_*.c files, one subject each; each file lists its own
 * in a TestSuite (harness.h), and SUITES below runs them all. Each test starts its own
 * server (port 0). The last line of output is "N passed, N failed". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

static const TestSuite *const SUITES[] = {
    &TURN_TESTS,
    &ERROR_TESTS,
    &THREAD_TESTS,
    &CONVERSATION_TESTS,
    &ATTACHMENT_TESTS,
    &MCP_TESTS,
    &MCP_EVERYTHING_TESTS,
    &MCP_SAMPLING_TESTS,
    &FORK_TESTS,
    &READINESS_TESTS,
    &DURABLE_TESTS,
    &MCP_OAUTH_TESTS,
    &MCP_RESOURCE_TESTS,
    &PRODUCTION_TESTS,
    /* Last: its export stays installed for the rest of the process. */
    &TELEMETRY_TESTS,
};
enum { SUITE_COUNT = sizeof SUITES / sizeof SUITES[0] };

/* `name` is one of the comma-separated names in `list`. */
static bool listed(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
    if ((p == list || p[-1] == ',') && (p[len] == 0 || p[len] == ',')) return true;
  return false;
}

/* The test named `name`, or NULL. */
static const TestCase *find_test(const char *name, size_t name_len) {
  for (size_t s = 0; s < SUITE_COUNT; s++)
    for (size_t k = 0; k < SUITES[s]->count; k++) {
      const char *n = SUITES[s]->tests[k].name;
      if (strlen(n) == name_len && strncmp(n, name, name_len) == 0) return &SUITES[s]->tests[k];
    }
  return NULL;
}

/* Names given twice, and names in PANTO_C_SKIP that no test has (a list gone stale
 * would silently run what it meant to skip, or skip nothing): 0 if none. */
static int check_names(const char *skip) {
  int bad = 0;
  for (size_t s = 0; s < SUITE_COUNT; s++)
    for (size_t k = 0; k < SUITES[s]->count; k++) {
      const char *name = SUITES[s]->tests[k].name;
      if (find_test(name, strlen(name)) != &SUITES[s]->tests[k]) {
        fprintf(stderr, "test %s (%s) is registered twice\n", name, SUITES[s]->file);
        bad = 1;
      }
    }
  for (const char *p = skip; p != NULL && *p != 0;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0 && find_test(p, len) == NULL) {
      fprintf(stderr, "PANTO_C_SKIP names %.*s, which is no test\n", (int)len, p);
      bad = 1;
    }
    p = end ? end + 1 : NULL;
  }
  return bad;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t s = 0; s < SUITE_COUNT; s++)
      for (size_t k = 0; k < SUITES[s]->count; k++) printf("%s\n", SUITES[s]->tests[k].name);
    return check_names(NULL);
  }
  if (argc < 4) {
    fprintf(stderr, "usage: %s SERVER_BIN SCENARIO_DIR DEMO_SCENARIO [TEST]\n", argv[0]);
    return 2;
  }
  server_bin = argv[1];
  scenario_dir = argv[2];
  demo_scenario = argv[3];
  /* PANTO_C_SKIP: names of tests not to run (comma-separated), unless named above. */
  const char *skip = getenv("PANTO_C_SKIP");
  if (check_names(skip) != 0) return 2;
  if (argc > 4 && find_test(argv[4], strlen(argv[4])) == NULL) {
    fprintf(stderr, "no test is named %s (--list lists them)\n", argv[4]);
    return 2;
  }
  int passed = 0, failed = 0;
  for (size_t s = 0; s < SUITE_COUNT; s++)
    for (size_t k = 0; k < SUITES[s]->count; k++) {
      const TestCase *test = &SUITES[s]->tests[k];
      if (argc > 4 && strcmp(argv[4], test->name) != 0) continue;
      if (argc <= 4 && skip != NULL && listed(skip, test->name)) continue;
      test_failed = 0;
      int64_t t0 = now_ms();
      test->run();
      printf("test %s ... %s (%lld ms)\n", test->name, test_failed ? "FAILED" : "ok",
             (long long)(now_ms() - t0));
      fflush(stdout);
      if (test_failed)
        failed++;
      else
        passed++;
    }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
