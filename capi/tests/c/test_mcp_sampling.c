/* C tests of an MCP server's own requests, against the reference server
 * (@modelcontextprotocol/server-everything, installed by tests/mcp/everything.sh; run.sh
 * puts its entry point in $PANTO_EVERYTHING), through the configuration and events: with
 * "sampling" and "elicitation" enabled for the server, its sampling request is answered
 * by the agent's model (capped at "sampling_max_tokens") and its elicitation declined
 * (the C host lends no answerer), each reported by its event before the call's result.
 * Without node and npm (outside CI) the test says it skipped. No callback runs on a
 * library thread here: every event is read by the test's own thread. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

static bool contains(PantoStr s, const char *want) {
  size_t n = strlen(want);
  if (s.len < n) return false;
  for (size_t i = 0; i + n <= s.len; i++) {
    if (memcmp(s.ptr + i, want, n) == 0) return true;
  }
  return false;
}

static void test_mcp_sampling_and_elicitation_events(void) {
  const char *entry = getenv("PANTO_EVERYTHING");
  Turn turn = {0}; /* ended at out: even if never started */
  char extra[2048];
  if (entry == NULL || entry[0] == '\0') {
    printf("    skipped: node and npm are needed for the server-everything tests\n");
    return;
  }
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"ev\":{\"command\":\"node\",\"args\":[\"%s\",\"stdio\"],"
                   "\"sampling\":true,\"sampling_max_tokens\":64,\"elicitation\":true}}",
                   entry);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  CHECK(start_turn(&turn, scenario("mcp-everything-sampling.json"), "sk-c", extra, "go") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int sampled = 0, elicited = 0, results = 0;
  bool done = false;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MCP_SAMPLING_REQUEST) {
      const PantoMcpSamplingRequest *r = &ev.payload.mcp_sampling_request;
      CHECK(str_eq(r->server, "ev"));
      CHECK(str_eq(r->summary, "Resource trigger-sampling-request context: name a colour"));
      CHECKF(r->max_tokens == 64, "%llu", (unsigned long long)r->max_tokens);
      CHECK(str_eq(r->outcome, "answered"));
      sampled++;
    } else if (ev.kind == PANTO_EV_MCP_ELICITATION_REQUEST) {
      const PantoMcpElicitationRequest *r = &ev.payload.mcp_elicitation_request;
      CHECK(str_eq(r->server, "ev"));
      CHECK(str_eq(r->message, "Please provide inputs for the following fields:"));
      CHECK(str_eq(r->outcome, "decline"));
      elicited++;
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      const PantoToolResult *r = &ev.payload.tool_result;
      CHECK(!r->is_error);
      if (str_eq(r->call_id, "call_s")) {
        CHECK(sampled == 1); /* the event came first */
        CHECKF(contains(r->output, "\"text\": \"teal\""), "%.*s", (int)r->output.len,
               r->output.ptr);
      } else {
        CHECK(str_eq(r->call_id, "call_e"));
        CHECK(elicited == 1);
        CHECK(contains(r->output, "User declined"));
      }
      results++;
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && results == 2) {
      CHECK(str_eq(ev.payload.message_complete.text, "done"));
      done = true;
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  CHECK(done && sampled == 1 && elicited == 1);
out:
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"mcp_sampling_and_elicitation_events", test_mcp_sampling_and_elicitation_events},
};
const TestSuite MCP_SAMPLING_TESTS = {"test_mcp_sampling.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
