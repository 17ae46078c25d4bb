/* C tests of libpanto, against panto-testserver. Built with the system compiler and run
 * under valgrind memcheck by capi/tests/c/run.sh:
 *
 *   test_capi SERVER_BIN SCENARIO_DIR DEMO_SCENARIO [TEST_NAME]
 *
 * Each test starts its own server (port 0). The last line of output is
 * "N passed, N failed". */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

static const char *demo_scenario;

static char *scenario(const char *name) {
  static char path[4096];
  snprintf(path, sizeof path, "%s/%s", scenario_dir, name);
  return path;
}

static PantoAgent *new_agent(const TestServer *srv, const char *key, const char *extra) {
  char cfg[2048];
  config_for(srv, key, extra, cfg, sizeof cfg);
  PantoAgent *agent = NULL;
  PantoError *err = NULL;
  if (panto_agent_new(cfg, strlen(cfg), &agent, &err) != PANTO_OK) {
    PantoStr m = panto_error_message(err);
    fprintf(stderr, "panto_agent_new: %.*s\n", (int)m.len, m.ptr);
    panto_error_free(err);
    return NULL;
  }
  return agent;
}

static PantoStream *start(PantoAgent *agent, const char *input) {
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  if (panto_agent_stream(agent, input, strlen(input), &stream, &err) != PANTO_OK) {
    PantoStr m = panto_error_message(err);
    fprintf(stderr, "panto_agent_stream: %.*s\n", (int)m.len, m.ptr);
    panto_error_free(err);
    return NULL;
  }
  return stream;
}


/* A scenario shared with the other languages (tests/server/scenarios). */
static char *shared_scenario(const char *name) {
  static char path[4096];
  const char *slash = strrchr(demo_scenario, '/');
  int dir = slash ? (int)(slash - demo_scenario) : 1;
  snprintf(path, sizeof path, "%.*s/%s", dir, slash ? demo_scenario : ".", name);
  return path;
}

/* Drains a turn to PANTO_DONE, answering the host tool `weather`. Returns the status
 * after message_complete and fills *first_kind with the kind of the first event. */
static PantoStatus drain(PantoStream *stream, uint32_t *first_kind, PantoUsage *usage) {
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  bool first = true;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (first && first_kind) *first_kind = ev.kind;
    first = false;
    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      PantoToolCallStart *t = &ev.payload.tool_call_start;
      const char *out = "sunny";
      if (panto_stream_submit_tool_result(stream, t->call_id.ptr, t->call_id.len, out,
                                          strlen(out), false, NULL) != PANTO_OK)
        return PANTO_ERROR;
    }
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && usage) *usage = ev.payload.message_complete.usage;
  }
  return st;
}

/* Reasoning control (config and per turn), prompt caching and the transcript, against
 * conversation-reasoning-caching.json: the server only answers requests that carry the
 * high-effort thinking budget and the cache breakpoints. */
static void test_reasoning_caching_transcript(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoString transcript = {NULL, 0};
  PantoError *err = NULL;
  if (server_start(&srv, shared_scenario("conversation-reasoning-caching.json")) != 0) {
    test_failed = 1;
    return;
  }
  char cfg[2048];
  snprintf(cfg, sizeof cfg,
           "{\"provider\":\"anthropic\",\"model\":\"claude-x\",\"base_url\":\"%s\","
           "\"api_key\":\"sk-c\",\"system\":\"You are terse.\","
           "\"reasoning\":{\"effort\":\"low\"},\"retry\":{\"max_retries\":0},"
           "\"tools\":[{\"name\":\"weather\",\"parameters\":{\"type\":\"object\"}}]}",
           srv.url);
  CHECK(panto_agent_new(cfg, strlen(cfg), &agent, &err) == PANTO_OK);
  /* A per-turn option the library does not know is a config error naming it. */
  const char *bad = "{\"reasoning\":{\"effort\":\"max\"}}";
  CHECK(panto_agent_stream_with(agent, "x", 1, bad, strlen(bad), &stream, &err) == PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "options.reasoning.effort"));
  panto_error_free(err);
  err = NULL;
  const char *opts = "{\"reasoning\":{\"effort\":\"high\"}}";
  const char *input = "Weather in Paris?";
  CHECK(panto_agent_stream_with(agent, input, strlen(input), opts, strlen(opts), &stream,
                                &err) == PANTO_OK);
  PantoUsage usage = {0};
  PantoStatus st = drain(stream, NULL, &usage);
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECKF(usage.cache_read_tokens == 1500, "cache_read_tokens %llu",
         (unsigned long long)usage.cache_read_tokens);
  panto_stream_free(stream);
  stream = NULL;
  CHECK(panto_agent_transcript_json(agent, &transcript, &err) == PANTO_OK);
  CHECK(transcript.ptr != NULL && transcript.ptr[transcript.len] == 0);
  CHECKF(strstr(transcript.ptr, "{\"role\":\"assistant\",\"kind\":\"reasoning\","
                                "\"text\":\"I should look up the weather.\"}") != NULL &&
             strstr(transcript.ptr, "\"kind\":\"tool_result\",\"text\":\"sunny\"") != NULL,
         "%s", transcript.ptr);
out:
  panto_string_free(&transcript);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_error_free(err);
  server_stop(&srv);
}

/* Manual compaction between two turns, then automatic
 * compaction announced by PANTO_EV_HISTORY_COMPACTED (conversation-compaction.json). */
static void test_compaction(void) {
  TestServer srv, srv2;
  bool srv2_up = false;
  PantoAgent *agent = NULL, *auto_agent = NULL;
  PantoStream *stream = NULL;
  PantoString result = {NULL, 0};
  PantoError *err = NULL;
  if (server_start(&srv, shared_scenario("conversation-compaction.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c", ",\"retry\":{\"max_retries\":0}");
  CHECK(agent != NULL);
  stream = start(agent, "What is the capital of France?");
  CHECK(stream != NULL && drain(stream, NULL, NULL) == PANTO_DONE);
  panto_stream_free(stream);
  stream = NULL;
  const char *opts = "{\"keep_last\":1}";
  CHECK(panto_agent_compact(agent, opts, strlen(opts), NULL, &result, &err) == PANTO_OK);
  {
    const char *want = "{\"changed\":true,\"messages_before\":2,\"messages_after\":2,"
                       "\"tokens_before\":108,\"tokens_after\":";
    CHECKF(result.ptr != NULL && strncmp(result.ptr, want, strlen(want)) == 0, "%s", result.ptr);
  }
  panto_string_free(&result);
  /* A bad option is a config error, and nothing is sent. */
  const char *bad = "{\"keep_last\":0}";
  CHECK(panto_agent_compact(agent, bad, strlen(bad), NULL, &result, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && result.ptr == NULL);
  panto_error_free(err);
  err = NULL;
  stream = start(agent, "And its population?");
  CHECK(stream != NULL);
  CHECK(drain(stream, NULL, NULL) == PANTO_DONE);
  panto_stream_free(stream);
  stream = NULL;

  if (server_start(&srv2, shared_scenario("conversation-compaction.json")) != 0) {
    test_failed = 1;
    goto out;
  }
  srv2_up = true;
  auto_agent = new_agent(&srv2, "sk-c",
                         ",\"compaction\":{\"threshold_tokens\":50,\"keep_last\":1}");
  CHECK(auto_agent != NULL);
  stream = start(auto_agent, "What is the capital of France?");
  CHECK(stream != NULL && drain(stream, NULL, NULL) == PANTO_DONE);
  panto_stream_free(stream);
  stream = start(auto_agent, "And its population?");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT);
  CHECKF(ev.kind == PANTO_EV_HISTORY_COMPACTED, "kind %u", ev.kind);
  CHECK(ev.payload.history_compacted.messages_before == 3);
  CHECK(ev.payload.history_compacted.messages_after == 3);
  CHECK(ev.payload.history_compacted.tokens_before >= 108);
  CHECK(str_eq(panto_event_kind_name(ev.kind), "history_compacted"));
  PantoStr json;
  CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
  CHECK(strncmp(json.ptr, "{\"type\":\"history_compacted\",\"messages_before\":3,", 48) == 0);
  CHECK(drain(stream, NULL, NULL) == PANTO_DONE);
out:
  panto_string_free(&result);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_agent_free(auto_agent);
  panto_error_free(err);
  server_stop(&srv);
  if (srv2_up) server_stop(&srv2);
}

/* Usage a server did not report is unknown, not zero (usage-unreported.json): turn 1 has
 * no usage at all (llama.cpp), turn 2 a real zero. PantoUsage.reported tells them apart,
 * in message_end and in message_complete. */
static void test_unreported_usage(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  if (server_start(&srv, shared_scenario("usage-unreported.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c", ",\"retry\":{\"max_retries\":0}");
  CHECK(agent != NULL);
  for (int turn = 0; turn < 2; turn++) {
    bool want = turn == 1;
    stream = start(agent, turn == 0 ? "hello" : "again");
    CHECK(stream != NULL);
    PantoEvent ev = PANTO_EVENT_INIT;
    PantoStatus st;
    int ends = 0, completes = 0;
    while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
      const PantoUsage *u = NULL;
      if (ev.kind == PANTO_EV_MESSAGE_END) {
        u = &ev.payload.message_end.usage;
        ends++;
      } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
        u = &ev.payload.message_complete.usage;
        completes++;
      }
      if (u == NULL) continue;
      CHECKF(u->reported == want, "turn %d kind %u: reported %d", turn + 1, ev.kind,
             (int)u->reported);
      CHECKF(u->input_tokens == 0 && u->output_tokens == 0, "turn %d: %llu/%llu", turn + 1,
             (unsigned long long)u->input_tokens, (unsigned long long)u->output_tokens);
      /* The canonical JSON says the same. */
      PantoStr json;
      CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
      CHECKF(str_contains(json, want ? "\"reported\":true" : "\"reported\":false"), "%.*s",
             (int)json.len, json.ptr);
    }
    CHECKF(st == PANTO_DONE, "status %d", st);
    CHECK(ends == 1 && completes == 1);
    panto_stream_free(stream);
    stream = NULL;
  }
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* Structured output against structured-output.json (the agent's output_schema, OpenAI
 * strict json_schema): a valid answer is message_complete's `output` (JSON text, also in
 * the event's JSON); an invalid one is repaired (PANTO_EV_OUTPUT_REPAIR, then the valid
 * answer); one still invalid after output_retries fails with PANTO_ERR_OUTPUT_INVALID and
 * the raw text in payload.error.output; a refusal with PANTO_ERR_OUTPUT_REFUSED. */
static void test_structured_output(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  if (server_start(&srv, shared_scenario("structured-output.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c",
                    ",\"retry\":{\"max_retries\":0},\"output_retries\":1,\"output_schema\":{"
                    "\"title\":\"city\",\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
                    "\"string\"},\"population\":{\"type\":\"integer\"}},\"required\":[\"name\","
                    "\"population\"]}");
  CHECK(agent != NULL);

  static const struct {
    const char *prompt;
    const char *output; /* message_complete's, or the error's raw text */
    uint32_t error;     /* 0: the turn succeeds */
    int repairs;
  } turns[] = {
      {"First city?", "{\"name\":\"Tokyo\",\"population\":14000000}", 0, 0},
      {"Second city?", "{\"name\":\"Osaka\",\"population\":2700000}", 0, 1},
      {"Third city?", "{\"name\":\"Nagoya\"}", PANTO_ERR_OUTPUT_INVALID, 1},
      {"Fourth city?", "I can't help with that.", PANTO_ERR_OUTPUT_REFUSED, 0},
  };
  for (size_t t = 0; t < sizeof turns / sizeof turns[0]; t++) {
    stream = start(agent, turns[t].prompt);
    CHECK(stream != NULL);
    PantoEvent ev = PANTO_EVENT_INIT;
    PantoStatus st;
    int repairs = 0, completes = 0;
    while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
      if (ev.kind == PANTO_EV_OUTPUT_REPAIR) {
        const PantoOutputRepair *r = &ev.payload.output_repair;
        repairs++;
        CHECKF(r->attempt == 1 && r->max_attempts == 1, "turn %zu: attempt %u of %u", t + 1,
               r->attempt, r->max_attempts);
        CHECKF(str_contains(r->error, "population"), "turn %zu: %.*s", t + 1, (int)r->error.len,
               r->error.ptr);
        CHECK(str_eq(panto_event_kind_name(ev.kind), "output_repair"));
      } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
        const PantoMessageComplete *m = &ev.payload.message_complete;
        completes++;
        CHECKF(m->output.ptr != NULL && str_eq(m->output, turns[t].output), "turn %zu: output %.*s",
               t + 1, (int)m->output.len, m->output.ptr ? m->output.ptr : "");
        CHECK(m->output.ptr[m->output.len] == '\0');
        PantoStr json;
        CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
        CHECKF(str_contains(json, "\"output\":{\"name\":"), "%.*s", (int)json.len, json.ptr);
      }
    }
    CHECKF(repairs == turns[t].repairs, "turn %zu: %d repairs", t + 1, repairs);
    if (turns[t].error == 0) {
      CHECKF(st == PANTO_DONE && completes == 1, "turn %zu: status %d", t + 1, st);
    } else {
      const PantoErrorInfo *e = &ev.payload.error;
      CHECKF(st == PANTO_ERROR && ev.kind == PANTO_EV_ERROR && e->kind == turns[t].error,
             "turn %zu: status %d kind %u", t + 1, st, e->kind);
      CHECKF(e->output.ptr != NULL && str_eq(e->output, turns[t].output), "turn %zu: output %.*s",
             t + 1, (int)e->output.len, e->output.ptr ? e->output.ptr : "");
      CHECK(e->output.ptr[e->output.len] == '\0');
      CHECK(!e->retryable && completes == 0);
      PantoStr json;
      CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
      CHECKF(str_contains(json, "\"output\":\""), "%.*s", (int)json.len, json.ptr);
    }
    panto_stream_free(stream);
    stream = NULL;
  }
  /* The third kind (max_tokens) has its name too; its turn is tested in Go and Python. */
  CHECK(str_eq(panto_error_kind_name(PANTO_ERR_OUTPUT_TRUNCATED), "output_truncated"));
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* ------------------------------------------------------------------------------------ */

static void test_abi_version(void) {
  CHECK(panto_abi_version() == PANTO_ABI_VERSION);
  CHECK((panto_abi_version() >> 16) == PANTO_ABI_VERSION_MAJOR);
  CHECK(str_eq(panto_error_kind_name(PANTO_ERR_BUSY), "busy"));
  CHECK(str_eq(panto_event_kind_name(PANTO_EV_MESSAGE_COMPLETE), "message_complete"));
  CHECK(str_eq(panto_event_kind_name(12345), "unknown"));
out:;
}

/* A full turn with a host tool: the model calls `weather`, the test answers it, the model
 * answers in text. Then message_complete, then PANTO_DONE on every later call. */
static void test_host_tool_turn(void) {
  TestServer srv;
  PantoAgent *agent = NULL, *agent2 = NULL;
  PantoStream *stream = NULL;
  PantoString saved = {NULL, 0}, saved2 = {NULL, 0};
  PantoError *err = NULL;
  if (server_start(&srv, demo_scenario) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-demo",
                    ",\"tools\":[{\"name\":\"weather\",\"description\":\"Weather of a city\","
                    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                    "\"string\"}}}}]");
  CHECK(agent != NULL);
  stream = start(agent, "What's the weather in Paris?");
  CHECK(stream != NULL);

  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int seen[11] = {0};
  int events = 0, last_kind = 0;
  bool answered = false;
  const char *tool_output = "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}";
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    events++;
    CHECKF(ev.kind >= 1 && ev.kind <= 10, "kind %u", ev.kind); /* no compaction here */
    seen[ev.kind]++;
    last_kind = (int)ev.kind;
    CHECK(ev.struct_size == sizeof(PantoEvent));
    /* Every event's canonical JSON starts with its type. */
    PantoStr json;
    CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
    char prefix[64];
    PantoStr name = panto_event_kind_name(ev.kind);
    snprintf(prefix, sizeof prefix, "{\"type\":\"%.*s\"", (int)name.len, name.ptr);
    CHECKF(json.len > strlen(prefix) && memcmp(json.ptr, prefix, strlen(prefix)) == 0 &&
               json.ptr[json.len] == 0,
           "%.*s", (int)json.len, json.ptr);
    /* A copy of the struct is as good as the original while the lifetime lasts. */
    PantoEvent copy = ev;
    PantoStr json2;
    CHECK(panto_event_to_json(&copy, &json2) == PANTO_OK && json2.ptr == json.ptr);

    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      PantoToolCallStart *t = &ev.payload.tool_call_start;
      CHECK(t->host);
      CHECK(str_eq(t->name, "weather"));
      CHECK(str_eq(t->call_id, "call_1"));
      CHECK(str_eq(t->arguments, "{\"city\":\"Paris\"}"));
      CHECK(t->arguments_raw.ptr == NULL && t->arguments_raw.len == 0);
      CHECK(panto_stream_submit_tool_result(stream, t->call_id.ptr, t->call_id.len, tool_output,
                                            strlen(tool_output), false, &err) == PANTO_OK);
      CHECK(err == NULL);
      /* Answering twice is a tool error; the stream goes on. */
      CHECK(panto_stream_submit_tool_result(stream, t->call_id.ptr, t->call_id.len, "x", 1,
                                            false, &err) == PANTO_ERROR);
      CHECK(panto_error_kind(err) == PANTO_ERR_TOOL);
      CHECK(str_contains(panto_error_message(err), "already answered"));
      panto_error_free(err);
      err = NULL;
      answered = true;
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      CHECK(answered);
      CHECK(str_eq(ev.payload.tool_result.output, tool_output));
      CHECK(!ev.payload.tool_result.is_error);
      CHECK(str_eq(ev.payload.tool_result.call_id, "call_1"));
    } else if (ev.kind == PANTO_EV_TOOL_DETAILS) {
      CHECK(str_eq(ev.payload.tool_details.name, "weather"));
    } else if (ev.kind == PANTO_EV_BLOCK_COMPLETE &&
               ev.payload.block_complete.content_type == PANTO_CONTENT_TOOL_CALL) {
      CHECK(str_eq(ev.payload.block_complete.arguments, "{\"city\":\"Paris\"}"));
      CHECK(str_contains(ev.payload.block_complete.content, "\"type\":\"tool_call\""));
    } else if (ev.kind == PANTO_EV_MESSAGE_START) {
      CHECK(str_eq(ev.payload.message_start.model, "gpt-4o-2024-08-06"));
    } else if (ev.kind == PANTO_EV_MESSAGE_END) {
      CHECK(ev.payload.message_end.message == 0 ? str_eq(ev.payload.message_end.stop_reason, "tool_use")
                                                : str_eq(ev.payload.message_end.stop_reason, "end_turn"));
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      PantoMessageComplete *c = &ev.payload.message_complete;
      CHECK(str_eq(c->text, "It is 18°C and sunny in Paris."));
      CHECK(str_eq(c->stop_reason, "end_turn"));
      CHECK(c->messages == 2);
      CHECK(c->usage.input_tokens == 61 + 92 && c->usage.output_tokens == 15 + 11);
    }
  }
  CHECKF(st == PANTO_DONE, "status %d, error: %.*s", st, (int)ev.payload.error.message.len,
         ev.payload.error.message.ptr);
  CHECK(ev.kind == PANTO_EV_NONE);
  CHECK(last_kind == PANTO_EV_MESSAGE_COMPLETE);
  CHECK(seen[PANTO_EV_MESSAGE_COMPLETE] == 1 && seen[PANTO_EV_MESSAGE_START] == 2);
  CHECK(seen[PANTO_EV_TOOL_CALL_START] == 1 && seen[PANTO_EV_TOOL_RESULT] == 1);
  CHECK(answered && events > 10);
  /* Exhausted: DONE again, from either call, every time; no JSON for "no event". */
  for (int i = 0; i < 3; i++) {
    CHECK(panto_next_event(stream, &ev) == PANTO_DONE && ev.kind == PANTO_EV_NONE);
    CHECK(panto_next_event_timeout(stream, &ev, 0) == PANTO_DONE);
    CHECK(panto_next_event_timeout(stream, &ev, 100) == PANTO_DONE);
  }
  PantoStr none;
  CHECK(panto_event_to_json(&ev, &none) == PANTO_ERROR && none.ptr == NULL);
  /* Cancel after message_complete changes nothing. */
  CHECK(panto_stream_cancel(stream) == PANTO_OK);
  CHECK(panto_next_event(stream, &ev) == PANTO_DONE);
  panto_stream_free(stream);
  stream = NULL;

  /* History: saved, restored into another agent, identical; cleared. */
  CHECK(panto_agent_save_history(agent, &saved, &err) == PANTO_OK);
  CHECK(saved.ptr != NULL && saved.ptr[saved.len] == 0);
  CHECK(strncmp(saved.ptr, "{\"version\":1,", 13) == 0);
  CHECK(strstr(saved.ptr, "It is 18°C and sunny in Paris.") != NULL);
  CHECK(strstr(saved.ptr, "\"role\":\"tool\"") != NULL);
  agent2 = new_agent(&srv, "sk-demo", NULL);
  CHECK(agent2 != NULL);
  CHECK(panto_agent_load_history(agent2, saved.ptr, saved.len, &err) == PANTO_OK);
  CHECK(panto_agent_save_history(agent2, &saved2, &err) == PANTO_OK);
  CHECK(saved2.len == saved.len && memcmp(saved.ptr, saved2.ptr, saved.len) == 0);
  panto_string_free(&saved2);
  CHECK(saved2.ptr == NULL && saved2.len == 0);
  CHECK(panto_agent_clear_history(agent2, &err) == PANTO_OK);
  CHECK(panto_agent_save_history(agent2, &saved2, &err) == PANTO_OK);
  CHECK(str_eq((PantoStr){saved2.ptr, saved2.len}, "{\"version\":1,\"messages\":[]}"));
  /* A history a provider would refuse is a config error. */
  const char *bad = "{\"version\":1,\"messages\":[{\"role\":\"tool\",\"content\":[]}]}";
  CHECK(panto_agent_load_history(agent2, bad, strlen(bad), &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECK(str_contains(panto_error_message(err), "history"));
  panto_error_free(err);
  err = NULL;
out:
  panto_error_free(err);
  panto_string_free(&saved);
  panto_string_free(&saved2);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_agent_free(agent2);
  server_stop(&srv);
}

/* The provider rejects the key: PANTO_ERROR with the whole payload, again on every later
 * call (sticky); the key appears nowhere. */
static void test_error_is_sticky_with_payload(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  const char *key = "sk-c-test-secret-123456";
  if (server_start(&srv, scenario("unauthorized.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, key, NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  for (int i = 0; i < 4; i++) {
    PantoStatus st = i % 2 ? panto_next_event_timeout(stream, &ev, 1000) : panto_next_event(stream, &ev);
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
  panto_stream_free(stream);
  stream = NULL;
  /* The failed turn freed the agent: a new stream starts (and fails the same way). */
  stream = start(agent, "again");
  CHECK(stream != NULL);
  CHECK(panto_next_event(stream, &ev) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_AUTHENTICATION);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* A consumer thread blocked in panto_next_event (the response is held by the server). */
typedef struct Consumer {
  PantoStream *stream;
  _Atomic pid_t tid;
  atomic_int events;
  atomic_bool saw_hello;
  atomic_bool finished;
  PantoStatus last;
  uint32_t error_kind;
  char text[256];
} Consumer;

static void *consume(void *arg) {
  Consumer *c = arg;
  atomic_store(&c->tid, current_tid());
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event(c->stream, &ev)) == PANTO_EVENT) {
    atomic_fetch_add(&c->events, 1);
    if (ev.kind == PANTO_EV_CONTENT_DELTA && str_eq(ev.payload.content_delta.text, "Hello"))
      atomic_store(&c->saw_hello, true);
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE)
      snprintf(c->text, sizeof c->text, "%.*s", (int)ev.payload.message_complete.text.len,
               ev.payload.message_complete.text.ptr);
  }
  c->last = st;
  c->error_kind = st == PANTO_ERROR ? ev.payload.error.kind : 0;
  atomic_store(&c->finished, true);
  return NULL;
}

/* The consumer got the first delta and is now asleep inside panto_next_event: the
 * library says it waits, and the kernel says its thread sleeps. */
static bool consumer_blocked(void *arg) {
  Consumer *c = arg;
  pid_t tid = atomic_load(&c->tid);
  return atomic_load(&c->saw_hello) && tid != 0 && panto_stream_consumer_waiting(c->stream) &&
         thread_state(tid) == 'S';
}

typedef struct StatWait {
  const TestServer *srv;
  const char *field;
  long want;
} StatWait;

static bool stat_is(void *arg) {
  StatWait *w = arg;
  return server_stat(w->srv, w->field) == w->want;
}

/* No connection from panto to the server is left open. */
static bool no_client_connection(void *arg) { return server_client_connections(arg) == 0; }

static void test_cancel_from_another_thread(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  pthread_t th;
  bool joined = true;
  Consumer c;
  memset(&c, 0, sizeof c);
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  c.stream = stream;
  CHECK(pthread_create(&th, NULL, consume, &c) == 0);
  joined = false;
  StatWait held = {&srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(consumer_blocked, &c, 30000));
  CHECK(!atomic_load(&c.finished));
  /* A second consumer at the same time is refused, not a race (busy, at once for a
   * timeout of 0; test_second_consumer has the rest). */
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event_timeout(stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECK(str_contains(ev.payload.error.message, "another thread"));
  /* Cancel from this thread wakes the blocked one. */
  CHECK(panto_stream_cancel(stream) == PANTO_OK);
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECK(c.last == PANTO_ERROR);
  CHECKF(c.error_kind == PANTO_ERR_CANCELLED, "kind %u", c.error_kind);
  CHECK(atomic_load(&c.events) == 3); /* message_start, block_start, content_delta */
  /* Idempotent, and sticky. */
  CHECK(panto_stream_cancel(stream) == PANTO_OK);
  CHECK(panto_next_event(stream, &ev) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
  /* The turn is over: its connection is closed, the agent takes a new turn. */
  CHECK(wait_until(no_client_connection, &srv, 30000));
  panto_stream_free(stream);
  stream = start(agent, "again");
  CHECK(stream != NULL);
out:
  if (!joined) {
    panto_stream_cancel(stream);
    pthread_join(th, NULL);
  }
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* A thread blocked in panto_agent_compact. */
typedef struct Compactor {
  PantoAgent *agent;
  const PantoCancelToken *cancel;
  _Atomic pid_t tid;
  atomic_bool finished;
  PantoStatus status;
  uint32_t error_kind;
  PantoString result;
} Compactor;

static void *compact_on_thread(void *arg) {
  Compactor *c = arg;
  atomic_store(&c->tid, current_tid());
  PantoError *err = NULL;
  const char *opts = "{\"keep_last\":1}";
  c->status = panto_agent_compact(c->agent, opts, strlen(opts), c->cancel, &c->result, &err);
  c->error_kind = panto_error_kind(err);
  panto_error_free(err);
  atomic_store(&c->finished, true);
  return NULL;
}

/* The compacting thread is asleep inside panto_agent_compact (the kernel says so). */
static bool compactor_blocked(void *arg) {
  Compactor *c = arg;
  pid_t tid = atomic_load(&c->tid);
  return tid != 0 && !atomic_load(&c->finished) && thread_state(tid) == 'S';
}

static bool compactor_finished(void *arg) { return atomic_load(&((Compactor *)arg)->finished); }

static const char CANCEL_HISTORY[] =
    "{\"version\":1,\"messages\":["
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"two\"}]},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}]}";

/* A compaction blocked on the provider (the server holds the summary's response) is
 * cancelled through its token from another thread: CANCELLED, the history untouched,
 * the connection closed. A token already cancelled fails at once and sends nothing. */
static void test_cancel_compaction(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoCancelToken *token = NULL;
  PantoString before = {NULL, 0}, after = {NULL, 0}, result = {NULL, 0};
  PantoError *err = NULL;
  pthread_t th;
  bool joined = true;
  Compactor c;
  memset(&c, 0, sizeof c);
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-test", ",\"retry\":{\"max_retries\":0}");
  CHECK(agent != NULL);
  CHECK(panto_agent_load_history(agent, CANCEL_HISTORY, strlen(CANCEL_HISTORY), &err) ==
        PANTO_OK);
  CHECK(panto_agent_save_history(agent, &before, &err) == PANTO_OK);
  token = panto_cancel_token_new();
  CHECK(token != NULL && !panto_cancel_token_is_cancelled(token));
  c.agent = agent;
  c.cancel = token;
  CHECK(pthread_create(&th, NULL, compact_on_thread, &c) == 0);
  joined = false;
  /* The summary request waits at the server's gate, its caller asleep in the library. */
  StatWait held = {&srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(compactor_blocked, &c, 30000));
  /* The agent is taken while it compacts. */
  PantoStream *stream = NULL;
  CHECK(panto_agent_stream(agent, "x", 1, &stream, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_BUSY);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  CHECK(panto_cancel_token_is_cancelled(token));
  CHECK(wait_until(compactor_finished, &c, 30000));
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECKF(c.status == PANTO_ERROR && c.error_kind == PANTO_ERR_CANCELLED, "status %d kind %u",
         c.status, c.error_kind);
  CHECK(c.result.ptr == NULL);
  CHECK(panto_agent_save_history(agent, &after, &err) == PANTO_OK);
  CHECKF(after.len == before.len && memcmp(after.ptr, before.ptr, before.len) == 0, "%s",
         after.ptr);
  CHECK(wait_until(no_client_connection, &srv, 30000));
  /* Idempotent. A cancelled token stays cancelled: the next call fails at once and
   * sends nothing (the only new connection is the stats request itself). */
  CHECK(panto_cancel_token_cancel(token) == PANTO_OK);
  long total = server_stat(&srv, "connections_total");
  CHECK(total > 0);
  CHECK(panto_agent_compact(agent, NULL, 0, token, &result, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CANCELLED && result.ptr == NULL);
  CHECK(server_stat(&srv, "connections_total") == total + 1);
  /* NULL is refused, not a crash. */
  CHECK(panto_cancel_token_cancel(NULL) == PANTO_ERROR);
  CHECK(!panto_cancel_token_is_cancelled(NULL));
  panto_cancel_token_free(NULL);
out:
  if (!joined) {
    /* Whether or not the cancel worked, the opened gate lets the call return. */
    panto_cancel_token_cancel(token);
    server_open_gate(&srv);
    pthread_join(th, NULL);
  }
  panto_string_free(&c.result);
  panto_string_free(&before);
  panto_string_free(&after);
  panto_string_free(&result);
  panto_cancel_token_free(token);
  panto_agent_free(agent);
  panto_error_free(err);
  server_stop(&srv);
}

static bool turn_paused(void *arg) { return panto_stream_turn_paused((PantoStream *)arg); }

/* Free mid-turn: with the response held by the server, and with the queue full (the turn
 * paused on a consumer that stopped reading). Free returns promptly and the connection is
 * closed. */
static void test_free_mid_turn(void) {
  TestServer held_srv, flood_srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  bool flood_started = false;
  if (server_start(&held_srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&held_srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_MESSAGE_START);
  StatWait held = {&held_srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  int64_t t0 = now_ms();
  panto_stream_free(stream);
  stream = NULL;
  CHECKF(now_ms() - t0 < 5000, "free took %lld ms", (long long)(now_ms() - t0));
  CHECK(wait_until(no_client_connection, &held_srv, 30000));
  panto_agent_free(agent);
  agent = NULL;

  CHECK(server_start(&flood_srv, scenario("flood.json")) == 0);
  flood_started = true;
  agent = new_agent(&flood_srv, "sk-test", ",\"queue_capacity\":4");
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT);
  CHECK(wait_until(turn_paused, stream, 30000));
  /* The turn waits for this consumer; the event just read is still valid. */
  CHECK(ev.kind == PANTO_EV_MESSAGE_START && str_eq(ev.payload.message_start.model, "gpt-4o-mini"));
  t0 = now_ms();
  panto_stream_free(stream);
  stream = NULL;
  CHECKF(now_ms() - t0 < 5000, "free took %lld ms", (long long)(now_ms() - t0));
  CHECK(wait_until(no_client_connection, &flood_srv, 30000));
  /* The agent is free again at once. */
  stream = start(agent, "again");
  CHECK(stream != NULL);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&held_srv);
  if (flood_started) server_stop(&flood_srv);
}

/* NULL handles and out-pointers, a wrong struct_size, bad configurations, invalid UTF-8:
 * errors with a kind, never a crash. */
static void test_bad_arguments(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  PantoString saved = {NULL, 0};
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
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

/* The timeout variant returns PANTO_PENDING while the server holds the response, then
 * the rest of the turn once it is released. */
static void test_pending_from_timeout(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  int got = 0;
  while (got < 3) {
    PantoStatus st = panto_next_event_timeout(stream, &ev, 30000);
    CHECKF(st == PANTO_EVENT, "status %d", st);
    got++;
  }
  CHECK(ev.kind == PANTO_EV_CONTENT_DELTA && str_eq(ev.payload.content_delta.text, "Hello"));
  StatWait held = {&srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(panto_next_event_timeout(stream, &ev, 0) == PANTO_PENDING);
  CHECK(ev.kind == PANTO_EV_NONE);
  int64_t t0 = now_ms();
  CHECK(panto_next_event_timeout(stream, &ev, 50) == PANTO_PENDING);
  CHECKF(now_ms() - t0 >= 45, "returned after %lld ms", (long long)(now_ms() - t0));
  CHECK(ev.kind == PANTO_EV_NONE);
  CHECK(server_open_gate(&srv) == 0);
  PantoStatus st;
  while ((st = panto_next_event_timeout(stream, &ev, 30000)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      CHECK(str_eq(ev.payload.message_complete.text, "Hello from panto."));
      got = 100;
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(got == 100);
  CHECK(panto_next_event_timeout(stream, &ev, 0) == PANTO_DONE);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* Two agents, two threads, two turns in flight at once: both responses are held by the
 * server at the same moment, then both complete. */
typedef struct Turn {
  const TestServer *srv;
  PantoAgent *agent;
  Consumer c;
} Turn;

static void *run_turn(void *arg) {
  Turn *t = arg;
  t->c.stream = start(t->agent, "hi");
  if (t->c.stream == NULL) {
    atomic_store(&t->c.finished, true);
    return NULL;
  }
  return consume(&t->c);
}

static bool both_hello(void *arg) {
  Turn *t = arg;
  return atomic_load(&t[0].c.saw_hello) && atomic_load(&t[1].c.saw_hello);
}

static void test_two_agents_two_threads(void) {
  TestServer srv;
  Turn turns[2];
  pthread_t th[2];
  int started = 0;
  memset(turns, 0, sizeof turns);
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  for (int i = 0; i < 2; i++) {
    turns[i].srv = &srv;
    turns[i].agent = new_agent(&srv, "sk-test", NULL);
    CHECK(turns[i].agent != NULL);
  }
  for (int i = 0; i < 2; i++) {
    CHECK(pthread_create(&th[i], NULL, run_turn, &turns[i]) == 0);
    started++;
  }
  CHECK(wait_until(both_hello, turns, 30000));
  StatWait held = {&srv, "held", 2};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(server_open_gate(&srv) == 0);
  for (; started > 0; started--) CHECK(pthread_join(th[started - 1], NULL) == 0);
  for (int i = 0; i < 2; i++) {
    CHECKF(turns[i].c.last == PANTO_DONE, "turn %d: status %d kind %u", i, turns[i].c.last,
           turns[i].c.error_kind);
    CHECK(strcmp(turns[i].c.text, "Hello from panto.") == 0);
  }
out:
  if (started > 0) {
    server_open_gate(&srv);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  }
  for (int i = 0; i < 2; i++) {
    panto_stream_free(turns[i].c.stream);
    panto_agent_free(turns[i].agent);
  }
  server_stop(&srv);
}

/* A caller built against ABI 1.0 allocates exactly PANTO_EVENT_SIZE_1_0 bytes (on the
 * heap here, so valgrind sees any byte written past them): a whole turn is delivered
 * into it. The size is a literal of 1.0, whatever later headers make of the struct. */
static void test_event_1_0_sized_caller(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoEvent *ev = NULL;
  if (server_start(&srv, scenario("text.json")) != 0) {
    test_failed = 1;
    return;
  }
  CHECK(PANTO_EVENT_SIZE_1_0 == 280);
  ev = (PantoEvent *)calloc(1, PANTO_EVENT_SIZE_1_0);
  CHECK(ev != NULL);
  ev->struct_size = PANTO_EVENT_SIZE_1_0;
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoStatus st;
  int events = 0;
  while ((st = panto_next_event(stream, ev)) == PANTO_EVENT) {
    events++;
    CHECK(ev->struct_size == PANTO_EVENT_SIZE_1_0);
    PantoStr json;
    CHECK(panto_event_to_json(ev, &json) == PANTO_OK);
    if (ev->kind == PANTO_EV_MESSAGE_COMPLETE)
      CHECK(str_eq(ev->payload.message_complete.text, "Hello from panto."));
  }
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(events > 3);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  free(ev);
  server_stop(&srv);
}

/* A copy of an event kept past the next call is stale: panto_event_to_json refuses it,
 * instead of answering with the JSON of whatever event replaced it (the allocator
 * reuses the freed record's address for the next one). The current event still works. */
static void test_stale_event_copy(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  if (server_start(&srv, scenario("text.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT, first, second;
  PantoStr json;
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_MESSAGE_START);
  first = ev;
  CHECK(panto_event_to_json(&first, &json) == PANTO_OK);
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_BLOCK_START);
  second = ev;
  json.ptr = "x";
  CHECK(panto_event_to_json(&first, &json) == PANTO_ERROR);
  CHECK(json.ptr == NULL && json.len == 0);
  CHECK(panto_event_to_json(&second, &json) == PANTO_OK);
  CHECK(str_contains(json, "\"type\":\"block_start\""));
  /* The same kind twice in a row (content deltas): only the kind check would pass. */
  CHECK(panto_next_event(stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_CONTENT_DELTA);
  PantoEvent delta = ev;
  PantoStatus st;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT && ev.kind != PANTO_EV_CONTENT_DELTA) {
  }
  CHECK(st == PANTO_EVENT && ev.kind == PANTO_EV_CONTENT_DELTA);
  CHECK(panto_event_to_json(&delta, &json) == PANTO_ERROR);
  CHECK(panto_event_to_json(&second, &json) == PANTO_ERROR);
  CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
  /* Exhausted: the last event's copy is stale too once DONE was returned. */
  PantoEvent last;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) last = ev;
  CHECK(st == PANTO_DONE);
  CHECK(panto_event_to_json(&last, &json) == PANTO_ERROR);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* A second consumer on another thread. */
typedef struct Second {
  PantoStream *stream;
  int timeout_ms; /* < 0: panto_next_event */
  _Atomic pid_t tid;
  atomic_bool finished;
  PantoStatus status;
  uint32_t kind;
  uint32_t error_kind;
} Second;

static void *second_consumer(void *arg) {
  Second *s = arg;
  atomic_store(&s->tid, current_tid());
  PantoEvent ev = PANTO_EVENT_INIT;
  s->status = s->timeout_ms < 0 ? panto_next_event(s->stream, &ev)
                                : panto_next_event_timeout(s->stream, &ev, s->timeout_ms);
  s->kind = ev.kind;
  s->error_kind = s->status == PANTO_ERROR ? ev.payload.error.kind : 0;
  atomic_store(&s->finished, true);
  return NULL;
}

static bool second_asleep(void *arg) {
  Second *s = arg;
  pid_t tid = atomic_load(&s->tid);
  return tid != 0 && !atomic_load(&s->finished) && thread_state(tid) == 'S';
}

/* While one thread is blocked in a next call, a second one waits asleep — it does not
 * spin on an error — until the first returns, then fails with PANTO_ERR_BUSY. That error
 * is not the stream's: it is not sticky, it consumed nothing, and the first thread's
 * result is what the stream goes on with. A timed second call waits at most its
 * timeout; a timeout of 0 does not wait. */
static void test_second_consumer(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  pthread_t first_th, second_th;
  bool first_running = false, second_running = false;
  Consumer c;
  Second s;
  memset(&c, 0, sizeof c);
  memset(&s, 0, sizeof s);
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  c.stream = stream;
  CHECK(pthread_create(&first_th, NULL, consume, &c) == 0);
  first_running = true;
  StatWait held = {&srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(consumer_blocked, &c, 30000));

  /* Timed: busy after its timeout, not before; 0: at once. */
  PantoEvent ev = PANTO_EVENT_INIT;
  int64_t t0 = now_ms();
  CHECK(panto_next_event_timeout(stream, &ev, 100) == PANTO_ERROR);
  CHECKF(now_ms() - t0 >= 95, "returned after %lld ms", (long long)(now_ms() - t0));
  CHECK(ev.kind == PANTO_EV_ERROR && ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECK(str_eq(panto_error_kind_name(ev.payload.error.kind), "busy"));
  t0 = now_ms();
  CHECK(panto_next_event_timeout(stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECKF(now_ms() - t0 < 1000, "a timeout of 0 waited %lld ms", (long long)(now_ms() - t0));

  /* Untimed: asleep for as long as the first one is inside. */
  s.stream = stream;
  s.timeout_ms = -1;
  CHECK(pthread_create(&second_th, NULL, second_consumer, &s) == 0);
  second_running = true;
  CHECK(wait_until(second_asleep, &s, 30000));
  /* Still asleep a while later, and the first consumer is still the one waiting. */
  for (int i = 0; i < 50; i++) {
    struct timespec ms = {0, 2000000};
    nanosleep(&ms, NULL);
    CHECK(second_asleep(&s));
  }
  CHECK(!atomic_load(&c.finished) && panto_stream_consumer_waiting(stream));

  /* The first one returns (with the rest of the turn): the second wakes with busy. */
  CHECK(server_open_gate(&srv) == 0);
  CHECK(pthread_join(second_th, NULL) == 0);
  second_running = false;
  CHECKF(s.status == PANTO_ERROR && s.kind == PANTO_EV_ERROR && s.error_kind == PANTO_ERR_BUSY,
         "status %d kind %u error %u", s.status, s.kind, s.error_kind);
  CHECK(pthread_join(first_th, NULL) == 0);
  first_running = false;
  /* The first consumer got the whole turn: busy consumed nothing and stuck to nothing. */
  CHECKF(c.last == PANTO_DONE, "status %d kind %u", c.last, c.error_kind);
  CHECK(strcmp(c.text, "Hello from panto.") == 0);
  CHECK(panto_next_event(stream, &ev) == PANTO_DONE);
out:
  if (first_running || second_running) {
    panto_stream_cancel(stream);
    server_open_gate(&srv);
    if (first_running) pthread_join(first_th, NULL);
    if (second_running) pthread_join(second_th, NULL);
  }
  panto_stream_free(stream);
  panto_agent_free(agent);
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

/* What a forked child does (test_fork): returns 0 when everything held, else the
 * number of the first check that failed. */
static int fork_child(const TestServer *srv, PantoAgent *parent_agent, PantoAgent *busy_agent,
                      PantoStream *parent_stream) {
  PantoError *err = NULL;
  PantoEvent ev = PANTO_EVENT_INIT;
  /* 1. A new agent runs a whole turn: the child has a pool of its own. */
  PantoAgent *agent = new_agent(srv, "sk-test", NULL);
  if (agent == NULL) return 1;
  PantoStream *stream = start(agent, "hi");
  if (stream == NULL) return 2;
  PantoStatus st;
  bool complete = false;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT)
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE)
      complete = str_eq(ev.payload.message_complete.text, "Hello from panto.");
  if (st != PANTO_DONE || !complete) return 3;
  panto_stream_free(stream);
  panto_agent_free(agent);
  /* 2. The parent's agents fail at once, saying why, whatever they were doing. */
  PantoStream *s2 = NULL;
  if (panto_agent_stream(parent_agent, "x", 1, &s2, &err) != PANTO_ERROR || s2 != NULL) return 4;
  if (panto_error_kind(err) != PANTO_ERR_CONFIG ||
      !str_contains(panto_error_message(err), "before the process forked"))
    return 5;
  panto_error_free(err);
  err = NULL;
  PantoString saved = {NULL, 0};
  if (panto_agent_save_history(parent_agent, &saved, &err) != PANTO_ERROR) return 6;
  panto_error_free(err);
  err = NULL;
  if (panto_agent_stream(busy_agent, "x", 1, &s2, &err) != PANTO_ERROR) return 7;
  if (panto_error_kind(err) != PANTO_ERR_CONFIG) return 8;
  panto_error_free(err);
  err = NULL;
  /* 3. The parent's open stream fails at once (not a wait for a worker that is gone),
   * again on every call; cancel does nothing; a tool result is refused. */
  int64_t t0 = now_ms();
  for (int i = 0; i < 2; i++) {
    if (panto_next_event(parent_stream, &ev) != PANTO_ERROR) return 9;
    if (ev.payload.error.kind != PANTO_ERR_CONFIG ||
        !str_contains(ev.payload.error.message, "before the process forked"))
      return 10;
  }
  if (panto_next_event_timeout(parent_stream, &ev, 0) != PANTO_ERROR) return 11;
  if (panto_stream_cancel(parent_stream) != PANTO_OK) return 12;
  if (panto_stream_submit_tool_result(parent_stream, "c", 1, "o", 1, false, &err) != PANTO_ERROR)
    return 13;
  panto_error_free(err);
  err = NULL;
  int64_t fd = 0;
  if (panto_stream_readiness_fd(parent_stream, &fd) != PANTO_ERROR || fd != -1) return 15;
  /* 4. Freeing never blocks. */
  panto_stream_free(parent_stream);
  panto_agent_free(parent_agent);
  panto_agent_free(busy_agent);
  if (now_ms() - t0 > 5000) return 14;
  return 0;
}

/* The pre-fork server pattern: a parent that has run turns (its worker threads are up)
 * and holds an open stream forks; the child makes its own agent and runs a turn; the
 * parent's agents and stream fail in the child with a clear error, and freeing them
 * there never blocks. The parent goes on unaffected. Before panto knew about fork, the
 * child's new stream never delivered an event and freeing it blocked forever. */
static void test_fork(void) {
  TestServer srv, held_srv;
  bool held_up = false;
  PantoAgent *agent = NULL, *busy = NULL;
  PantoStream *stream = NULL, *open_stream = NULL;
  if (server_start(&srv, scenario("text.json")) != 0) {
    test_failed = 1;
    return;
  }
  CHECK(server_start(&held_srv, scenario("text-held.json")) == 0);
  held_up = true;
  agent = new_agent(&srv, "sk-test", NULL);
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL && drain(stream, NULL, NULL) == PANTO_DONE);
  panto_stream_free(stream);
  stream = NULL;
  /* An open stream, its turn held by the server at fork time. */
  busy = new_agent(&held_srv, "sk-test", NULL);
  CHECK(busy != NULL);
  open_stream = start(busy, "hi");
  CHECK(open_stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(open_stream, &ev) == PANTO_EVENT);
  StatWait held = {&held_srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));

  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(fork_child(&srv, agent, busy, open_stream));
  int status = 0;
  int64_t deadline = now_ms() + 60000;
  pid_t got;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline) {
    struct timespec ms = {0, 5000000};
    nanosleep(&ms, NULL);
  }
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECKF(got == pid, "the child did not finish within 60 s (it hangs)");
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "child: %s %d (the number of the check that failed)",
         WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));

  /* The parent is unaffected: its open stream goes on, its agent takes another turn. */
  CHECK(server_open_gate(&held_srv) == 0);
  CHECK(drain(open_stream, NULL, NULL) == PANTO_DONE);
  stream = start(agent, "again");
  CHECK(stream != NULL && drain(stream, NULL, NULL) == PANTO_DONE);
out:
  panto_stream_free(stream);
  panto_stream_free(open_stream);
  panto_agent_free(agent);
  panto_agent_free(busy);
  server_stop(&srv);
  if (held_up) server_stop(&held_srv);
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
  if (server_start(&srv, scenario("text.json")) != 0) {
    test_failed = 1;
    return;
  }
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
    CHECK(drain(stream, NULL, NULL) == PANTO_DONE);
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

/* ---- The readiness descriptor (ABI 1.1) ------------------------------------------ */

static bool fd_readable(int64_t fd, int timeout_ms) {
  struct pollfd p = {(int)fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

/* The process's OS thread count (/proc/self/status), -1 if unknown. */
static int os_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

/* One stream driven by a poll loop. */
typedef struct Polled {
  PantoAgent *agent;
  PantoStream *stream;
  int64_t fd;
  int events;
  bool hello, over;
  PantoStatus last;
  char text[64];
} Polled;

/* Takes what is ready, until PANTO_PENDING or the end: the header's drain rule. */
static PantoStatus drain_ready(Polled *p) {
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event_timeout(p->stream, &ev, 0)) == PANTO_EVENT) {
    p->events++;
    if (ev.kind == PANTO_EV_CONTENT_DELTA && str_eq(ev.payload.content_delta.text, "Hello"))
      p->hello = true;
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE)
      snprintf(p->text, sizeof p->text, "%.*s", (int)ev.payload.message_complete.text.len,
               ev.payload.message_complete.text.ptr);
  }
  p->last = st;
  if (st != PANTO_PENDING) p->over = true;
  return st;
}

/* Waits (poll, on this thread) for the streams that have not said Hello (`hello`) or are
 * not over, and drains each that is ready; returns how many of them got there (a stream
 * that ends counts as arrived either way: the caller checks how), or -1 if poll failed or
 * timed out. */
static int poll_round(Polled *ps, int n, struct pollfd *fds, int *idx, bool hello) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (ps[i].over || (hello && ps[i].hello)) continue;
    fds[m].fd = (int)ps[i].fd;
    fds[m].events = POLLIN;
    fds[m].revents = 0;
    idx[m++] = i;
  }
  int r = poll(fds, (nfds_t)m, 60000);
  if (r <= 0) return -1;
  int became = 0;
  for (int j = 0; j < m; j++) {
    if (!(fds[j].revents & POLLIN)) continue;
    Polled *p = &ps[idx[j]];
    drain_ready(p);
    if (p->over || (hello && p->hello)) became++;
  }
  return became;
}

enum { POLL_STREAMS = 100 };

/* 100 streams on one thread, one poll() loop: each waits at the server's gate after its
 * first delta with no thread of its own, nothing is readable while nothing is ready, and
 * once the gate opens every turn completes in the same loop. After PANTO_DONE each
 * descriptor stays readable and the answer stays PANTO_DONE. */
static void test_poll_many_streams(void) {
  TestServer srv;
  Polled *ps = calloc(POLL_STREAMS, sizeof *ps);
  struct pollfd *fds = calloc(POLL_STREAMS, sizeof *fds);
  int *idx = calloc(POLL_STREAMS, sizeof *idx);
  if (ps == NULL || fds == NULL || idx == NULL || server_start(&srv, scenario("text-held.json")) != 0) {
    free(ps);
    free(fds);
    free(idx);
    test_failed = 1;
    return;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int threads_before = os_threads(), threads_peak = 0;
  for (int i = 0; i < POLL_STREAMS; i++) {
    ps[i].agent = new_agent(&srv, "sk-test", NULL);
    CHECK(ps[i].agent != NULL);
    ps[i].stream = start(ps[i].agent, "hi");
    CHECK(ps[i].stream != NULL);
    CHECK(panto_stream_readiness_fd(ps[i].stream, &ps[i].fd) == PANTO_OK && ps[i].fd >= 0);
    int64_t again = -1;
    CHECK(panto_stream_readiness_fd(ps[i].stream, &again) == PANTO_OK && again == ps[i].fd);
  }
  for (int hellos = 0; hellos < POLL_STREAMS;) {
    int r = poll_round(ps, POLL_STREAMS, fds, idx, true);
    CHECKF(r >= 0, "poll: no readiness in 60 s (%d of %d said Hello)", hellos, POLL_STREAMS);
    hellos += r;
    int t = os_threads();
    if (t > threads_peak) threads_peak = t;
  }
  for (int i = 0; i < POLL_STREAMS; i++)
    CHECKF(ps[i].last == PANTO_PENDING && ps[i].events == 3, "stream %d: status %d, %d events",
           i, ps[i].last, ps[i].events);
  StatWait held = {&srv, "held", POLL_STREAMS};
  CHECK(wait_until(stat_is, &held, 60000));
  /* Everything is held and drained: not one descriptor is readable. */
  for (int i = 0; i < POLL_STREAMS; i++) {
    fds[i].fd = (int)ps[i].fd;
    fds[i].events = POLLIN;
    fds[i].revents = 0;
  }
  CHECK(poll(fds, POLL_STREAMS, 0) == 0);
  /* No thread per stream: the library's workers (one per core, at least two) and their
   * name-resolution helpers are all it added. */
  CHECKF(threads_peak <= threads_before + 2 * (cpus > 2 ? cpus : 2), "%d threads (before: %d)",
         threads_peak, threads_before);
  CHECK(server_open_gate(&srv) == 0);
  for (int over = 0; over < POLL_STREAMS;) {
    int r = poll_round(ps, POLL_STREAMS, fds, idx, false);
    CHECKF(r >= 0, "poll: no readiness in 60 s (%d of %d over)", over, POLL_STREAMS);
    over += r;
  }
  for (int i = 0; i < POLL_STREAMS; i++) {
    CHECKF(ps[i].last == PANTO_DONE && strcmp(ps[i].text, "Hello from panto.") == 0,
           "stream %d: status %d, text '%s'", i, ps[i].last, ps[i].text);
    PantoEvent ev = PANTO_EVENT_INIT;
    CHECK(fd_readable(ps[i].fd, 0));
    CHECK(panto_next_event_timeout(ps[i].stream, &ev, 0) == PANTO_DONE);
    CHECK(fd_readable(ps[i].fd, 0));
  }
out:
  for (int i = 0; i < POLL_STREAMS; i++) {
    panto_stream_free(ps[i].stream);
    panto_agent_free(ps[i].agent);
  }
  free(ps);
  free(fds);
  free(idx);
  server_stop(&srv);
}

/* A held stream, drained through its descriptor up to "Hello", then to PANTO_PENDING:
 * its descriptor is unreadable. Returns false (and fails the test) otherwise. */
static bool drained_at_hello(Polled *p) {
  int64_t deadline = now_ms() + 60000;
  while (!p->hello) {
    if (!fd_readable(p->fd, 60000) || now_ms() > deadline) return false;
    if (drain_ready(p) != PANTO_PENDING) return false;
  }
  return !fd_readable(p->fd, 0);
}

/* A thread that cancels a stream once the polling thread is asleep in poll(). */
typedef struct Canceller {
  PantoStream *stream;
  pid_t poller;
  atomic_bool saw_blocked;
} Canceller;

static bool poller_blocked(void *arg) { return blocked_in_poll(((Canceller *)arg)->poller); }

static void *cancel_when_blocked(void *arg) {
  Canceller *c = arg;
  atomic_store(&c->saw_blocked, wait_until(poller_blocked, c, 60000));
  panto_stream_cancel(c->stream);
  return NULL;
}

/* This thread waits in poll() on a stream's descriptor; another thread, once it has seen
 * this one asleep in poll, cancels the stream: the descriptor becomes readable, and the
 * cancel is what the stream then reports, for good, with the descriptor still readable. */
static void test_readiness_cancel_from_another_thread(void) {
  TestServer srv;
  Polled p;
  memset(&p, 0, sizeof p);
  pthread_t th;
  bool joined = true;
  Canceller c;
  memset(&c, 0, sizeof c);
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  p.agent = new_agent(&srv, "sk-test", NULL);
  CHECK(p.agent != NULL);
  p.stream = start(p.agent, "hi");
  CHECK(p.stream != NULL);
  CHECK(panto_stream_readiness_fd(p.stream, &p.fd) == PANTO_OK);
  CHECK(drained_at_hello(&p));
  c.stream = p.stream;
  c.poller = current_tid();
  CHECK(pthread_create(&th, NULL, cancel_when_blocked, &c) == 0);
  joined = false;
  struct pollfd f = {(int)p.fd, POLLIN, 0};
  int r = poll(&f, 1, 60000);
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECK(atomic_load(&c.saw_blocked));
  CHECKF(r == 1 && (f.revents & POLLIN), "poll: %d, revents %#x", r, f.revents);
  PantoEvent ev = PANTO_EVENT_INIT;
  for (int i = 0; i < 3; i++) {
    CHECK(panto_next_event_timeout(p.stream, &ev, 0) == PANTO_ERROR);
    CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
    CHECK(fd_readable(p.fd, 0));
  }
out:
  if (!joined) pthread_join(th, NULL);
  panto_stream_free(p.stream);
  panto_agent_free(p.agent);
  server_stop(&srv);
}

/* A thread blocked in poll() on a stream's descriptor. */
typedef struct FdPoller {
  int64_t fd;
  int handshake[2];
  _Atomic pid_t tid;
  int result;
  short revents;
} FdPoller;

static void *poll_fd(void *arg) {
  FdPoller *p = arg;
  atomic_store(&p->tid, current_tid());
  char b = 1;
  if (write(p->handshake[1], &b, 1) != 1) return NULL;
  struct pollfd f = {(int)p->fd, POLLIN, 0};
  p->result = poll(&f, 1, 60000); /* the timeout only catches a hang */
  p->revents = f.revents;
  return NULL;
}

static bool fd_poller_blocked(void *arg) {
  return blocked_in_poll(atomic_load(&((FdPoller *)arg)->tid));
}

/* panto_stream_free while another thread waits in poll() on the stream's descriptor
 * (established: the thread said it was about to poll, and the kernel reports it asleep
 * in poll): the wait returns (readable, or an invalid descriptor if it looked only after
 * the close), and valgrind sees nothing amiss. Also the arguments' checks. */
static void test_readiness_free_while_polling(void) {
  TestServer srv;
  Polled p;
  memset(&p, 0, sizeof p);
  FdPoller fp;
  memset(&fp, 0, sizeof fp);
  fp.handshake[0] = fp.handshake[1] = -1;
  pthread_t th;
  bool joined = true;
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  int64_t fd = 7;
  CHECK(panto_stream_readiness_fd(NULL, &fd) == PANTO_ERROR && fd == -1);
  p.agent = new_agent(&srv, "sk-test", NULL);
  CHECK(p.agent != NULL);
  p.stream = start(p.agent, "hi");
  CHECK(p.stream != NULL);
  CHECK(panto_stream_readiness_fd(p.stream, NULL) == PANTO_ERROR);
  CHECK(panto_stream_readiness_fd(p.stream, &p.fd) == PANTO_OK);
  CHECK(drained_at_hello(&p));
  CHECK(pipe(fp.handshake) == 0);
  fp.fd = p.fd;
  CHECK(pthread_create(&th, NULL, poll_fd, &fp) == 0);
  joined = false;
  char b;
  CHECK(read(fp.handshake[0], &b, 1) == 1);
  CHECK(wait_until(fd_poller_blocked, &fp, 60000));
  panto_stream_free(p.stream);
  p.stream = NULL;
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECKF(fp.result == 1 && (fp.revents & (POLLIN | POLLNVAL)), "poll: %d, revents %#x",
         fp.result, fp.revents);
out:
  if (!joined) {
    panto_stream_free(p.stream);
    p.stream = NULL;
    pthread_join(th, NULL);
  }
  if (fp.handshake[0] >= 0) close(fp.handshake[0]);
  if (fp.handshake[1] >= 0) close(fp.handshake[1]);
  panto_stream_free(p.stream);
  panto_agent_free(p.agent);
  server_stop(&srv);
}

/* ---- Ready sets (ABI 1.2): one descriptor for many streams ------------------------- */

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n;
}

/* Waits on the set's descriptor (poll, this thread) and drains every stream it reports
 * (tokens are indexes into ps) until `done` says each stream got where it should; false
 * on a 60 s wait with nothing reported. */
static bool drive_set(PantoReadySet *set, Polled *ps, int n, bool hello) {
  int64_t fd = -1;
  if (panto_ready_set_fd(set, &fd) != PANTO_OK) return false;
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++)
      if (!ps[i].over && !(hello && ps[i].hello)) left++;
    if (left == 0) return true;
    if (!fd_readable(fd, 60000)) return false;
    uint64_t tokens[16];
    size_t got;
    do {
      got = panto_ready_set_take(set, tokens, 16);
      for (size_t k = 0; k < got; k++) drain_ready(&ps[tokens[k]]);
    } while (got == 16);
  }
}

/* 100 streams behind one set: one poll() on one descriptor serves them all, attaching
 * costs no descriptor per stream, nothing is reported while nothing is ready, and every
 * turn completes through the set. */
static void test_ready_set_many_streams(void) {
  TestServer srv;
  PantoReadySet *set = NULL;
  Polled *ps = calloc(POLL_STREAMS, sizeof *ps);
  if (ps == NULL || server_start(&srv, scenario("text-held.json")) != 0) {
    free(ps);
    test_failed = 1;
    return;
  }
  CHECK(panto_ready_set_new(NULL) == PANTO_ERROR);
  int fds_before = open_fds();
  CHECK(panto_ready_set_new(&set) == PANTO_OK && set != NULL);
  CHECKF(open_fds() == fds_before + 1, "%d descriptors for a set (before: %d)", open_fds(),
         fds_before);
  for (int i = 0; i < POLL_STREAMS; i++) {
    ps[i].agent = new_agent(&srv, "sk-test", NULL);
    CHECK(ps[i].agent != NULL);
    ps[i].stream = start(ps[i].agent, "hi");
    CHECK(ps[i].stream != NULL);
  }
  StatWait held = {&srv, "held", POLL_STREAMS};
  CHECK(wait_until(stat_is, &held, 60000));
  fds_before = open_fds();
  for (int i = 0; i < POLL_STREAMS; i++)
    CHECK(panto_stream_attach(ps[i].stream, set, (uint64_t)i) == PANTO_OK);
  CHECKF(open_fds() == fds_before, "%d descriptors after attaching (before: %d)", open_fds(),
         fds_before);
  /* One way to report per stream. */
  int64_t fd = -1;
  CHECK(panto_stream_attach(ps[0].stream, set, 0) == PANTO_ERROR);
  CHECK(panto_stream_readiness_fd(ps[0].stream, &fd) == PANTO_ERROR && fd == -1);
  CHECK(panto_stream_attach(NULL, set, 0) == PANTO_ERROR);
  CHECK(panto_stream_attach(ps[0].stream, NULL, 0) == PANTO_ERROR);
  CHECK(drive_set(set, ps, POLL_STREAMS, true));
  for (int i = 0; i < POLL_STREAMS; i++)
    CHECKF(ps[i].last == PANTO_PENDING && ps[i].events == 3, "stream %d: status %d, %d events",
           i, ps[i].last, ps[i].events);
  CHECK(panto_ready_set_fd(set, &fd) == PANTO_OK && fd >= 0);
  uint64_t tokens[4];
  while (panto_ready_set_take(set, tokens, 4) > 0) {
  }
  CHECK(!fd_readable(fd, 0));
  CHECK(server_open_gate(&srv) == 0);
  CHECK(drive_set(set, ps, POLL_STREAMS, false));
  for (int i = 0; i < POLL_STREAMS; i++)
    CHECKF(ps[i].last == PANTO_DONE && strcmp(ps[i].text, "Hello from panto.") == 0,
           "stream %d: status %d, text '%s'", i, ps[i].last, ps[i].text);
  CHECK(panto_ready_set_take(set, NULL, 4) == 0);
  CHECK(panto_ready_set_take(NULL, tokens, 4) == 0);
out:
  for (int i = 0; i < POLL_STREAMS; i++) {
    panto_stream_free(ps[i].stream);
    panto_agent_free(ps[i].agent);
  }
  panto_ready_set_free(set);
  free(ps);
  server_stop(&srv);
}

/* This thread waits in poll() on a set's descriptor; another thread, once it has seen
 * this one asleep in poll, cancels one of the set's streams: the set turns readable and
 * reports that stream, which then answers the cancel. A stream reported and freed
 * before anyone took its token is never reported; freeing the set while a thread polls
 * it wakes that thread, and a stream attached to it outlives it. */
static void test_ready_set_cancel_and_free(void) {
  TestServer srv;
  Polled p[2];
  memset(p, 0, sizeof p);
  PantoReadySet *set = NULL;
  pthread_t th;
  bool joined = true;
  Canceller c;
  memset(&c, 0, sizeof c);
  FdPoller fp;
  memset(&fp, 0, sizeof fp);
  fp.handshake[0] = fp.handshake[1] = -1;
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  CHECK(panto_ready_set_new(&set) == PANTO_OK);
  for (int i = 0; i < 2; i++) {
    p[i].agent = new_agent(&srv, "sk-test", NULL);
    CHECK(p[i].agent != NULL);
    p[i].stream = start(p[i].agent, "hi");
    CHECK(p[i].stream != NULL);
    CHECK(panto_stream_attach(p[i].stream, set, (uint64_t)i) == PANTO_OK);
  }
  CHECK(drive_set(set, p, 2, true));
  StatWait held = {&srv, "held", 2};
  CHECK(wait_until(stat_is, &held, 60000));
  uint64_t tokens[4];
  while (panto_ready_set_take(set, tokens, 4) > 0) {
  }
  for (int i = 0; i < 2; i++) CHECK(drain_ready(&p[i]) == PANTO_PENDING);
  int64_t fd = -1;
  CHECK(panto_ready_set_fd(set, &fd) == PANTO_OK);
  CHECK(!fd_readable(fd, 0));
  c.stream = p[0].stream;
  c.poller = current_tid();
  CHECK(pthread_create(&th, NULL, cancel_when_blocked, &c) == 0);
  joined = false;
  struct pollfd f = {(int)fd, POLLIN, 0};
  int r = poll(&f, 1, 60000);
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECK(atomic_load(&c.saw_blocked));
  CHECKF(r == 1 && (f.revents & POLLIN), "poll: %d, revents %#x", r, f.revents);
  CHECK(panto_ready_set_take(set, tokens, 4) == 1 && tokens[0] == 0);
  CHECK(!fd_readable(fd, 0));
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event_timeout(p[0].stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
  /* Reported (cancelled), then freed before its token was taken: never reported. */
  CHECK(panto_stream_cancel(p[1].stream) == PANTO_OK);
  CHECK(fd_readable(fd, 0));
  panto_stream_free(p[1].stream);
  p[1].stream = NULL;
  CHECK(panto_ready_set_take(set, tokens, 4) == 0);
  CHECK(!fd_readable(fd, 0));
  /* Freeing the set wakes its poller; the stream attached to it goes on. */
  CHECK(pipe(fp.handshake) == 0);
  fp.fd = fd;
  CHECK(pthread_create(&th, NULL, poll_fd, &fp) == 0);
  joined = false;
  char b;
  CHECK(read(fp.handshake[0], &b, 1) == 1);
  CHECK(wait_until(fd_poller_blocked, &fp, 60000));
  panto_ready_set_free(set);
  set = NULL;
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECKF(fp.result == 1 && (fp.revents & (POLLIN | POLLNVAL)), "poll: %d, revents %#x",
         fp.result, fp.revents);
  CHECK(panto_next_event_timeout(p[0].stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
out:
  if (!joined) {
    panto_stream_cancel(p[0].stream);
    panto_ready_set_free(set);
    set = NULL;
    pthread_join(th, NULL);
  }
  if (fp.handshake[0] >= 0) close(fp.handshake[0]);
  if (fp.handshake[1] >= 0) close(fp.handshake[1]);
  for (int i = 0; i < 2; i++) {
    panto_stream_free(p[i].stream);
    panto_agent_free(p[i].agent);
  }
  panto_ready_set_free(set);
  server_stop(&srv);
}

/* One way to report per stream, in either order and for two sets; a take of one token
 * at a time while several are reported leaves the descriptor readable until the last is
 * taken, then unreadable; a set freed while its streams' turns still run leaves them
 * working (their hand-offs go nowhere, a blocking next still sees them to the end), and
 * the streams are freed after it (valgrind: nothing leaks, nothing is used after free). */
static void test_ready_set_one_way_tiny_takes_and_freed_first(void) {
  TestServer srv;
  Polled p[4];
  memset(p, 0, sizeof p);
  PantoReadySet *set = NULL, *other = NULL;
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  CHECK(panto_ready_set_new(&set) == PANTO_OK && panto_ready_set_new(&other) == PANTO_OK);
  for (int i = 0; i < 4; i++) {
    p[i].agent = new_agent(&srv, "sk-test", NULL);
    CHECK(p[i].agent != NULL);
    p[i].stream = start(p[i].agent, "hi");
    CHECK(p[i].stream != NULL);
  }
  /* Stream 0 asked for its own descriptor first: it cannot join a set after. */
  int64_t own = -1, fd = -1, fd2 = -1;
  CHECK(panto_stream_readiness_fd(p[0].stream, &own) == PANTO_OK && own >= 0);
  CHECK(panto_stream_attach(p[0].stream, set, 0) == PANTO_ERROR);
  CHECK(panto_stream_attach(p[0].stream, other, 0) == PANTO_ERROR);
  /* Streams 1-3 join `set`: not a second time, not `other` too, no descriptor of their own. */
  for (int i = 1; i < 4; i++) CHECK(panto_stream_attach(p[i].stream, set, (uint64_t)i) == PANTO_OK);
  CHECK(panto_stream_attach(p[1].stream, set, 1) == PANTO_ERROR);
  CHECK(panto_stream_attach(p[1].stream, other, 1) == PANTO_ERROR);
  CHECK(panto_stream_readiness_fd(p[1].stream, &own) == PANTO_ERROR && own == -1);
  CHECK(panto_ready_set_fd(set, &fd) == PANTO_OK && panto_ready_set_fd(other, &fd2) == PANTO_OK);
  p[0].over = true; /* drive_set serves 1-3 only */
  CHECK(drive_set(set, p, 4, true));
  StatWait held = {&srv, "held", 4};
  CHECK(wait_until(stat_is, &held, 60000));
  uint64_t tokens[4];
  while (panto_ready_set_take(set, tokens, 4) > 0) {
  }
  for (int i = 1; i < 4; i++) CHECK(drain_ready(&p[i]) == PANTO_PENDING);
  CHECK(!fd_readable(fd, 0) && !fd_readable(fd2, 0));
  /* Two reported; taken one at a time. */
  CHECK(panto_stream_cancel(p[1].stream) == PANTO_OK);
  CHECK(panto_stream_cancel(p[2].stream) == PANTO_OK);
  CHECK(fd_readable(fd, 0));
  CHECK(!fd_readable(fd2, 0));
  uint64_t one = 99;
  CHECK(panto_ready_set_take(set, &one, 1) == 1 && one == 1);
  CHECKF(fd_readable(fd, 0), "a token is left, yet the descriptor is unreadable");
  CHECK(panto_ready_set_take(set, &one, 1) == 1 && one == 2);
  CHECK(panto_ready_set_take(set, &one, 1) == 0);
  CHECKF(!fd_readable(fd, 0), "the set is empty, yet its descriptor is readable");
  /* Not drained yet: a second cancel does not report them again. */
  CHECK(panto_stream_cancel(p[1].stream) == PANTO_OK);
  CHECK(!fd_readable(fd, 0));
  /* The set goes first; stream 3's turn goes on and ends, seen by a blocking next. */
  panto_ready_set_free(set);
  set = NULL;
  CHECK(server_open_gate(&srv) == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event_timeout(p[3].stream, &ev, 60000)) == PANTO_EVENT) {
  }
  CHECKF(st == PANTO_DONE, "stream 3 after its set was freed: %d", st);
  CHECK(panto_next_event_timeout(p[1].stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
out:
  panto_ready_set_free(set);
  for (int i = 0; i < 4; i++) {
    panto_stream_free(p[i].stream);
    panto_agent_free(p[i].agent);
  }
  panto_ready_set_free(other);
  server_stop(&srv);
}

/* The child of fork() shares a set's descriptor with its parent. The set is inert in the
 * child (no descriptor, nothing taken, no stream joins it, its free touches nothing of
 * the parent's): before, the child's take read the parent's readiness away, stranding the
 * parent's queued report behind an unreadable descriptor. */
static int ready_set_child(PantoReadySet *set, PantoStream *parents) {
  int64_t fd = 7;
  if (panto_ready_set_fd(set, &fd) != PANTO_ERROR || fd != -1) return 1;
  uint64_t tokens[4];
  if (panto_ready_set_take(set, tokens, 4) != 0) return 2;
  if (panto_stream_attach(parents, set, 5) != PANTO_ERROR) return 3;
  panto_ready_set_free(set);
  return 0;
}

static void test_ready_set_fork(void) {
  TestServer srv;
  Polled p;
  memset(&p, 0, sizeof p);
  PantoReadySet *set = NULL;
  if (server_start(&srv, scenario("text-held.json")) != 0) {
    test_failed = 1;
    return;
  }
  CHECK(panto_ready_set_new(&set) == PANTO_OK);
  p.agent = new_agent(&srv, "sk-test", NULL);
  CHECK(p.agent != NULL);
  p.stream = start(p.agent, "hi");
  CHECK(p.stream != NULL);
  CHECK(panto_stream_attach(p.stream, set, 0) == PANTO_OK); /* drive_set's index */
  CHECK(drive_set(set, &p, 1, true));
  StatWait held = {&srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 60000));
  uint64_t tokens[4];
  while (panto_ready_set_take(set, tokens, 4) > 0) {
  }
  CHECK(drain_ready(&p) == PANTO_PENDING);
  CHECK(panto_stream_cancel(p.stream) == PANTO_OK);
  int64_t fd = -1;
  CHECK(panto_ready_set_fd(set, &fd) == PANTO_OK && fd_readable(fd, 0));
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(ready_set_child(set, p.stream));
  int status = 0;
  int64_t deadline = now_ms() + 60000;
  pid_t got;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline) {
    struct timespec ms = {0, 5000000};
    nanosleep(&ms, NULL);
  }
  if (got == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECKF(got == pid, "the child did not finish within 60 s (it hangs)");
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s %d (the check that failed)",
         WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  CHECKF(fd_readable(fd, 0), "the child took the parent's readiness");
  CHECK(panto_ready_set_take(set, tokens, 4) == 1 && tokens[0] == 0);
  CHECK(!fd_readable(fd, 0));
  CHECK(drain_ready(&p) == PANTO_ERROR);
out:
  panto_stream_free(p.stream);
  panto_agent_free(p.agent);
  panto_ready_set_free(set);
  server_stop(&srv);
}

/* ------------------------------------------------------------------------------------ */

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
static bool no_process_with(void *marker) {
  DIR *d = opendir("/proc");
  if (d == NULL) return true;
  bool none = true;
  struct dirent *e;
  while (none && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], cmd[4096];
    snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    size_t n = fread(cmd, 1, sizeof cmd - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
      if (cmd[i] == 0) cmd[i] = ' ';
    cmd[n] = 0;
    if (strstr(cmd, (const char *)marker) != NULL) none = false;
  }
  closedir(d);
  return none;
}

static bool no_stop_thread(void *unused) {
  (void)unused;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return true;
  bool none = true;
  struct dirent *e;
  while (none && (e = readdir(d)) != NULL) {
    char path[300], comm[64] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "panto-mcp-stop", 14) == 0)
      none = false;
    fclose(f);
  }
  closedir(d);
  return none;
}

static void test_mcp_server_tools(void) {
  const char *venv = getenv("PANTO_MCP_VENV");
  TestServer srv;
  bool server_up = false;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  char fixture[PATH_MAX], scenario[PATH_MAX + 64], marker[64], extra[1024];
  CHECKF(venv != NULL, "%s", "PANTO_MCP_VENV is not set (capi/tests/c/run.sh sets it)");
  CHECK(realpath("tests/mcp/fixture_server.py", fixture) != NULL);
  snprintf(scenario, sizeof scenario, "%s/mcp-echo.json", scenario_dir);
  CHECK(server_start(&srv, scenario) == 0);
  server_up = true;
  snprintf(marker, sizeof marker, "panto-c-mcp-%d", (int)getpid());
  int n = snprintf(extra, sizeof extra,
                   ",\"mcp_servers\":{\"fx\":{\"command\":\"%s/bin/python\",\"args\":[\"%s\","
                   "\"--cancel-marker\",\"%s\"]}}",
                   venv, fixture, marker);
  CHECK(n > 0 && (size_t)n < sizeof extra);
  agent = new_agent(&srv, "sk-c", extra);
  CHECK(agent != NULL);
  stream = start(agent, "echo something");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  bool started = false, result = false;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
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
  CHECK(!no_process_with(marker));
  panto_stream_free(stream);
  stream = NULL;
  panto_agent_free(agent);
  agent = NULL;
  /* Freeing the agent stops its server, and the thread that stops it ends. */
  CHECKF(wait_until(no_process_with, marker, 60000), "%s", "the MCP server outlived its agent");
  CHECK(wait_until(no_stop_thread, NULL, 60000));
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  if (server_up) server_stop(&srv);
}

/* Files a "path" part must not read whole: a FIFO with no writer (an ordinary open
 * blocks forever), /dev/zero (endless), and a sparse PNG of 64 GiB apparent size. Made
 * in a fresh directory `dir` (mkdtemp template); `paths` gets the three paths. */
static int make_hostile_files(char *dir, char paths[3][128]) {
  if (mkdtemp(dir) == NULL) return -1;
  snprintf(paths[0], 128, "%s/pipe.png", dir);
  snprintf(paths[1], 128, "/dev/zero");
  snprintf(paths[2], 128, "%s/sparse.png", dir);
  if (mkfifo(paths[0], 0600) != 0) return -1;
  FILE *f = fopen(paths[2], "wb");
  if (f == NULL) return -1;
  fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
  fclose(f);
  return truncate(paths[2], (off_t)64 << 30);
}

static void remove_hostile_files(const char *dir, char paths[3][128]) {
  unlink(paths[0]);
  unlink(paths[2]);
  rmdir(dir);
}

/* What each hostile file's error says (after its path). */
static const char *const HOSTILE_WHY[3] = {
    "not a regular file (a FIFO)",
    "not a regular file (a character device)",
    "more than max_message_bytes",
};

/* A turn's input as text and images: the JSON input form of panto_agent_stream_with
 * (options "input"), against attachments-openai.json, whose server answers only a
 * request carrying the three parts in order. The transcript describes the image, not
 * its bytes; the input's mistakes are config errors before anything is sent. */
static void test_input_parts(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  PantoString transcript = {NULL, 0};
  if (server_start(&srv, shared_scenario("attachments-openai.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c", ",\"retry\":{\"max_retries\":0}");
  CHECK(agent != NULL);
  /* Text and "input" together, an unreadable file: config errors, nothing sent. */
  const char *both = "{\"input\":[\"x\"]}";
  CHECK(panto_agent_stream_with(agent, "x", 1, both, strlen(both), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  const char *missing = "{\"input\":[{\"type\":\"image\",\"path\":\"/no/such/cat.png\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, missing, strlen(missing), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err), "/no/such/cat.png"), "%s",
         panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  /* A FIFO, /dev/zero and a 64 GiB sparse file: config errors naming the path, at
   * once — the FIFO's open does not block, no file is read past max_message_bytes (an
   * alarm ends the test instead of a hang or a read until memory runs out). */
  {
    char dir[] = "/tmp/panto-c-files-XXXXXX";
    char paths[3][128];
    CHECK(make_hostile_files(dir, paths) == 0);
    for (int i = 0; i < 3; i++) {
      char opts[512];
      snprintf(opts, sizeof opts, "{\"input\":[{\"type\":\"image\",\"path\":\"%s\"}]}",
               paths[i]);
      alarm(120);
      PantoStatus hostile = panto_agent_stream_with(agent, "", 0, opts, strlen(opts), &stream, &err);
      alarm(0);
      CHECK(hostile == PANTO_ERROR && stream == NULL);
      CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
      CHECKF(str_contains(panto_error_message(err), paths[i]) &&
                 str_contains(panto_error_message(err), HOSTILE_WHY[i]),
             "%s", panto_error_message(err).ptr);
      panto_error_free(err);
      err = NULL;
    }
    remove_hostile_files(dir, paths);
  }
  /* An attachment past max_message_bytes: a config error naming the limit, nothing sent. */
  {
    char big_path[] = "/tmp/panto-c-big-XXXXXX";
    int fd = mkstemp(big_path);
    CHECK(fd >= 0);
    static const unsigned char png_head[2008] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECK(write(fd, png_head, sizeof png_head) == (ssize_t)sizeof png_head);
    close(fd);
    PantoAgent *small = new_agent(&srv, "sk-c", ",\"max_message_bytes\":1024");
    char big[256];
    snprintf(big, sizeof big, "{\"input\":[\"x\",{\"type\":\"image\",\"path\":\"%s\"}]}",
             big_path);
    PantoStatus big_st =
        small == NULL ? PANTO_OK
                      : panto_agent_stream_with(small, "", 0, big, strlen(big), &stream, &err);
    unlink(big_path);
    panto_agent_free(small);
    CHECK(small != NULL && big_st == PANTO_ERROR && stream == NULL);
    CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
    CHECKF(str_contains(panto_error_message(err), big_path) &&
               str_contains(panto_error_message(err), "more than max_message_bytes (1024)"),
           "%s", panto_error_message(err).ptr);
    panto_error_free(err);
    err = NULL;
  }
  /* PDF bytes given as a PNG: a config error naming both types, nothing sent. */
  const char *pdf_as_png = "{\"input\":[{\"type\":\"image\",\"media_type\":\"image/png\","
                           "\"data\":\"JVBERi0xLjQ=\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, pdf_as_png, strlen(pdf_as_png), &stream, &err) ==
        PANTO_ERROR);
  CHECK(stream == NULL && panto_error_kind(err) == PANTO_ERR_CONFIG);
  CHECKF(str_contains(panto_error_message(err),
                      "input[0]: attachment: given as \"image/png\", but the bytes are "
                      "\"application/pdf\""),
         "%s", panto_error_message(err).ptr);
  panto_error_free(err);
  err = NULL;
  CHECK(server_stat(&srv, "connections_total") == 1);

  const char *opts = "{\"input\":[\"What is in this picture?\","
                     "{\"type\":\"image\",\"data\":\"iVBORw0KGgp0aW55\"},"
                     "{\"type\":\"image\",\"url\":\"https://example.com/cat.png\"}]}";
  CHECK(panto_agent_stream_with(agent, "", 0, opts, strlen(opts), &stream, &err) == PANTO_OK);
  PantoStatus st = drain(stream, NULL, NULL);
  CHECKF(st == PANTO_DONE, "status %d", st);
  panto_stream_free(stream);
  stream = NULL;
  CHECK(panto_agent_transcript_json(agent, &transcript, &err) == PANTO_OK);
  CHECKF(strstr(transcript.ptr, "{\"role\":\"user\",\"kind\":\"attachment\",\"text\":"
                                "\"image/png, 12 bytes\",\"attachment\":\"image\","
                                "\"media_type\":\"image/png\",\"size\":12}") != NULL &&
             strstr(transcript.ptr, "iVBOR") == NULL,
         "%s", transcript.ptr);
out:
  panto_string_free(&transcript);
  panto_stream_free(stream);
  panto_agent_free(agent);
  panto_error_free(err);
  server_stop(&srv);
}

/* A host tool answered with text and an image (panto_stream_submit_tool_result_parts),
 * against tool-image-openai.json, whose server answers the second request only if the
 * tool's text and image reached it. Refused parts (a document, an unreadable file, bad
 * JSON) are PANTO_ERR_TOOL and leave the call waiting; tool_result carries the parts. */
static void test_tool_result_parts(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  if (server_start(&srv, shared_scenario("tool-image-openai.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c",
                    ",\"retry\":{\"max_retries\":0},\"tools\":[{\"name\":\"camera\"}]");
  CHECK(agent != NULL);
  stream = start(agent, "What do you see?");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int results = 0;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_CALL_START) {
      PantoToolCallStart *t = &ev.payload.tool_call_start;
      const char *refused[][2] = {
          {"[\"x\",{\"type\":\"document\",\"data\":\"JVBERi0xLjQ=\"}]", "text and images only"},
          {"[{\"type\":\"image\",\"path\":\"/no/such/shot.png\"}]", "/no/such/shot.png"},
          {"[\"x\",", "parts: not valid JSON"},
          /* A PDF given as a PNG: the bytes decide, a contradiction is refused. */
          {"[{\"type\":\"image\",\"media_type\":\"image/png\",\"data\":\"JVBERi0xLjQ=\"}]",
           "given as \"image/png\", but the bytes are \"application/pdf\""},
      };
      /* A FIFO, /dev/zero, a 64 GiB sparse file: refused at once, nothing read whole. */
      char dir[] = "/tmp/panto-c-files-XXXXXX";
      char paths[3][128];
      CHECK(make_hostile_files(dir, paths) == 0);
      for (int i = 0; i < 3; i++) {
        char parts[512];
        snprintf(parts, sizeof parts, "[{\"type\":\"image\",\"path\":\"%s\"}]", paths[i]);
        alarm(120);
        PantoStatus hostile = panto_stream_submit_tool_result_parts(
            stream, t->call_id.ptr, t->call_id.len, parts, strlen(parts), false, &err);
        alarm(0);
        CHECK(hostile == PANTO_ERROR && panto_error_kind(err) == PANTO_ERR_TOOL);
        CHECKF(str_contains(panto_error_message(err), paths[i]) &&
                   str_contains(panto_error_message(err), HOSTILE_WHY[i]),
               "%s", panto_error_message(err).ptr);
        panto_error_free(err);
        err = NULL;
      }
      remove_hostile_files(dir, paths);
      for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(panto_stream_submit_tool_result_parts(stream, t->call_id.ptr, t->call_id.len,
                                                    refused[i][0], strlen(refused[i][0]), false,
                                                    &err) == PANTO_ERROR);
        CHECK(panto_error_kind(err) == PANTO_ERR_TOOL);
        CHECKF(str_contains(panto_error_message(err), refused[i][1]), "%s",
               panto_error_message(err).ptr);
        panto_error_free(err);
        err = NULL;
      }
      const char *parts = "[\"one picture\",{\"type\":\"image\",\"data\":\"iVBORw0KGgp0aW55\"}]";
      CHECK(panto_stream_submit_tool_result_parts(stream, t->call_id.ptr, t->call_id.len, parts,
                                                  strlen(parts), false, &err) == PANTO_OK);
    } else if (ev.kind == PANTO_EV_TOOL_RESULT) {
      PantoToolResult *r = &ev.payload.tool_result;
      results++;
      CHECK(str_eq(r->output, "one picture") && !r->is_error);
      CHECKF(str_eq(r->parts, "[{\"type\":\"text\",\"text\":\"one picture\"},{\"type\":\"image\","
                              "\"media_type\":\"image/png\",\"size\":12,\"data\":\"iVBORw0KGgp0aW55\"}]"),
             "%.*s", (int)r->parts.len, r->parts.ptr);
      PantoStr json;
      CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
      CHECK(str_contains(json, "\"is_error\":false,\"parts\":[{\"type\":\"text\""));
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      CHECK(str_eq(ev.payload.message_complete.text, "A cat."));
    }
  }
  CHECKF(st == PANTO_DONE, "status %d, error: %.*s", st, (int)ev.payload.error.message.len,
         ev.payload.error.message.ptr);
  CHECK(results == 1);
out:
  panto_error_free(err);
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

/* panto_event_to_json escapes U+2028 and U+2029 (against line-separators.json, whose
 * answer is "one\u2028two\u2029three"): raw they are valid JSON, but a reader that
 * splits lines on Unicode's line breaks would cut the event. The event's own fields
 * keep the characters. */
static void test_event_json_line_separators(void) {
  TestServer srv;
  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  if (server_start(&srv, scenario("line-separators.json")) != 0) {
    test_failed = 1;
    return;
  }
  agent = new_agent(&srv, "sk-c", "");
  CHECK(agent != NULL);
  stream = start(agent, "hi");
  CHECK(stream != NULL);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int completes = 0;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    PantoStr json;
    CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
    CHECKF(!str_contains(json, "\xe2\x80\xa8") && !str_contains(json, "\xe2\x80\xa9"),
           "a raw U+2028/U+2029 in %.*s", (int)json.len, json.ptr);
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      completes++;
      CHECKF(str_contains(json, "\"text\":\"one\\u2028two\\u2029three\""), "%.*s",
             (int)json.len, json.ptr);
      CHECK(str_eq(ev.payload.message_complete.text, "one\xe2\x80\xa8two\xe2\x80\xa9three"));
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(completes == 1);
out:
  panto_stream_free(stream);
  panto_agent_free(agent);
  server_stop(&srv);
}

static const TestCase TESTS[] = {
    {"abi_version", test_abi_version},
    {"host_tool_turn", test_host_tool_turn},
    {"mcp_server_tools", test_mcp_server_tools},
    {"mcp_config_from_the_docs", test_mcp_config_from_the_docs},
    {"error_is_sticky_with_payload", test_error_is_sticky_with_payload},
    {"cancel_from_another_thread", test_cancel_from_another_thread},
    {"free_mid_turn", test_free_mid_turn},
    {"bad_arguments", test_bad_arguments},
    {"pending_from_timeout", test_pending_from_timeout},
    {"two_agents_two_threads", test_two_agents_two_threads},
    {"reasoning_caching_transcript", test_reasoning_caching_transcript},
    {"compaction", test_compaction},
    {"unreported_usage", test_unreported_usage},
    {"structured_output", test_structured_output},
    {"input_parts", test_input_parts},
    {"tool_result_parts", test_tool_result_parts},
    {"event_json_line_separators", test_event_json_line_separators},
    {"cancel_compaction", test_cancel_compaction},
    {"event_1_0_sized_caller", test_event_1_0_sized_caller},
    {"stale_event_copy", test_stale_event_copy},
    {"second_consumer", test_second_consumer},
    {"server_reset_while_writing_is_no_sigpipe", test_server_reset_while_writing_is_no_sigpipe},
    {"fork", test_fork},
    {"input_and_history_limits", test_input_and_history_limits},
    {"poll_many_streams", test_poll_many_streams},
    {"readiness_cancel_from_another_thread", test_readiness_cancel_from_another_thread},
    {"readiness_free_while_polling", test_readiness_free_while_polling},
    {"ready_set_many_streams", test_ready_set_many_streams},
    {"ready_set_cancel_and_free", test_ready_set_cancel_and_free},
    {"ready_set_one_way_tiny_takes_and_freed_first",
     test_ready_set_one_way_tiny_takes_and_freed_first},
    {"ready_set_fork", test_ready_set_fork},
};

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s SERVER_BIN SCENARIO_DIR DEMO_SCENARIO [TEST]\n", argv[0]);
    return 2;
  }
  server_bin = argv[1];
  scenario_dir = argv[2];
  demo_scenario = argv[3];
  int passed = 0, failed = 0;
  /* PANTO_C_SKIP: names of tests not to run (comma-separated), unless named above. */
  const char *skip = getenv("PANTO_C_SKIP");
  durable_demo_scenario = demo_scenario;
  const size_t own = sizeof TESTS / sizeof TESTS[0];
  for (size_t k = 0; k < own + DURABLE_TESTS_COUNT; k++) {
    const TestCase *test = k < own ? &TESTS[k] : &DURABLE_TESTS[k - own];
    if (argc > 4 && strcmp(argv[4], test->name) != 0) continue;
    if (argc <= 4 && skip != NULL) {
      size_t len = strlen(test->name);
      const char *p = strstr(skip, test->name);
      if (p != NULL && (p == skip || p[-1] == ',') && (p[len] == 0 || p[len] == ',')) continue;
    }
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
