/* C tests against the MCP reference server, @modelcontextprotocol/server-everything
 * (pinned in tests/mcp/everything/, installed from npm by tests/mcp/everything.sh; run.sh
 * puts its entry point in $PANTO_EVERYTHING): declared in the configuration JSON, over
 * stdio, its long operation's progress reaches the host as tool_progress events before
 * the call's tool_result. Without node and npm (outside CI) run.sh leaves the variable
 * unset and the test says it skipped. No callback runs on a library thread here: every
 * event is read by the test's own thread. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

static void test_mcp_everything_progress(void) {
  const char *entry = getenv("PANTO_EVERYTHING");
  Turn turn = {0}; /* ended at out: even if never started */
  char extra[2048];
  if (entry == NULL || entry[0] == '\0') {
    printf("    skipped: node and npm are needed for the server-everything tests\n");
    return;
  }
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"ev\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"]}}",
                   entry);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  CHECK(start_turn(&turn, scenario("mcp-everything-progress.json"), "sk-c", extra, "go") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int progress = 0;
  double last = 0, last_total = 0;
  bool result = false, done = false;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_PROGRESS) {
      CHECK(!result); /* before the result */
      CHECK(str_eq(ev.payload.tool_progress.call_id, "call_ev"));
      CHECK(str_eq(ev.payload.tool_progress.name, "ev__trigger-long-running-operation"));
      CHECKF(ev.payload.tool_progress.progress > last, "%f after %f",
             ev.payload.tool_progress.progress, last);
      last = ev.payload.tool_progress.progress;
      last_total = ev.payload.tool_progress.total;
      progress++;
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      const PantoStr out = ev.payload.tool_result.output;
      const char *want = "Long running operation completed.";
      CHECKF(out.len >= strlen(want) && memcmp(out.ptr, want, strlen(want)) == 0, "%.*s",
             (int)out.len, out.ptr);
      CHECK(!ev.payload.tool_result.is_error);
      result = true;
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && result) {
      CHECK(str_eq(ev.payload.message_complete.text, "done"));
      done = true;
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  CHECK(result && done);
  CHECKF(progress >= 1 && last == 2.0 && last_total == 2.0, "%d events, last %f of %f", progress,
         last, last_total);
out:
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"mcp_everything_progress", test_mcp_everything_progress},
};
const TestSuite MCP_EVERYTHING_TESTS = {"test_mcp_everything.c", TESTS,
                                        sizeof TESTS / sizeof TESTS[0]};
