/* C tests of errors and misuse: a provider's error (sticky, its payload whole, no key in
 * it), NULL and wrong arguments, the input and history limits, and a server that resets
 * the connection while a large request is being written (no SIGPIPE). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

/* The provider rejects the key: PANTO_ERROR with the whole payload, again on every later
 * call (sticky); the key appears nowhere. */
static void test_error_is_sticky_with_payload(void) {
  Turn turn;
  const char *key = "sk-c-test-secret-123456";
  CHECK(start_turn(&turn, scenario("unauthorized.json"), key, NULL, "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  for (int i = 0; i < 4; i++) {
    PantoStatus st = i % 2 ? panto_next_event_timeout(turn.stream, &ev, 1000)
                           : panto_next_event(turn.stream, &ev);
    CHECKF(st == PANTO_ERROR, "call %d: status %d", i, st);
    CHECK(ev.kind == PANTO_EV_ERROR);
    PantoErrorInfo *e = &ev.payload.error;
    CHECKF(e->kind == PANTO_ERR_AUTHENTICATION, "kind %u", e->kind);
    CHECK(e->status == 401);
    CHECK(!e->retryable);
    CHECK(str_contains(e->message, "Incorrect API key"));
    CHECKF(!str_contains(e->message, key), "%.*s", (int)e->message.len, e->message.ptr);
    CHECK(e->provider_code.ptr != NULL && !str_contains(e->provider_code, key));
    CHECK(e->output.ptr == NULL && e->output.len == 0); /* only the output_* kinds have one */
    PantoStr json;
    CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
    CHECK(strncmp(json.ptr, "{\"type\":\"error\",\"kind\":\"authentication\"", 39) == 0);
    CHECK(strstr(json.ptr, "\"status\":401") != NULL && strstr(json.ptr, key) == NULL);
  }
  panto_stream_free(turn.stream);
  turn.stream = NULL;
  /* The failed turn freed the agent: a new stream starts (and fails the same way). */
  turn.stream = start_stream(turn.agent, "again");
  CHECK(turn.stream != NULL);
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_AUTHENTICATION);
out:
  end_turn(&turn);
}

/* NULL handles and out-pointers, a wrong struct_size, bad configurations, invalid UTF-8:
 * errors with a kind, never a crash. */
static void test_bad_arguments(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  PantoString saved = {NULL, 0};
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  char cfg[1024];
  config_for(&srv, "sk-test", NULL, cfg, sizeof cfg);

  /* Frees and accessors accept NULL. */
  panto_agent_free(NULL);
  panto_stream_free(NULL);
  panto_error_free(NULL);
  panto_string_free(NULL);
  panto_string_free(&saved);
  CHECK(panto_error_kind(NULL) == 0 && panto_error_status(NULL) == 0);
  CHECK(!panto_error_retryable(NULL));
  CHECK(panto_error_message(NULL).len == 0 && panto_error_provider_code(NULL).ptr == NULL);
  CHECK(panto_error_to_json(NULL).len == 0);
  CHECK(!panto_stream_consumer_waiting(NULL) && !panto_stream_turn_paused(NULL));
  CHECK(panto_stream_cancel(NULL) == PANTO_ERROR);

  /* panto_agent_new */
  agent = (PantoAgent *)&srv; /* must be reset on entry */
  CHECK(panto_agent_new(NULL, 0, &agent, &err) == PANTO_ERROR);
  CHECK(agent == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "config_json is NULL"));
  panto_error_free(err);
  CHECK(panto_agent_new(cfg, strlen(cfg), NULL, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && str_contains(panto_error_message(err), "out is NULL"));
  panto_error_free(err);
  CHECK(panto_agent_new("{", 1, &agent, NULL) == PANTO_ERROR && agent == NULL);
  const struct {
    const char *json;
    const char *names;
  } bad_configs[] = {
      {"{", "JSON"},
      {"[]", "object"},
      {"{\"modle\":\"x\"}", "modle"},
      {"{\"model\":\"m\",\"max_tokens\":\"many\"}", "max_tokens"},
      {"{\"model\":\"m\",\"timeouts\":{\"idle\":5}}", "idle"},
      {"{\"model\":\"m\",\"tools\":[{\"name\":7}]}", "tools[0].name"},
      {"{\"model\":\"m\",\"provider\":\"acme\"}", "provider"},
      {"{\"max_tokens\":5}", "model"},
  };
  for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
    const char *j = bad_configs[i].json;
    CHECK(panto_agent_new(j, strlen(j), &agent, &err) == PANTO_ERROR && agent == NULL);
    CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
    CHECKF(str_contains(panto_error_message(err), bad_configs[i].names), "%s -> %s", j,
           panto_error_message(err).ptr);
    panto_error_free(err);
  }
  const char bad_utf8[] = "{\"model\":\"\xc3\x28\"}";
  CHECK(panto_agent_new(bad_utf8, sizeof bad_utf8 - 1, &agent, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && str_contains(panto_error_message(err), "UTF-8"));
  panto_error_free(err);
  /* The length counts, not a NUL: a config cut short is invalid JSON. */
  CHECK(panto_agent_new(cfg, 5, &agent, &err) == PANTO_ERROR);
  panto_error_free(err);

  CHECK(panto_agent_new(cfg, strlen(cfg), &agent, &err) == PANTO_OK && err == NULL);

  /* panto_agent_stream */
  PantoStream *s2 = (PantoStream *)&srv;
  CHECK(panto_agent_stream(NULL, "hi", 2, &s2, &err) == PANTO_ERROR && s2 == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && str_contains(panto_error_message(err), "agent is NULL"));
  panto_error_free(err);
  CHECK(panto_agent_stream(agent, "hi", 2, NULL, &err) == PANTO_ERROR);
  panto_error_free(err);
  CHECK(panto_agent_stream(agent, NULL, 3, &s2, &err) == PANTO_ERROR);
  panto_error_free(err);
  CHECK(panto_agent_stream(agent, "\xff\xfe", 2, &s2, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && str_contains(panto_error_message(err), "input is not valid UTF-8"));
  panto_error_free(err);
  /* None of these took the agent: a stream starts, and a second one is busy. */
  CHECK(panto_agent_stream(agent, "hi", 2, &stream, &err) == PANTO_OK);
  CHECK(panto_agent_stream(agent, "hi", 2, &s2, &err) == PANTO_ERROR && s2 == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_BUSY);
  panto_error_free(err);
  CHECK(panto_agent_clear_history(agent, &err) == PANTO_ERROR && panto_error_kind(err) == PANTO_ERR_BUSY);
  panto_error_free(err);

  /* History arguments. */
  CHECK(panto_agent_save_history(NULL, &saved, &err) == PANTO_ERROR && saved.ptr == NULL);
  panto_error_free(err);
  CHECK(panto_agent_save_history(agent, NULL, &err) == PANTO_ERROR);
  panto_error_free(err);
  CHECK(panto_agent_load_history(agent, NULL, 0, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  CHECK(panto_agent_load_history(NULL, "{}", 2, &err) == PANTO_ERROR);
  panto_error_free(err);
  CHECK(panto_agent_clear_history(NULL, &err) == PANTO_ERROR);
  panto_error_free(err);

  /* panto_next_event: NULL out, wrong struct_size (nothing written, nothing consumed). */
  CHECK(panto_next_event(stream, NULL) == PANTO_ERROR);
  CHECK(panto_next_event_timeout(stream, NULL, 0) == PANTO_ERROR);
  PantoEvent ev;
  /* Only the sizes of released versions: garbage between 1.0's size and the old bound of
   * 4096 (a forgotten PANTO_EVENT_INIT) used to be accepted and zero-filled — that many
   * bytes of the caller's stack. Now nothing at all is written. */
  uint32_t bad_sizes[] = {0, (uint32_t)sizeof(PantoEvent) - 1, 8, (uint32_t)sizeof(PantoEvent) + 1,
                          (uint32_t)sizeof(PantoEvent) + 8, 1000, PANTO_EVENT_MAX_STRUCT_SIZE,
                          PANTO_EVENT_MAX_STRUCT_SIZE + 1};
  static _Alignas(8) unsigned char garbage[PANTO_EVENT_MAX_STRUCT_SIZE + 8];
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    memset(garbage, 0xAB, sizeof garbage);
    memcpy(garbage, &bad_sizes[i], sizeof bad_sizes[i]);
    CHECK(panto_next_event(stream, (PantoEvent *)(void *)garbage) == PANTO_ERROR);
    bool untouched = true;
    for (size_t b = sizeof(uint32_t); b < sizeof garbage; b++) untouched &= garbage[b] == 0xAB;
    CHECKF(untouched, "struct_size %u: the library wrote into the caller's memory", bad_sizes[i]);
  }
  /* A NULL stream: an error payload that says so. */
  memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  CHECK(panto_next_event(NULL, &ev) == PANTO_ERROR);
  CHECK(ev.kind == PANTO_EV_ERROR && ev.payload.error.kind == PANTO_ERR_CONFIG);
  CHECK(str_contains(ev.payload.error.message, "panto_next_event: stream is NULL"));
  PantoStr json;
  CHECK(panto_event_to_json(&ev, &json) == PANTO_OK && str_contains(json, "\"kind\":\"config\""));
  CHECK(panto_next_event_timeout(NULL, &ev, 5) == PANTO_ERROR && ev.payload.error.kind == PANTO_ERR_CONFIG);
  /* The stream was not disturbed: its first event is still the first. */
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_MESSAGE_START);

  /* panto_event_to_json */
  CHECK(panto_event_to_json(NULL, &json) == PANTO_ERROR && json.ptr == NULL);
  CHECK(panto_event_to_json(&ev, NULL) == PANTO_ERROR);
  PantoEvent blank = PANTO_EVENT_INIT;
  CHECK(panto_event_to_json(&blank, &json) == PANTO_ERROR);
  PantoEvent forged = ev;
  forged.kind = PANTO_EV_TOOL_RESULT;
  CHECK(panto_event_to_json(&forged, &json) == PANTO_ERROR);

  /* panto_stream_submit_tool_result: misuse is a tool error, the stream goes on. */
  CHECK(panto_stream_submit_tool_result(NULL, "c", 1, "o", 1, false, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL);
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result(stream, NULL, 0, "o", 1, false, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL && str_contains(panto_error_message(err), "call_id is NULL"));
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result(stream, "c", 1, "\x80", 1, false, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL && str_contains(panto_error_message(err), "output is not valid UTF-8"));
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result(stream, "nope", 4, NULL, 0, false, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL && str_contains(panto_error_message(err), "not a pending"));
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result(stream, "nope", 4, NULL, 0, false, NULL) == PANTO_ERROR);
  err = NULL;
  /* panto_stream_submit_tool_result_parts: the same, and the parts are checked first. */
  CHECK(panto_stream_submit_tool_result_parts(NULL, "c", 1, "[]", 2, false, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL);
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result_parts(stream, "c", 1, NULL, 0, false, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL &&
        str_contains(panto_error_message(err), "parts_json is NULL"));
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result_parts(stream, "c", 1, "{}", 2, false, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL &&
        str_contains(panto_error_message(err), "parts: must be a string or an array of parts"));
  panto_error_free(err);
  CHECK(panto_stream_submit_tool_result_parts(stream, "nope", 4, "[\"x\"]", 5, false, &err) ==
        PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_TOOL &&
        str_contains(panto_error_message(err), "not a pending"));
  panto_error_free(err);
  err = NULL;
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_BLOCK_START);
out:
  panto_string_free(&saved);
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* Input and history limits are configuration keys: past them the call that would start
 * the turn (or load the history) fails with a config error naming the key, and nothing
 * is sent. Before they existed, a 5 MiB input (or 100 MB) was accepted and sent. */
static void test_input_and_history_limits(void) {
  TestServer srv;
  PantoAgent *agent = NULL, *dflt = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  PantoString saved = {NULL, 0};
  char *big = NULL;
  CHECK(server_start(&srv, scenario("text.json")) == 0);
  /* The defaults: 4 MiB of input at most. */
  dflt = new_agent(&srv, "sk-test", NULL);
  CHECK(dflt != NULL);
  size_t n = 5u << 20;
  big = malloc(n);
  CHECK(big != NULL);
  memset(big, 'a', n);
  CHECK(panto_agent_stream(dflt, big, n, &stream, &err) == PANTO_ERROR && stream == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err), "max_input_bytes"), "%s",
         panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  /* Nothing was sent: the only connection the server has seen is this stats request. */
  CHECK(server_stat(&srv, "connections_total") == 1);

  agent = new_agent(&srv, "sk-test", ",\"max_input_bytes\":100,\"max_history_bytes\":1024");
  CHECK(agent != NULL);
  CHECK(panto_agent_stream(agent, big, 101, &stream, &err) == PANTO_ERROR && stream == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG &&
        str_contains(panto_error_message(err), "max_input_bytes (100)"));
  panto_error_free(err);
  err = NULL;
  /* At the limit: fine. Each turn adds its input and the answer to the history. */
  int turns = 0;
  for (; turns < 50; turns++) {
    if (panto_agent_stream(agent, big, 100, &stream, &err) != PANTO_OK) break;
    CHECK(drain(stream, NULL) == PANTO_DONE);
    panto_stream_free(stream);
    stream = NULL;
  }
  /* The conversation reached the cap: the turn that would pass it is refused. */
  CHECKF(turns >= 2 && turns < 50, "%d turns", turns);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err), "max_history_bytes (1024)"), "%s",
         panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_agent_save_history(agent, &saved, &err) == PANTO_OK);
  CHECK(saved.len <= 1024);
  /* A saved history larger than the cap is not loaded; the conversation is unchanged. */
  CHECK(panto_agent_load_history(dflt, saved.ptr, saved.len, &err) == PANTO_OK);
  CHECK(panto_agent_clear_history(agent, &err) == PANTO_OK);
  panto_string_free(&saved);
  CHECK(panto_agent_save_history(dflt, &saved, &err) == PANTO_OK);
  char *grown = malloc(saved.len + 4096);
  CHECK(grown != NULL);
  /* The same history with a longer first message: past 1024 bytes. */
  const char *at = strstr(saved.ptr, "\"text\":\"");
  CHECK(at != NULL);
  size_t head = (size_t)(at - saved.ptr) + 8;
  memcpy(grown, saved.ptr, head);
  memset(grown + head, 'b', 2048);
  memcpy(grown + head + 2048, saved.ptr + head, saved.len - head);
  size_t grown_len = saved.len + 2048;
  PantoStatus st = panto_agent_load_history(agent, grown, grown_len, &err);
  free(grown);
  CHECK(st == PANTO_ERROR && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "max_history_bytes"));
  panto_error_free(err);
  err = NULL;
  panto_string_free(&saved);
  CHECK(panto_agent_save_history(agent, &saved, &err) == PANTO_OK);
  CHECK(str_eq((PantoStr){saved.ptr, saved.len}, "{\"version\":1,\"messages\":[]}"));
  /* The keys are validated like any other. */
  const char *bad = "{\"model\":\"m\",\"max_input_bytes\":0}";
  PantoAgent *none = NULL;
  CHECK(panto_agent_new(bad, strlen(bad), &none, &err) == PANTO_ERROR && none == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG &&
        str_contains(panto_error_message(err), "max_input_bytes"));
out:
  panto_error_free(err);
  panto_string_free(&saved);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_agent_free(dflt);
  free(big);
  server_stop(&srv);
}

/* The server hangs up (a reset) while panto is still writing a large request body. A C
 * host keeps SIGPIPE's default action — death — and nothing in the library may change
 * that: the write must fail with EPIPE on panto's own thread and the turn with kind
 * connection, every time, never kill the process (rc 141). The host's disposition and
 * its threads' signal masks are left exactly as they were. */
static void test_server_reset_while_writing_is_no_sigpipe(void) {
  ResetServer srv;
  PantoAgent *agent = NULL;
  char *input = NULL;
  struct sigaction dfl, after;
  sigset_t mask_before, mask_after;
  memset(&srv, 0, sizeof srv);
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  CHECK(sigaction(SIGPIPE, &dfl, NULL) == 0);
  CHECK(pthread_sigmask(SIG_SETMASK, NULL, &mask_before) == 0);
  CHECK(!sigismember(&mask_before, SIGPIPE));
  CHECK(reset_server_start(&srv, 1024) == 0);
  char cfg[1024];
  snprintf(cfg, sizeof cfg,
           "{\"provider\":\"openai\",\"model\":\"gpt-4o-mini\",\"base_url\":\"%s/v1\","
           "\"api_key\":\"sk-test\",\"retry\":{\"max_retries\":1,\"initial_delay_ms\":1},"
           "\"max_input_bytes\":16777216}",
           srv.url);
  CHECK(panto_agent_new(cfg, strlen(cfg), &agent, NULL) == PANTO_OK);
  /* 8 MiB: more than the socket buffers take (4 MiB at most), so panto is still writing
   * when the reset comes. Before the fix the first or second turn of such a run died
   * (rc 141) in every run tried; at 2 MiB none did. */
  size_t n = 8u << 20;
  input = malloc(n);
  CHECK(input != NULL);
  memset(input, 'a', n);
  for (int turn = 0; turn < 4; turn++) {
    PantoStream *stream = NULL;
    /* The failed turn's input stays in the history: start each one from empty. */
    CHECK(panto_agent_clear_history(agent, NULL) == PANTO_OK);
    CHECK(panto_agent_stream(agent, input, n, &stream, NULL) == PANTO_OK);
    PantoEvent ev = PANTO_EVENT_INIT;
    PantoStatus st;
    int retries = 0;
    while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT && ev.kind == PANTO_EV_PROVIDER_RETRY)
      retries++;
    uint32_t kind = st == PANTO_ERROR ? ev.payload.error.kind : 0;
    if (st == PANTO_ERROR && kind != PANTO_ERR_CONNECTION)
      fprintf(stderr, "%.*s\n", (int)ev.payload.error.message.len, ev.payload.error.message.ptr);
    panto_stream_free(stream);
    CHECKF(st == PANTO_ERROR && kind == PANTO_ERR_CONNECTION && retries == 1,
           "turn %d: status %d kind %u, %d retries", turn, st, kind, retries);
  }
  reset_server_stop(&srv);
  CHECK(srv.accepted >= 4);
  CHECK(sigaction(SIGPIPE, NULL, &after) == 0);
  CHECK(after.sa_handler == SIG_DFL);
  CHECK(pthread_sigmask(SIG_SETMASK, NULL, &mask_after) == 0);
  CHECK(!sigismember(&mask_after, SIGPIPE));
out:
  panto_agent_free(agent);
  free(input);
  reset_server_stop(&srv);
}

static const TestCase TESTS[] = {
    {"error_is_sticky_with_payload", test_error_is_sticky_with_payload},
    {"bad_arguments", test_bad_arguments},
    {"input_and_history_limits", test_input_and_history_limits},
    {"server_reset_while_writing_is_no_sigpipe", test_server_reset_while_writing_is_no_sigpipe},
};
const TestSuite ERROR_TESTS = {"test_errors.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
