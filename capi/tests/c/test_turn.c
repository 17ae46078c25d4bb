/* C tests of a turn and its events: the ABI version, a whole turn with a host tool and
 * the history it leaves, PANTO_PENDING from the timeout variant, usage, structured
 * output, the events' JSON and struct sizes, and batches (panto_next_events). */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

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
  Turn turn;
  PantoAgent *agent2 = NULL;
  PantoString saved = {NULL, 0}, saved2 = {NULL, 0};
  PantoError *err = NULL;
  CHECK(start_turn(&turn, demo_scenario, "sk-demo",
                   ",\"tools\":[{\"name\":\"weather\",\"description\":\"Weather of a city\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                   "\"string\"}}}}]",
                   "What's the weather in Paris?") == 0);

  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int seen[11] = {0};
  int events = 0, last_kind = 0;
  bool answered = false;
  const char *tool_output = "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}";
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
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
      CHECK(panto_stream_submit_tool_result(turn.stream, t->call_id.ptr, t->call_id.len, tool_output,
                                            strlen(tool_output), false, &err) == PANTO_OK);
      CHECK(err == NULL);
      /* Answering twice is a tool error; the stream goes on. */
      CHECK(panto_stream_submit_tool_result(turn.stream, t->call_id.ptr, t->call_id.len, "x", 1,
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
    CHECK(panto_next_event(turn.stream, &ev) == PANTO_DONE && ev.kind == PANTO_EV_NONE);
    CHECK(panto_next_event_timeout(turn.stream, &ev, 0) == PANTO_DONE);
    CHECK(panto_next_event_timeout(turn.stream, &ev, 100) == PANTO_DONE);
  }
  PantoStr none;
  CHECK(panto_event_to_json(&ev, &none) == PANTO_ERROR && none.ptr == NULL);
  /* Cancel after message_complete changes nothing. */
  CHECK(panto_stream_cancel(turn.stream) == PANTO_OK);
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_DONE);
  panto_stream_free(turn.stream);
  turn.stream = NULL;

  /* History: saved, restored into another agent, identical; cleared. */
  CHECK(panto_agent_save_history(turn.agent, &saved, &err) == PANTO_OK);
  CHECK(saved.ptr != NULL && saved.ptr[saved.len] == 0);
  CHECK(strncmp(saved.ptr, "{\"version\":1,", 13) == 0);
  CHECK(strstr(saved.ptr, "It is 18°C and sunny in Paris.") != NULL);
  CHECK(strstr(saved.ptr, "\"role\":\"tool\"") != NULL);
  agent2 = new_agent(&turn.srv, "sk-demo", NULL);
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
  panto_agent_free(agent2);
  end_turn(&turn);
}

/* The timeout variant returns PANTO_PENDING while the server holds the response, then
 * the rest of the turn once it is released. */
static void test_pending_from_timeout(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  int got = 0;
  while (got < 3) {
    PantoStatus st = panto_next_event_timeout(turn.stream, &ev, 30000);
    CHECKF(st == PANTO_EVENT, "status %d", st);
    got++;
  }
  CHECK(ev.kind == PANTO_EV_CONTENT_DELTA && str_eq(ev.payload.content_delta.text, "Hello"));
  StatWait held = {&turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(panto_next_event_timeout(turn.stream, &ev, 0) == PANTO_PENDING);
  CHECK(ev.kind == PANTO_EV_NONE);
  int64_t t0 = now_ms();
  CHECK(panto_next_event_timeout(turn.stream, &ev, 50) == PANTO_PENDING);
  CHECKF(now_ms() - t0 >= 45, "returned after %lld ms", (long long)(now_ms() - t0));
  CHECK(ev.kind == PANTO_EV_NONE);
  CHECK(server_open_gate(&turn.srv) == 0);
  PantoStatus st;
  while ((st = panto_next_event_timeout(turn.stream, &ev, 30000)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      CHECK(str_eq(ev.payload.message_complete.text, "Hello from panto."));
      got = 100;
    }
  }
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(got == 100);
  CHECK(panto_next_event_timeout(turn.stream, &ev, 0) == PANTO_DONE);
out:
  end_turn(&turn);
}

/* Usage a server did not report is unknown, not zero (usage-unreported.json): turn 1 has
 * no usage at all (llama.cpp), turn 2 a real zero. PantoUsage.reported tells them apart,
 * in message_end and in message_complete. */
static void test_unreported_usage(void) {
  Turn turn;
  CHECK(start_agent(&turn, shared_scenario("usage-unreported.json"), "sk-c",
                    ",\"retry\":{\"max_retries\":0}") == 0);
  for (int i = 0; i < 2; i++) {
    bool want = i == 1;
    turn.stream = start_stream(turn.agent, i == 0 ? "hello" : "again");
    CHECK(turn.stream != NULL);
    PantoEvent ev = PANTO_EVENT_INIT;
    PantoStatus st;
    int ends = 0, completes = 0;
    while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
      const PantoUsage *u = NULL;
      if (ev.kind == PANTO_EV_MESSAGE_END) {
        u = &ev.payload.message_end.usage;
        ends++;
      } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
        u = &ev.payload.message_complete.usage;
        completes++;
      }
      if (u == NULL) continue;
      CHECKF(u->reported == want, "turn %d kind %u: reported %d", i + 1, ev.kind,
             (int)u->reported);
      CHECKF(u->input_tokens == 0 && u->output_tokens == 0, "turn %d: %llu/%llu", i + 1,
             (unsigned long long)u->input_tokens, (unsigned long long)u->output_tokens);
      /* The canonical JSON says the same. */
      PantoStr json;
      CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
      CHECKF(str_contains(json, want ? "\"reported\":true" : "\"reported\":false"), "%.*s",
             (int)json.len, json.ptr);
    }
    CHECKF(st == PANTO_DONE, "status %d", st);
    CHECK(ends == 1 && completes == 1);
    panto_stream_free(turn.stream);
    turn.stream = NULL;
  }
out:
  end_turn(&turn);
}

/* Structured output against structured-output.json (the agent's output_schema, OpenAI
 * strict json_schema): a valid answer is message_complete's `output` (JSON text, also in
 * the event's JSON); an invalid one is repaired (PANTO_EV_OUTPUT_REPAIR, then the valid
 * answer); one still invalid after output_retries fails with PANTO_ERR_OUTPUT_INVALID and
 * the raw text in payload.error.output; a refusal with PANTO_ERR_OUTPUT_REFUSED. */
static void test_structured_output(void) {
  Turn turn;
  CHECK(start_agent(&turn, shared_scenario("structured-output.json"), "sk-c",
                    ",\"retry\":{\"max_retries\":0},\"output_retries\":1,\"output_schema\":{"
                    "\"title\":\"city\",\"type\":\"object\",\"properties\":{\"name\":{\"type\":"
                    "\"string\"},\"population\":{\"type\":\"integer\"}},\"required\":[\"name\","
                    "\"population\"]}") == 0);

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
    turn.stream = start_stream(turn.agent, turns[t].prompt);
    CHECK(turn.stream != NULL);
    PantoEvent ev = PANTO_EVENT_INIT;
    PantoStatus st;
    int repairs = 0, completes = 0;
    while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
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
    panto_stream_free(turn.stream);
    turn.stream = NULL;
  }
  /* The third kind (max_tokens) has its name too; its turn is tested in Go and Python. */
  CHECK(str_eq(panto_error_kind_name(PANTO_ERR_OUTPUT_TRUNCATED), "output_truncated"));
out:
  end_turn(&turn);
}

/* panto_event_to_json escapes U+2028 and U+2029 (against line-separators.json, whose
 * answer is "one\u2028two\u2029three"): raw they are valid JSON, but a reader that
 * splits lines on Unicode's line breaks would cut the event. The event's own fields
 * keep the characters. */
static void test_event_json_line_separators(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("line-separators.json"), "sk-c", "", "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  int completes = 0;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) {
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
  end_turn(&turn);
}

/* A caller built against ABI 1.0 allocates exactly PANTO_EVENT_SIZE_1_0 bytes (on the
 * heap here, so valgrind sees any byte written past them): a whole turn is delivered
 * into it. The size is a literal of 1.0, whatever later headers make of the struct. */
static void test_event_1_0_sized_caller(void) {
  Turn turn;
  PantoEvent *ev = NULL;
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  CHECK(PANTO_EVENT_SIZE_1_0 == 280);
  ev = (PantoEvent *)calloc(1, PANTO_EVENT_SIZE_1_0);
  CHECK(ev != NULL);
  ev->struct_size = PANTO_EVENT_SIZE_1_0;
  PantoStatus st;
  int events = 0;
  while ((st = panto_next_event(turn.stream, ev)) == PANTO_EVENT) {
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
  end_turn(&turn);
  free(ev);
}

/* A copy of an event kept past the next call is stale: panto_event_to_json refuses it,
 * instead of answering with the JSON of whatever event replaced it (the allocator
 * reuses the freed record's address for the next one). The current event still works. */
static void test_stale_event_copy(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT, first, second;
  PantoStr json;
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_MESSAGE_START);
  first = ev;
  CHECK(panto_event_to_json(&first, &json) == PANTO_OK);
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_BLOCK_START);
  second = ev;
  json.ptr = "x";
  CHECK(panto_event_to_json(&first, &json) == PANTO_ERROR);
  CHECK(json.ptr == NULL && json.len == 0);
  CHECK(panto_event_to_json(&second, &json) == PANTO_OK);
  CHECK(str_contains(json, "\"type\":\"block_start\""));
  /* The same kind twice in a row (content deltas): only the kind check would pass. */
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_EVENT && ev.kind == PANTO_EV_CONTENT_DELTA);
  PantoEvent delta = ev;
  PantoStatus st;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT && ev.kind != PANTO_EV_CONTENT_DELTA) {
  }
  CHECK(st == PANTO_EVENT && ev.kind == PANTO_EV_CONTENT_DELTA);
  CHECK(panto_event_to_json(&delta, &json) == PANTO_ERROR);
  CHECK(panto_event_to_json(&second, &json) == PANTO_ERROR);
  CHECK(panto_event_to_json(&ev, &json) == PANTO_OK);
  /* Exhausted: the last event's copy is stale too once DONE was returned. */
  PantoEvent last;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT) last = ev;
  CHECK(st == PANTO_DONE);
  CHECK(panto_event_to_json(&last, &json) == PANTO_ERROR);
out:
  end_turn(&turn);
}

/* ---- panto_next_events (ABI 1.3): batches ------------------------------------------ */

#define BATCH 3

/* Whether `fd` is readable within `timeout_ms`. */
static bool fd_readable(int fd, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

/* A whole turn in batches of at most BATCH gives the same events, in the same order, as
 * panto_next_event; every event of a batch stays valid (its strings and its JSON) until
 * the next call, which ends all of them at once; the batch that holds message_complete
 * says more (the end is next), and the call after it answers PANTO_DONE with nothing
 * filled. */
static void test_next_events_batches(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  uint32_t single[64];
  int nsingle = 0;
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event(turn.stream, &ev)) == PANTO_EVENT && nsingle < 64)
    single[nsingle++] = ev.kind;
  CHECK(st == PANTO_DONE);
  panto_stream_free(turn.stream);
  turn.stream = start_stream(turn.agent, "again");
  CHECK(turn.stream != NULL);

  PantoEvent batch[BATCH] = {PANTO_EVENT_INIT, PANTO_EVENT_INIT, PANTO_EVENT_INIT};
  PantoEvent kept[BATCH];
  size_t kept_n = 0, filled = 99;
  bool more = true, ended_with_complete = false;
  int nbatched = 0;
  for (;;) {
    st = panto_next_events(turn.stream, batch, BATCH, -1, &filled, &more);
    PantoStr json;
    /* The previous batch ended with this call. */
    for (size_t i = 0; i < kept_n; i++) CHECK(panto_event_to_json(&kept[i], &json) == PANTO_ERROR);
    if (st != PANTO_EVENT) break;
    CHECKF(filled >= 1 && filled <= BATCH, "filled %zu", filled);
    for (size_t i = 0; i < filled; i++) {
      CHECK(batch[i].struct_size == sizeof(PantoEvent));
      CHECK(nbatched < nsingle && batch[i].kind == single[nbatched]);
      nbatched++;
    }
    /* Every event of the batch is alive: its JSON, and a delta's text, read after the
     * whole batch was filled (memcheck sees a use after free). */
    for (size_t i = 0; i < filled; i++) {
      CHECK(panto_event_to_json(&batch[i], &json) == PANTO_OK && json.len > 0);
      if (batch[i].kind == PANTO_EV_CONTENT_DELTA)
        CHECK(batch[i].payload.content_delta.text.ptr[batch[i].payload.content_delta.text.len] == 0);
      kept[i] = batch[i];
    }
    kept_n = filled;
    ended_with_complete = batch[filled - 1].kind == PANTO_EV_MESSAGE_COMPLETE;
    if (ended_with_complete) CHECK(more);
  }
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(filled == 0 && !more && batch[0].kind == PANTO_EV_NONE);
  CHECK(ended_with_complete);
  CHECKF(nbatched == nsingle, "%d events in batches, %d one by one", nbatched, nsingle);
  CHECK(panto_next_events(turn.stream, batch, BATCH, 0, &filled, &more) == PANTO_DONE);
out:
  end_turn(&turn);
}

/* A partial batch: with the response held after "Hello", the batch that delivers it
 * cannot be full and says nothing more is ready; the readiness descriptor is then
 * unreadable (armed, as after PANTO_PENDING) and turns readable when the rest arrives. */
static void test_next_events_partial_batch_arms_readiness(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  int64_t fd = -1;
  CHECK(panto_stream_readiness_fd(turn.stream, &fd) == PANTO_OK && fd >= 0);
  StatWait held = {&turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  PantoEvent batch[8];
  for (int i = 0; i < 8; i++) batch[i] = (PantoEvent)PANTO_EVENT_INIT;
  size_t filled = 0;
  bool more = true, hello = false;
  while (!hello) {
    PantoStatus st = panto_next_events(turn.stream, batch, 8, 30000, &filled, &more);
    CHECKF(st == PANTO_EVENT, "status %d", st);
    CHECK(filled >= 1 && filled < 8);
    for (size_t i = 0; i < filled; i++)
      if (batch[i].kind == PANTO_EV_CONTENT_DELTA) {
        CHECK(str_eq(batch[i].payload.content_delta.text, "Hello"));
        CHECK(i == filled - 1);
        hello = true;
      }
  }
  CHECK(!more);
  CHECK(!fd_readable((int)fd, 0));
  size_t filled2 = 7;
  bool more2 = true;
  CHECK(panto_next_events(turn.stream, batch, 8, 0, &filled2, &more2) == PANTO_PENDING);
  CHECK(filled2 == 0 && !more2 && batch[0].kind == PANTO_EV_NONE);
  CHECK(server_open_gate(&turn.srv) == 0);
  CHECK(fd_readable((int)fd, 30000));
  PantoStatus st;
  bool complete = false;
  while ((st = panto_next_events(turn.stream, batch, 8, 30000, &filled, &more)) == PANTO_EVENT)
    complete = complete || batch[filled - 1].kind == PANTO_EV_MESSAGE_COMPLETE;
  CHECKF(st == PANTO_DONE, "status %d", st);
  CHECK(complete);
out:
  end_turn(&turn);
}

/* A failure after events: the batches deliver the events before it, the failure comes
 * alone in the call after them (never in a batch behind events), and repeats. */
static void test_next_events_error_after_events(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text-reset.json"), "sk-test", ",\"retry\":{\"max_retries\":0}",
                   "hi") == 0);
  PantoEvent batch[4];
  for (int i = 0; i < 4; i++) batch[i] = (PantoEvent)PANTO_EVENT_INIT;
  size_t filled = 0;
  bool more = false, hello = false;
  PantoStatus st;
  while ((st = panto_next_events(turn.stream, batch, 4, 30000, &filled, &more)) == PANTO_EVENT) {
    for (size_t i = 0; i < filled; i++) {
      CHECK(batch[i].kind != PANTO_EV_ERROR && batch[i].kind != PANTO_EV_NONE);
      if (batch[i].kind == PANTO_EV_CONTENT_DELTA) hello = true;
    }
  }
  CHECKF(st == PANTO_ERROR, "status %d", st);
  CHECK(hello);
  CHECK(filled == 0 && !more);
  CHECK(batch[0].kind == PANTO_EV_ERROR);
  uint32_t kind = batch[0].payload.error.kind;
  CHECKF(kind == PANTO_ERR_CONNECTION || kind == PANTO_ERR_INCOMPLETE, "kind %u", kind);
  CHECK(panto_next_events(turn.stream, batch, 4, 0, &filled, &more) == PANTO_ERROR);
  CHECK(batch[0].kind == PANTO_EV_ERROR && batch[0].payload.error.kind == kind);
out:
  end_turn(&turn);
}

/* A cancel between batches wins over whatever is ready: the next call fails cancelled
 * with nothing filled. */
static void test_next_events_cancel_between_batches(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent batch[2] = {PANTO_EVENT_INIT, PANTO_EVENT_INIT};
  size_t filled = 0;
  bool more = false;
  CHECK(panto_next_events(turn.stream, batch, 2, 30000, &filled, &more) == PANTO_EVENT);
  CHECK(filled >= 1 && batch[0].kind == PANTO_EV_MESSAGE_START);
  CHECK(panto_stream_cancel(turn.stream) == PANTO_OK);
  CHECK(panto_next_events(turn.stream, batch, 2, 30000, &filled, &more) == PANTO_ERROR);
  CHECK(filled == 0 && !more);
  CHECK(batch[0].kind == PANTO_EV_ERROR && batch[0].payload.error.kind == PANTO_ERR_CANCELLED);
out:
  end_turn(&turn);
}

/* Misuse: nowhere to say how many (NULL filled or more), no room, an event without its
 * struct_size: PANTO_ERROR, nothing written to the events; a NULL stream: the config
 * error in events[0]. */
static void test_next_events_arguments(void) {
  Turn turn;
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent batch[2] = {PANTO_EVENT_INIT, PANTO_EVENT_INIT};
  size_t filled = 5;
  bool more = true;
  CHECK(panto_next_events(turn.stream, batch, 2, 0, NULL, &more) == PANTO_ERROR);
  CHECK(panto_next_events(turn.stream, batch, 2, 0, &filled, NULL) == PANTO_ERROR);
  CHECK(filled == 5 && more);
  CHECK(panto_next_events(turn.stream, batch, 0, 0, &filled, &more) == PANTO_ERROR);
  CHECK(filled == 0 && !more);
  CHECK(batch[0].kind == PANTO_EV_NONE && batch[0]._private == NULL);
  PantoEvent garbage[1];
  memset(garbage, 0xab, sizeof garbage);
  CHECK(panto_next_events(turn.stream, garbage, 1, 0, &filled, &more) == PANTO_ERROR);
  CHECK(garbage[0].kind == 0xabababab);
  CHECK(panto_next_events(NULL, batch, 2, 0, &filled, &more) == PANTO_ERROR);
  CHECK(filled == 0 && batch[0].kind == PANTO_EV_ERROR &&
        batch[0].payload.error.kind == PANTO_ERR_CONFIG);
  /* The stream was not touched: the whole turn is still there. */
  CHECK(drain(turn.stream, NULL) == PANTO_DONE);
out:
  end_turn(&turn);
}


static const TestCase TESTS[] = {
    {"abi_version", test_abi_version},
    {"host_tool_turn", test_host_tool_turn},
    {"pending_from_timeout", test_pending_from_timeout},
    {"unreported_usage", test_unreported_usage},
    {"structured_output", test_structured_output},
    {"event_json_line_separators", test_event_json_line_separators},
    {"event_1_0_sized_caller", test_event_1_0_sized_caller},
    {"stale_event_copy", test_stale_event_copy},
    {"next_events_batches", test_next_events_batches},
    {"next_events_partial_batch_arms_readiness", test_next_events_partial_batch_arms_readiness},
    {"next_events_error_after_events", test_next_events_error_after_events},
    {"next_events_cancel_between_batches", test_next_events_cancel_between_batches},
    {"next_events_arguments", test_next_events_arguments},
};
const TestSuite TURN_TESTS = {"test_turn.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
