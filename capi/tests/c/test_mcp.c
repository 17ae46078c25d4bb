/* C tests of MCP servers declared in the configuration JSON: docs/mcp.md's example, a
 * turn that calls the fixture server's tool, whose process and stop thread end when the
 * agent is freed, and a tool called outside a turn (panto_agent_call_mcp_tool). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
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

/* A call of fx__hang made on its own thread. The thread writes the outcome; the main
 * thread reads it only after pthread_join (which orders the two). */
typedef struct HangCall {
  PantoAgent *agent;
  const PantoCancelToken *cancel;
  PantoStatus status;
  uint32_t error_kind;
  PantoString result;
} HangCall;

static void *call_hang(void *arg) {
  HangCall *c = arg;
  PantoError *err = NULL;
  c->status = panto_agent_call_mcp_tool(c->agent, "fx__hang", 8, "{}", 2, c->cancel,
                                        &c->result, &err);
  c->error_kind = err != NULL ? panto_error_kind(err) : 0;
  panto_error_free(err);
  return NULL;
}

static bool file_exists(void *path) { return access((const char *)path, F_OK) == 0; }

/* panto_agent_call_mcp_tool: the fixture server's tools called with no turn (the model's
 * URL is never used): the answer-shaped JSON result, the tool's failure as a result,
 * an unknown tool and arguments that are not an object as PANTO_ERR_CONFIG, and a call
 * blocked in the server cancelled from this thread (the server is told). */
static void test_mcp_call_tool_outside_a_turn(void) {
  const char *venv = getenv("PANTO_MCP_VENV");
  PantoAgent *agent = NULL;
  PantoError *err = NULL;
  PantoCancelToken *token = NULL;
  PantoString out = {NULL, 0};
  HangCall hang;
  memset(&hang, 0, sizeof hang);
  pthread_t th;
  bool joined = true;
  char fixture[PATH_MAX], marker[128], started[160], cfg[2048];
  CHECKF(venv != NULL, "%s", "PANTO_MCP_VENV is not set (capi/tests/c/run.sh sets it)");
  CHECK(realpath("tests/mcp/fixture_server.py", fixture) != NULL);
  snprintf(marker, sizeof marker, "/tmp/panto-c-mcp-call-%d", (int)getpid());
  snprintf(started, sizeof started, "%s.started", marker);
  unlink(marker);
  unlink(started);
  int n = snprintf(cfg, sizeof cfg,
                   "{\"model\":\"gpt-4o-mini\",\"api_key\":\"sk-c\",\"base_url\":"
                   "\"http://127.0.0.1:9\",\"mcp_servers\":{\"fx\":{\"command\":"
                   "\"%s/bin/python\",\"args\":[\"%s\",\"--cancel-marker\",\"%s\"]}}}",
                   venv, fixture, marker);
  CHECK(n > 0 && (size_t)n < sizeof cfg);
  CHECK(panto_agent_new(cfg, strlen(cfg), &agent, &err) == PANTO_OK);

  const char *args = "{\"text\":\"outside\"}";
  CHECK(panto_agent_call_mcp_tool(agent, "fx__echo", 8, args, strlen(args), NULL, &out,
                                  &err) == PANTO_OK);
  CHECKF(strstr(out.ptr, "\"output\":\"echo: outside\"") != NULL &&
             strstr(out.ptr, "\"is_error\":false") != NULL && strstr(out.ptr, "parts") == NULL,
         "%s", out.ptr);
  panto_string_free(&out);
  CHECK(panto_agent_call_mcp_tool(agent, "fx__fail", 8, NULL, 0, NULL, &out, &err) ==
        PANTO_OK);
  CHECKF(strstr(out.ptr, "\"is_error\":true") != NULL, "%s", out.ptr);
  panto_string_free(&out);

  CHECK(panto_agent_call_mcp_tool(agent, "fx__nope", 8, NULL, 0, NULL, &out, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && out.ptr == NULL);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_agent_call_mcp_tool(agent, "fx__echo", 8, "[1]", 3, NULL, &out, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;

  token = panto_cancel_token_new();
  CHECK(token != NULL);
  hang.agent = agent;
  hang.cancel = token;
  CHECK(pthread_create(&th, NULL, call_hang, &hang) == 0);
  joined = false;
  /* The server has the call (it wrote its marker) while the caller blocks. */
  CHECK(wait_until(file_exists, started, 60000));
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECKF(hang.status == PANTO_ERROR && hang.error_kind == PANTO_ERR_CANCELLED,
         "status %d kind %u", (int)hang.status, hang.error_kind);
  CHECK(hang.result.ptr == NULL);
  CHECKF(wait_until(file_exists, marker, 60000), "%s", "the server saw no cancellation");
  /* A token already cancelled fails at once. */
  CHECK(panto_agent_call_mcp_tool(agent, "fx__echo", 8, NULL, 0, token, &out, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CANCELLED);
  panto_error_free(err);
  err = NULL;
  CHECK(!mcp_no_process_with(marker));
  panto_agent_free(agent);
  agent = NULL;
  /* Freeing the agent stops its server, and the thread that stops it ends. */
  CHECKF(wait_until(mcp_no_process_with, marker, 60000), "%s", "the MCP server outlived its agent");
  CHECK(wait_until(mcp_no_stop_thread, NULL, 60000));
out:
  if (!joined) {
    panto_cancel_token_cancel(token);
    pthread_join(th, NULL);
  }
  panto_string_free(&hang.result);
  panto_string_free(&out);
  if (err != NULL) panto_error_free(err);
  panto_agent_free(agent);
  panto_cancel_token_free(token);
  unlink(marker);
  unlink(started);
}

static const TestCase TESTS[] = {
    {"mcp_server_tools", test_mcp_server_tools},
    {"mcp_config_from_the_docs", test_mcp_config_from_the_docs},
    {"mcp_call_tool_outside_a_turn", test_mcp_call_tool_outside_a_turn},
};
const TestSuite MCP_TESTS = {"test_mcp.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
