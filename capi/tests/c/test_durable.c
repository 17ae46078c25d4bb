/* C tests of durable turns (ABI 1.3): deferred calls (approval, rejection, external
 * results, the defer_tools option), checkpoints resumed in a new agent, steering a turn
 * during a host-tool call, undelivered steering, and hostile checkpoints. Against the
 * shared scenario demo-weather.json (a call weather({"city":"Paris"}) as call_1, then —
 * once a request carries call_1's result — a text answer), so a request the checkpoint
 * already answered would find the scenario exhausted. Linked into test_capi (its main
 * runs DURABLE_TESTS). durable_docs_example runs docs/durable-turns.md's C example. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "panto.h"

#define TOOL_WEATHER(flags)                                                              \
  ",\"retry\":{\"max_retries\":0},\"tools\":[{\"name\":\"weather\",\"parameters\":"   \
  "{\"type\":\"object\"}" flags "}]"

/* The agents' API key: a checkpoint must not contain it. */
#define KEY "sk-durable"

/* What a drained stream showed. */
typedef struct Seen {
  PantoStatus status;
  int host_calls;          /* tool_call_start with host set (answered "sunny") */
  int steering;            /* steering_delivered events */
  int steering_before_2nd; /* steering_delivered seen before the 2nd message_start */
  int message_starts;
  char stop_reason[32];
  char text[128];
  char deferred[512];
  char tool_output[128];
  bool tool_is_error;
  uint32_t messages;
  uint64_t input_tokens;
  char steered_text[64];
} Seen;

static void copy(char *dst, size_t cap, PantoStr s) {
  size_t n = s.len < cap - 1 ? s.len : cap - 1;
  if (s.ptr) memcpy(dst, s.ptr, n);
  dst[s.ptr ? n : 0] = 0;
}

/* Drains `stream` to its end, answering host calls "sunny" (unless `answer` is false),
 * calling `on_host` (if set) when a host call starts. */
static Seen drain_stream(PantoStream *stream, bool answer, void (*on_host)(PantoStream *, void *),
                         void *arg) {
  Seen seen;
  memset(&seen, 0, sizeof seen);
  PantoEvent ev = PANTO_EVENT_INIT;
  while ((seen.status = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    switch (ev.kind) {
    case PANTO_EV_MESSAGE_START: seen.message_starts++; break;
    case PANTO_EV_TOOL_CALL_START:
      if (!ev.payload.tool_call_start.host) break;
      seen.host_calls++;
      if (on_host) on_host(stream, arg);
      if (answer) {
        PantoStr id = ev.payload.tool_call_start.call_id;
        if (panto_stream_submit_tool_result(stream, id.ptr, id.len, "sunny", 5, false, NULL) !=
            PANTO_OK)
          seen.status = PANTO_ERROR;
      }
      break;
    case PANTO_EV_TOOL_RESULT:
      copy(seen.tool_output, sizeof seen.tool_output, ev.payload.tool_result.output);
      seen.tool_is_error = ev.payload.tool_result.is_error;
      break;
    case PANTO_EV_STEERING_DELIVERED:
      seen.steering++;
      if (seen.message_starts < 2) seen.steering_before_2nd++;
      copy(seen.steered_text, sizeof seen.steered_text, ev.payload.steering_delivered.text);
      break;
    case PANTO_EV_MESSAGE_COMPLETE: {
      PantoMessageComplete *m = &ev.payload.message_complete;
      copy(seen.stop_reason, sizeof seen.stop_reason, m->stop_reason);
      copy(seen.text, sizeof seen.text, m->text);
      copy(seen.deferred, sizeof seen.deferred, m->deferred);
      seen.messages = m->messages;
      seen.input_tokens = m->usage.input_tokens;
      break;
    }
    default: break;
    }
  }
  if (seen.status == PANTO_ERROR) {
    PantoStr m = ev.payload.error.message;
    fprintf(stderr, "stream failed: %.*s\n", (int)m.len, m.ptr ? m.ptr : "");
  }
  return seen;
}

/* The checkpoint of `stream` as a malloc'd C string (NULL if none). */
static char *checkpoint_of(PantoStream *stream) {
  PantoString cp = {NULL, 0};
  if (panto_stream_checkpoint(stream, &cp, NULL) != PANTO_OK) return NULL;
  char *copy = strndup(cp.ptr, cp.len);
  panto_string_free(&cp);
  return copy;
}

/* Requests the server answered so far (GET /_panto/requests lists them). */
static int chat_requests(const TestServer *srv, const char *needle, bool *found) {
  static char body[1 << 20];
  if (server_request(srv, "GET", "/_panto/requests", body, sizeof body) != 200) return -1;
  int n = 0;
  for (const char *p = body; (p = strstr(p, "/v1/chat/completions")) != NULL; p++) n++;
  if (found) *found = needle && strstr(body, needle) != NULL;
  return n;
}

static PantoStream *resume(PantoAgent *agent, const char *checkpoint, const char *answers,
                           PantoError **err) {
  PantoStream *stream = NULL;
  if (panto_agent_resume(agent, checkpoint, strlen(checkpoint), answers,
                         answers ? strlen(answers) : 0, &stream, err) != PANTO_OK)
    return NULL;
  return stream;
}

/* The first stream of a test: "Weather in Paris?" drained to its end. */
static Seen first_turn(PantoAgent *agent, const char *options, char **checkpoint) {
  Seen seen;
  memset(&seen, 0, sizeof seen);
  seen.status = PANTO_ERROR;
  PantoStream *stream = NULL;
  const char *in = "Weather in Paris?";
  if (panto_agent_stream_with(agent, in, strlen(in), options, options ? strlen(options) : 0,
                              &stream, NULL) != PANTO_OK)
    return seen;
  seen = drain_stream(stream, true, NULL, NULL);
  *checkpoint = checkpoint_of(stream);
  panto_stream_free(stream);
  return seen;
}

/* A tool with needs_approval pauses the turn (stop reason deferred, the call listed);
 * approved on resume, it arrives as a host call and the turn completes, the first
 * response never requested again. */
static void test_durable_approve(void) {
  Turn turn;
  char *cp = NULL;
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER(",\"needs_approval\":true")) == 0);
  Seen first = first_turn(turn.agent, NULL, &cp);
  CHECK(first.status == PANTO_DONE);
  CHECKF(strcmp(first.stop_reason, "deferred") == 0, "%s", first.stop_reason);
  CHECK(first.host_calls == 0); /* not run before approval */
  CHECKF(strstr(first.deferred, "\"call_id\":\"call_1\"") &&
             strstr(first.deferred, "\"reason\":\"approval\"") &&
             strstr(first.deferred, "\"city\":\"Paris\""),
         "%s", first.deferred);
  CHECK(cp != NULL && strstr(cp, "\"panto_checkpoint\":1") != NULL);
  CHECK(strstr(cp, KEY) == NULL); /* no secret in a checkpoint */
  CHECK(chat_requests(&turn.srv, NULL, NULL) == 1);

  turn.stream = resume(turn.agent, cp, "{\"call_1\":{\"approve\":true}}", NULL);
  CHECK(turn.stream != NULL);
  Seen done = drain_stream(turn.stream, true, NULL, NULL);
  CHECK(done.status == PANTO_DONE);
  CHECK(done.host_calls == 1);
  CHECKF(strcmp(done.stop_reason, "end_turn") == 0, "%s", done.stop_reason);
  CHECKF(strcmp(done.text, "It is 18°C and sunny in Paris.") == 0, "%s", done.text);
  CHECK(done.deferred[0] == 0);
  CHECK(done.messages == 2);             /* the whole turn */
  CHECK(done.input_tokens == 61 + 92);   /* usage of every step */
  bool answered = false;
  CHECK(chat_requests(&turn.srv, "sunny", &answered) == 2 && answered);
out:
  free(cp);
  end_turn(&turn);
}

/* Rejected on resume, the call does not run: the model reads an error result with the
 * reason. */
static void test_durable_reject(void) {
  Turn turn;
  char *cp = NULL;
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER(",\"needs_approval\":true")) == 0);
  Seen first = first_turn(turn.agent, NULL, &cp);
  CHECK(first.status == PANTO_DONE && strcmp(first.stop_reason, "deferred") == 0 && cp);
  turn.stream = resume(turn.agent, cp, "{\"call_1\":{\"reject\":\"not on weekends\"}}", NULL);
  CHECK(turn.stream != NULL);
  Seen done = drain_stream(turn.stream, true, NULL, NULL);
  CHECK(done.status == PANTO_DONE);
  CHECK(done.host_calls == 0);
  CHECK(strcmp(done.stop_reason, "end_turn") == 0);
  /* The next request carries the rejection as call_1's error result. */
  bool sent = false;
  CHECK(chat_requests(&turn.srv, "not on weekends", &sent) == 2 && sent);
out:
  free(cp);
  end_turn(&turn);
}

/* An external tool's result is given on resume (and is what the model reads); so is a
 * call the defer_tools option deferred. */
static void test_durable_external_and_defer_tools(void) {
  Turn turn;
  char *cp = NULL;
  PantoError *err = NULL;
  const char *variants[][3] = {
      {TOOL_WEATHER(",\"external\":true"), NULL, "external"},
      {TOOL_WEATHER(""), "{\"defer_tools\":true}", "deferred"},
  };
  for (size_t i = 0; i < 2; i++) {
    CHECK(start_agent(&turn, demo_scenario, KEY, variants[i][0]) == 0);
    Seen first = first_turn(turn.agent, variants[i][1], &cp);
    CHECK(first.status == PANTO_DONE && strcmp(first.stop_reason, "deferred") == 0 && cp);
    char reason[64];
    snprintf(reason, sizeof reason, "\"reason\":\"%s\"", variants[i][2]);
    CHECKF(strstr(first.deferred, reason) != NULL, "%s", first.deferred);
    CHECK(first.host_calls == 0);
    /* An answer for a call that is not deferred is a config error, nothing started. */
    CHECK(resume(turn.agent, cp, "{\"call_9\":{\"output\":\"x\"}}", &err) == NULL);
    CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
    panto_error_free(err);
    err = NULL;
    turn.stream = resume(turn.agent, cp, "{\"call_1\":{\"output\":\"drizzle, 12C\"}}", NULL);
    CHECK(turn.stream != NULL);
    Seen done = drain_stream(turn.stream, true, NULL, NULL);
    CHECKF(done.status == PANTO_DONE && strcmp(done.stop_reason, "end_turn") == 0, "%s",
           done.stop_reason);
    CHECK(done.host_calls == 0);
    bool sent = false;
    CHECK(chat_requests(&turn.srv, "drizzle, 12C", &sent) == 2 && sent);
    free(cp);
    cp = NULL;
    end_turn(&turn);
  }
  return;
out:
  panto_error_free(err);
  free(cp);
  end_turn(&turn);
}

/* A checkpoint taken when the host call starts (the first response complete), the
 * stream and agent freed unanswered; a new agent resumes it: the call runs again
 * (at-least-once), the first response is not requested again, and the turn reports
 * both steps. */
static void save_checkpoint(PantoStream *stream, void *arg) {
  char **cp = arg;
  if (*cp == NULL) *cp = checkpoint_of(stream);
}

static void test_durable_resume_in_new_agent(void) {
  Turn turn;
  PantoAgent *again = NULL;
  char *cp = NULL;
  PantoString history = {NULL, 0};
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER("")) == 0);
  const char *in = "Weather in Paris?";
  CHECK(panto_agent_stream(turn.agent, in, strlen(in), &turn.stream, NULL) == PANTO_OK);
  PantoEvent ev = PANTO_EVENT_INIT;
  while (cp == NULL && panto_next_event(turn.stream, &ev) == PANTO_EVENT)
    if (ev.kind == PANTO_EV_TOOL_CALL_START) save_checkpoint(turn.stream, &cp);
  CHECK(cp != NULL);
  CHECK(strstr(cp, "call_1") != NULL);
  panto_stream_free(turn.stream); /* the process "dies": nothing answered */
  turn.stream = NULL;
  panto_agent_free(turn.agent);
  turn.agent = NULL;
  CHECK(chat_requests(&turn.srv, NULL, NULL) == 1);

  again = new_agent(&turn.srv, KEY, TOOL_WEATHER(""));
  CHECK(again != NULL);
  turn.stream = resume(again, cp, NULL, NULL);
  CHECK(turn.stream != NULL);
  Seen done = drain_stream(turn.stream, true, NULL, NULL);
  CHECK(done.status == PANTO_DONE);
  CHECK(done.host_calls == 1); /* the call with no result runs again */
  CHECK(done.message_starts == 1);
  CHECK(strcmp(done.text, "It is 18°C and sunny in Paris.") == 0);
  CHECK(done.messages == 2 && done.input_tokens == 61 + 92);
  CHECK(chat_requests(&turn.srv, NULL, NULL) == 2); /* no repeated request */
  /* The history is the whole turn: user, assistant call, tool result, answer. */
  CHECK(panto_agent_save_history(again, &history, NULL) == PANTO_OK);
  CHECK(strstr(history.ptr, "Weather in Paris?") && strstr(history.ptr, "sunny") &&
        strstr(history.ptr, "It is 18°C and sunny in Paris."));
out:
  panto_string_free(&history);
  free(cp);
  panto_agent_free(again);
  end_turn(&turn);
}

/* Steering from another thread while a host call runs: delivered after the tool
 * result, before the next request, which carries it. After the end, steering is an
 * error and nothing was left undelivered. */
typedef struct Steer {
  PantoStream *stream;
  PantoStatus status;
  const char *input;
  const char *input_json;
} Steer;

static void *steer_thread(void *arg) {
  Steer *s = arg;
  s->status = panto_stream_steer(s->stream, s->input, strlen(s->input), s->input_json,
                                 s->input_json ? strlen(s->input_json) : 0, NULL);
  return NULL;
}

static void steer_from_thread(PantoStream *stream, void *arg) {
  Steer *s = arg;
  s->stream = stream;
  pthread_t t;
  if (pthread_create(&t, NULL, steer_thread, s) != 0) return;
  pthread_join(t, NULL);
}

static void test_durable_steer_during_host_tool(void) {
  Turn turn;
  PantoString left = {NULL, 0};
  PantoError *err = NULL;
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER("")) == 0);
  const char *in = "Weather in Paris?";
  CHECK(panto_agent_stream(turn.agent, in, strlen(in), &turn.stream, NULL) == PANTO_OK);
  Steer steer = {NULL, PANTO_ERROR, "", "[\"And in Rome?\"]"};
  Seen done = drain_stream(turn.stream, true, steer_from_thread, &steer);
  CHECK(steer.status == PANTO_OK);
  CHECK(done.status == PANTO_DONE);
  CHECK(done.steering == 1 && done.steering_before_2nd == 1);
  CHECKF(strcmp(done.steered_text, "And in Rome?") == 0, "%s", done.steered_text);
  bool carried = false;
  CHECK(chat_requests(&turn.srv, "And in Rome?", &carried) == 2 && carried);
  /* The turn is over: steering fails, the input stays the caller's. */
  CHECK(panto_stream_steer(turn.stream, "late", 4, NULL, 0, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  /* Text and input_json together, and bad JSON, are config errors too. */
  CHECK(panto_stream_steer(turn.stream, "x", 1, "\"y\"", 3, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_stream_take_undelivered(turn.stream, &left, NULL) == PANTO_OK);
  CHECKF(strcmp(left.ptr, "[]") == 0, "%s", left.ptr);
out:
  panto_string_free(&left);
  panto_error_free(err);
  end_turn(&turn);
}

/* A message steered into a turn that is then cancelled is given back, once. */
static void steer_then_cancel(PantoStream *stream, void *arg) {
  Steer *s = arg;
  s->status = panto_stream_steer(stream, s->input, strlen(s->input), NULL, 0, NULL);
  panto_stream_cancel(stream);
}

static void test_durable_undelivered_after_cancel(void) {
  Turn turn;
  PantoString left = {NULL, 0};
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER("")) == 0);
  const char *in = "Weather in Paris?";
  CHECK(panto_agent_stream(turn.agent, in, strlen(in), &turn.stream, NULL) == PANTO_OK);
  Steer steer = {NULL, PANTO_ERROR, "never mind", NULL};
  Seen done = drain_stream(turn.stream, false, steer_then_cancel, &steer);
  CHECK(steer.status == PANTO_OK);
  CHECK(done.status == PANTO_ERROR && done.steering == 0);
  CHECK(panto_stream_take_undelivered(turn.stream, &left, NULL) == PANTO_OK);
  CHECKF(strcmp(left.ptr, "[[{\"text\":\"never mind\",\"type\":\"text\"}]]") == 0, "%s",
         left.ptr);
  panto_string_free(&left);
  CHECK(panto_stream_take_undelivered(turn.stream, &left, NULL) == PANTO_OK);
  CHECK(strcmp(left.ptr, "[]") == 0); /* given once */
out:
  panto_string_free(&left);
  end_turn(&turn);
}

/* Hostile checkpoints and answers are PANTO_ERR_CONFIG naming the problem, with nothing
 * started; so are the argument errors. */
static void test_durable_hostile_checkpoints(void) {
  Turn turn;
  PantoError *err = NULL;
  char *cp = NULL;
  PantoString none = {NULL, 0};
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER(",\"needs_approval\":true")) == 0);
  Seen first = first_turn(turn.agent, NULL, &cp);
  CHECK(first.status == PANTO_DONE && cp != NULL);
  size_t half = strlen(cp) / 2;
  char truncated[4096];
  snprintf(truncated, sizeof truncated, "%.*s", (int)half, cp);
  char newer[8192];
  const char *v = strstr(cp, "\"panto_checkpoint\":1");
  CHECK(v != NULL);
  snprintf(newer, sizeof newer, "%.*s\"panto_checkpoint\":99%s", (int)(v - cp), cp,
           v + strlen("\"panto_checkpoint\":1"));
  const struct {
    const char *checkpoint, *answers, *says;
  } cases[] = {
      {"garbage", NULL, "checkpoint"},
      {"{}", NULL, "not a panto checkpoint"},
      {"[1,2]", NULL, "checkpoint"},
      {truncated, NULL, "checkpoint"},
      {newer, NULL, "newer"},
      {cp, "{", "answers"},
      {cp, "[]", "answers"},
      {cp, "{\"call_1\":{\"approve\":false}}", "answers.call_1"},
      {cp, "{\"call_1\":{\"output\":\"x\"}}", "call_1"}, /* a result for an approval */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    turn.stream = resume(turn.agent, cases[i].checkpoint, cases[i].answers, &err);
    CHECKF(turn.stream == NULL, "case %zu", i);
    CHECKF(panto_error_kind(err) == PANTO_ERR_CONFIG, "case %zu: kind %u", i,
           panto_error_kind(err));
    PantoStr m = panto_error_message(err);
    CHECKF(str_contains(m, cases[i].says), "case %zu: %.*s", i, (int)m.len, m.ptr);
    panto_error_free(err);
    err = NULL;
  }
  CHECK(chat_requests(&turn.srv, NULL, NULL) == 1); /* nothing was sent */
  /* Arguments: NULL checkpoint, agent, out; invalid UTF-8. */
  CHECK(panto_agent_resume(turn.agent, NULL, 0, NULL, 0, &turn.stream, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_agent_resume(NULL, cp, strlen(cp), NULL, 0, &turn.stream, NULL) == PANTO_ERROR);
  CHECK(panto_agent_resume(turn.agent, cp, strlen(cp), NULL, 0, NULL, NULL) == PANTO_ERROR);
  CHECK(panto_agent_resume(turn.agent, "\xff", 1, NULL, 0, &turn.stream, &err) == PANTO_ERROR);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG && turn.stream == NULL);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_stream_checkpoint(NULL, &none, &err) == PANTO_ERROR && none.ptr == NULL);
  CHECK(panto_error_kind(err) == PANTO_ERR_CONFIG);
  panto_error_free(err);
  err = NULL;
  CHECK(panto_stream_steer(NULL, "x", 1, NULL, 0, NULL) == PANTO_ERROR);
  CHECK(panto_stream_take_undelivered(NULL, &none, NULL) == PANTO_ERROR);
  /* A tool can not be both external and need approval. */
  CHECK(new_agent(&turn.srv, KEY, TOOL_WEATHER(",\"needs_approval\":true,\"external\":true")) ==
        NULL);
  /* The valid checkpoint still resumes after all that. */
  turn.stream = resume(turn.agent, cp, "{\"call_1\":{\"approve\":true}}", NULL);
  CHECK(turn.stream != NULL);
  Seen done = drain_stream(turn.stream, true, NULL, NULL);
  CHECK(done.status == PANTO_DONE && strcmp(done.stop_reason, "end_turn") == 0);
out:
  panto_error_free(err);
  free(cp);
  end_turn(&turn);
}

/* docs/durable-turns.md's C example, line for line (its body): a call of a tool that
 * needs approval pauses the turn; the checkpoint, resumed by another agent with the call
 * approved, runs it and finishes the turn. 0 with the answer in `answer`, else 1. */
static int approve_later(PantoAgent *agent, PantoAgent *later, char *answer, size_t cap) {
  const char *prompt = "Weather in Paris?";
  PantoStream *stream;
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  if (panto_agent_stream(agent, prompt, strlen(prompt), &stream, NULL) != PANTO_OK) return 1;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_MESSAGE_COMPLETE && ev.payload.message_complete.deferred.ptr) {
      PantoStr calls = ev.payload.message_complete.deferred; /* [{"call_id": …, "name": …}] */
      printf("paused for %.*s\n", (int)calls.len, calls.ptr);
    }
  }
  /* The paused turn's checkpoint: JSON text, to store anywhere (a file, a database). */
  PantoString saved = {NULL, 0};
  if (st == PANTO_DONE) st = panto_stream_checkpoint(stream, &saved, NULL);
  panto_stream_free(stream);
  if (st != PANTO_OK) return 1;

  /* Later, in any process, with an agent that has the same tools: */
  const char *answers = "{\"call_1\": {\"approve\": true}}";
  st = panto_agent_resume(later, saved.ptr, saved.len, answers, strlen(answers), &stream, NULL);
  panto_string_free(&saved);
  if (st != PANTO_OK) return 1;
  while ((st = panto_next_event(stream, &ev)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_TOOL_CALL_START && ev.payload.tool_call_start.host) {
      PantoStr id = ev.payload.tool_call_start.call_id; /* approved: it runs now */
      panto_stream_submit_tool_result(stream, id.ptr, id.len, "sunny", 5, false, NULL);
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      PantoStr text = ev.payload.message_complete.text;
      snprintf(answer, cap, "%.*s", (int)text.len, text.ptr);
    }
  }
  panto_stream_free(stream);
  return st == PANTO_DONE ? 0 : 1;
}

static void test_durable_docs_example(void) {
  Turn turn;
  PantoAgent *later = NULL;
  CHECK(start_agent(&turn, demo_scenario, KEY, TOOL_WEATHER(",\"needs_approval\":true")) == 0);
  later = new_agent(&turn.srv, KEY, TOOL_WEATHER(",\"needs_approval\":true"));
  CHECK(turn.agent != NULL && later != NULL);
  char answer[128] = "";
  CHECK(approve_later(turn.agent, later, answer, sizeof answer) == 0);
  CHECKF(strcmp(answer, "It is 18°C and sunny in Paris.") == 0, "%s", answer);
  bool answered = false;
  CHECK(chat_requests(&turn.srv, "sunny", &answered) == 2 && answered); /* no repeated request */
out:
  panto_agent_free(later);
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"durable_approve", test_durable_approve},
    {"durable_reject", test_durable_reject},
    {"durable_external_and_defer_tools", test_durable_external_and_defer_tools},
    {"durable_resume_in_new_agent", test_durable_resume_in_new_agent},
    {"durable_steer_during_host_tool", test_durable_steer_during_host_tool},
    {"durable_undelivered_after_cancel", test_durable_undelivered_after_cancel},
    {"durable_hostile_checkpoints", test_durable_hostile_checkpoints},
    {"durable_docs_example", test_durable_docs_example},
};
const TestSuite DURABLE_TESTS = {"test_durable.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
