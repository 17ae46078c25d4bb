/* C tests of MCP servers declared in the configuration JSON: docs/mcp.md's example, and
 * a turn that calls the fixture server's tool, whose process and stop thread end when
 * the agent is freed. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

/* docs/mcp.md's C example: MCP servers declared in the configuration JSON start at the
 * agent's first turn, so making the agent starts nothing (no uvx is needed here). */
static void test_mcp_config_from_the_docs(void) {
  PantoAgent *agent = NULL;
  PantoError *err = NULL;
  const char *cfg = "{\"model\":\"gpt-4o-mini\",\"mcp_servers\":{"
                    "\"time\":{\"command\":\"uvx\",\"args\":[\"mcp-server-time\"]}}}";
  panto_agent_new(cfg, strlen(cfg), &agent, &err);
  CHECK(agent != NULL && err == NULL);
out:
  if (err != NULL) panto_error_free(err);
  panto_agent_free(agent);
}

/* MCP servers through the config JSON: the fixture server (tests/mcp/fixture_server.py,
 * from the venv run.sh makes with tests/mcp/venv.sh, $PANTO_MCP_VENV) answers fx__echo;
 * freeing the agent stops it and its stop thread. */
static void test_mcp_server_tools(void) {
  const char *venv = getenv("PANTO_MCP_VENV");
  Turn turn = {0}; /* ended at out: even if never started */
  char fixture[PATH_MAX], marker[64], extra[1024];
  CHECKF(venv != NULL, "%s", "PANTO_MCP_VENV is not set (capi/tests/c/run.sh sets it)");
  CHECK(realpath("tests/mcp/fixture_server.py", fixture) != NULL);
  snprintf(marker, sizeof marker, "panto-c-mcp-%d", (int)getpid());
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"fx\":{\"command\":\"%s/bin/python\",\"args\":[\"%s\","
                   "\"--cancel-marker\",\"%s\"]}}",
                   venv, fixture, marker);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  CHECK(start_turn(&turn, scenario("mcp-echo.json"), "sk-c", extra, "echo something") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  bool started = false, result = false;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      CHECK(!ev.payload.tool_call_start.host);
      CHECK(str_eq(ev.payload.tool_call_start.name, "fx__echo"));
      started = true;
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      CHECKF(str_eq(ev.payload.tool_result.output, "echo: from c"), "%.*s",
             (int)ev.payload.tool_result.output.len, ev.payload.tool_result.output.ptr);
      CHECK(!ev.payload.tool_result.is_error);
      result = true;
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      CHECK(str_eq(ev.payload.message_complete.text, "done"));
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", (int)st);
  CHECK(started && result);
  CHECK(!mcp_no_process_with(marker));
  panto_stream_free(turn.stream);
  turn.stream = NULL;
  panto_agent_free(turn.agent);
  turn.agent = NULL;
  /* Freeing the agent stops its server, and the thread that stops it ends. */
  CHECKF(wait_until(mcp_no_process_with, marker, 60000), "%s", "the MCP server outlived its agent");
  CHECK(wait_until(mcp_no_stop_thread, NULL, 60000));
out:
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"mcp_server_tools", test_mcp_server_tools},
    {"mcp_config_from_the_docs", test_mcp_config_from_the_docs},
};
const TestSuite MCP_TESTS = {"test_mcp.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
