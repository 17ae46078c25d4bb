/*
 * conformance.c — the conformance runner for C: runs one turn described on the command
 * line and prints its trace, one JSON line per event, then the error line if the turn
 * failed. Every line is built here from the PantoEvent struct fields (never from
 * panto_event_to_json), so the trace tests the header's layout and constants.
 * scripts/conformance.sh compares it with the scenario's golden trace; the arguments,
 * shared by every language's runner, are described in tests/conformance/README.md.
 *
 *   conformance --config JSON (--prompt TEXT | --input PARTS) [--cancel-after K]
 *               [--answer NAME DELAY_MS IS_ERROR OUTPUT | --answer-parts NAME DELAY_MS
 *                IS_ERROR PARTS]... [--resume (end | K) ANSWERS] [--after-resume NAME]...
 *               [--steer-during NAME TEXT]
 *
 * --input goes to panto_agent_stream_with as options {"input": PARTS}; --answer-parts
 * answers with panto_stream_submit_tool_result_parts. With --resume, the runner takes
 * panto_stream_checkpoint when the turn ends, or right after event K (then cancels that
 * turn and prints no more of it), prints {"runner":"resume"}, and continues the
 * checkpoint with panto_agent_resume on a new agent of the same configuration, with
 * ANSWERS as its answers_json. --steer-during calls panto_stream_steer when the first
 * turn calls host tool NAME, before answering it.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "panto.h"

#define MAX_ANSWERS 16

typedef struct {
  const char *name;
  long delay_ms; /* < 0: never answered */
  int is_error;
  const char *output; /* the output, or with `parts` the parts as JSON */
  int parts;
} Answer;

/* Answers the call with `a`: its output, or its parts. */
static PantoStatus submit(PantoStream *stream, const char *id, size_t id_len, const Answer *a,
                          PantoError **err) {
  if (a->parts)
    return panto_stream_submit_tool_result_parts(stream, id, id_len, a->output, strlen(a->output),
                                                 a->is_error, err);
  return panto_stream_submit_tool_result(stream, id, id_len, a->output, strlen(a->output),
                                         a->is_error, err);
}

/* ---- JSON output from struct fields ---------------------------------------------- */

static void put_str(PantoStr s) {
  putchar('"');
  for (size_t i = 0; i < s.len; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (c == '"' || c == '\\') {
      putchar('\\');
      putchar(c);
    } else if (c == '\n') {
      fputs("\\n", stdout);
    } else if (c == '\r') {
      fputs("\\r", stdout);
    } else if (c == '\t') {
      fputs("\\t", stdout);
    } else if (c < 0x20) {
      printf("\\u%04x", c);
    } else {
      putchar(c); /* UTF-8 passes through: the library guarantees valid UTF-8 */
    }
  }
  putchar('"');
}

static void put_key_str(const char *key, PantoStr s) {
  printf(",\"%s\":", key);
  put_str(s);
}

static void put_key_u(const char *key, unsigned long long v) { printf(",\"%s\":%llu", key, v); }

static void put_key_bool(const char *key, bool v) { printf(",\"%s\":%s", key, v ? "true" : "false"); }

/* A PantoStr holding JSON text, written as the JSON value it is. */
static void put_key_raw(const char *key, PantoStr s) {
  printf(",\"%s\":", key);
  if (s.ptr == NULL)
    fputs("null", stdout);
  else
    fwrite(s.ptr, 1, s.len, stdout);
}

static void put_usage(PantoUsage u) {
  printf(",\"usage\":{\"input_tokens\":%llu,\"output_tokens\":%llu,\"cache_read_tokens\":%llu,"
         "\"cache_write_tokens\":%llu,\"reasoning_tokens\":%llu,\"reported\":%s}",
         (unsigned long long)u.input_tokens, (unsigned long long)u.output_tokens,
         (unsigned long long)u.cache_read_tokens, (unsigned long long)u.cache_write_tokens,
         (unsigned long long)u.reasoning_tokens, u.reported ? "true" : "false");
}

static const char *block_kind(uint32_t kind) {
  switch (kind) {
    case PANTO_BLOCK_TEXT: return "text";
    case PANTO_BLOCK_REASONING: return "reasoning";
    case PANTO_BLOCK_TOOL_CALL: return "tool_call";
    default: return "unknown";
  }
}

static const char *delta_kind(uint32_t kind) {
  switch (kind) {
    case PANTO_DELTA_TEXT: return "text";
    case PANTO_DELTA_REASONING: return "reasoning";
    case PANTO_DELTA_TOOL_ARGS: return "tool_args";
    default: return "unknown";
  }
}

static const char *error_kind(uint32_t kind) {
  static const char *const names[] = {
      [PANTO_ERR_CONFIG] = "config",         [PANTO_ERR_AUTHENTICATION] = "authentication",
      [PANTO_ERR_PERMISSION] = "permission", [PANTO_ERR_NOT_FOUND] = "not_found",
      [PANTO_ERR_BAD_REQUEST] = "bad_request", [PANTO_ERR_RATE_LIMITED] = "rate_limited",
      [PANTO_ERR_SERVER] = "server",         [PANTO_ERR_CONNECTION] = "connection",
      [PANTO_ERR_TIMEOUT] = "timeout",       [PANTO_ERR_PROTOCOL] = "protocol",
      [PANTO_ERR_PROVIDER] = "provider",     [PANTO_ERR_CANCELLED] = "cancelled",
      [PANTO_ERR_BUSY] = "busy",             [PANTO_ERR_TOOL] = "tool",
      [PANTO_ERR_INCOMPLETE] = "incomplete", [PANTO_ERR_INTERNAL] = "internal",
      [PANTO_ERR_OUTPUT_INVALID] = "output_invalid", [PANTO_ERR_OUTPUT_REFUSED] = "output_refused",
      [PANTO_ERR_OUTPUT_TRUNCATED] = "output_truncated",
  };
  if (kind < sizeof names / sizeof names[0] && names[kind] != NULL) return names[kind];
  return "unknown";
}

static void put_block_content(const PantoBlockComplete *b) {
  fputs(",\"content\":{", stdout);
  switch (b->content_type) {
    case PANTO_CONTENT_TEXT:
      fputs("\"type\":\"text\"", stdout);
      put_key_str("text", b->text);
      break;
    case PANTO_CONTENT_REASONING:
      fputs("\"type\":\"reasoning\"", stdout);
      put_key_str("text", b->text);
      if (b->signature.ptr != NULL) put_key_str("signature", b->signature);
      break;
    case PANTO_CONTENT_REDACTED_REASONING:
      fputs("\"type\":\"redacted_reasoning\"", stdout);
      put_key_str("data", b->text);
      break;
    case PANTO_CONTENT_TOOL_CALL:
      fputs("\"type\":\"tool_call\"", stdout);
      put_key_str("call_id", b->call_id);
      put_key_str("name", b->name);
      if (b->arguments.ptr != NULL)
        put_key_raw("arguments", b->arguments);
      else
        put_key_str("arguments_raw", b->arguments_raw);
      break;
    default:
      fputs("\"type\":\"unknown\"", stdout);
  }
  putchar('}');
}

static void print_event(const PantoEvent *ev) {
  switch (ev->kind) {
    case PANTO_EV_MESSAGE_START: {
      const PantoMessageStart *e = &ev->payload.message_start;
      fputs("{\"type\":\"message_start\"", stdout);
      put_key_u("message", e->message);
      put_key_str("model", e->model);
      if (e->response_id.ptr != NULL) put_key_str("response_id", e->response_id);
      break;
    }
    case PANTO_EV_BLOCK_START: {
      const PantoBlockStart *e = &ev->payload.block_start;
      fputs("{\"type\":\"block_start\"", stdout);
      put_key_u("message", e->message);
      put_key_u("block", e->block);
      printf(",\"kind\":\"%s\"", block_kind(e->kind));
      break;
    }
    case PANTO_EV_CONTENT_DELTA: {
      const PantoContentDelta *e = &ev->payload.content_delta;
      fputs("{\"type\":\"content_delta\"", stdout);
      put_key_u("message", e->message);
      put_key_u("block", e->block);
      printf(",\"kind\":\"%s\"", delta_kind(e->kind));
      put_key_str("text", e->text);
      break;
    }
    case PANTO_EV_TOOL_DETAILS: {
      const PantoToolDetails *e = &ev->payload.tool_details;
      fputs("{\"type\":\"tool_details\"", stdout);
      put_key_u("message", e->message);
      put_key_u("block", e->block);
      put_key_str("call_id", e->call_id);
      put_key_str("name", e->name);
      break;
    }
    case PANTO_EV_BLOCK_COMPLETE: {
      const PantoBlockComplete *e = &ev->payload.block_complete;
      fputs("{\"type\":\"block_complete\"", stdout);
      put_key_u("message", e->message);
      put_key_u("block", e->block);
      put_block_content(e);
      break;
    }
    case PANTO_EV_MESSAGE_END: {
      const PantoMessageEnd *e = &ev->payload.message_end;
      fputs("{\"type\":\"message_end\"", stdout);
      put_key_u("message", e->message);
      put_key_str("stop_reason", e->stop_reason);
      put_usage(e->usage);
      break;
    }
    case PANTO_EV_TOOL_CALL_START: {
      const PantoToolCallStart *e = &ev->payload.tool_call_start;
      fputs("{\"type\":\"tool_call_start\"", stdout);
      put_key_u("message", e->message);
      put_key_str("call_id", e->call_id);
      put_key_str("name", e->name);
      put_key_raw("arguments", e->arguments);
      if (e->arguments_raw.ptr != NULL) put_key_str("arguments_raw", e->arguments_raw);
      put_key_bool("host", e->host);
      break;
    }
    case PANTO_EV_TOOL_RESULT: {
      const PantoToolResult *e = &ev->payload.tool_result;
      fputs("{\"type\":\"tool_result\"", stdout);
      put_key_u("message", e->message);
      put_key_str("call_id", e->call_id);
      put_key_str("name", e->name);
      put_key_str("output", e->output);
      put_key_bool("is_error", e->is_error);
      if (e->parts.ptr != NULL) put_key_raw("parts", e->parts);
      break;
    }
    case PANTO_EV_PROVIDER_RETRY: {
      const PantoProviderRetry *e = &ev->payload.provider_retry;
      fputs("{\"type\":\"provider_retry\"", stdout);
      put_key_u("message", e->message);
      put_key_u("attempt", e->attempt);
      put_key_u("max_attempts", e->max_attempts);
      put_key_u("delay_ms", e->delay_ms);
      put_key_str("reason", e->reason);
      if (e->status != 0) put_key_u("status", e->status);
      break;
    }
    case PANTO_EV_MESSAGE_COMPLETE: {
      const PantoMessageComplete *e = &ev->payload.message_complete;
      fputs("{\"type\":\"message_complete\"", stdout);
      put_key_str("stop_reason", e->stop_reason);
      put_usage(e->usage);
      put_key_u("messages", e->messages);
      put_key_str("text", e->text);
      /* Present only when an output schema applied to the turn. */
      if (e->output.ptr != NULL) put_key_raw("output", e->output);
      /* Present only when the turn paused (stop reason "deferred"). */
      if (e->deferred.ptr != NULL) put_key_raw("deferred", e->deferred);
      put_key_str("model", e->model);
      break;
    }
    case PANTO_EV_PROVIDER_FALLBACK: {
      const PantoProviderFallback *e = &ev->payload.provider_fallback;
      fputs("{\"type\":\"provider_fallback\"", stdout);
      put_key_u("message", e->message);
      put_key_str("from_provider", e->from_provider);
      put_key_str("from_model", e->from_model);
      put_key_str("to_provider", e->to_provider);
      put_key_str("to_model", e->to_model);
      put_key_str("error_kind", e->error_kind);
      put_key_str("error_message", e->error_message);
      if (e->status != 0) put_key_u("status", e->status);
      break;
    }
    case PANTO_EV_STEERING_DELIVERED: {
      const PantoSteeringDelivered *e = &ev->payload.steering_delivered;
      fputs("{\"type\":\"steering_delivered\"", stdout);
      put_key_u("message", e->message);
      put_key_str("text", e->text);
      break;
    }
    case PANTO_EV_OUTPUT_REPAIR: {
      const PantoOutputRepair *e = &ev->payload.output_repair;
      fputs("{\"type\":\"output_repair\"", stdout);
      put_key_u("message", e->message);
      put_key_u("attempt", e->attempt);
      put_key_u("max_attempts", e->max_attempts);
      put_key_str("error", e->error);
      break;
    }
    case PANTO_EV_HISTORY_COMPACTED: {
      const PantoHistoryCompacted *e = &ev->payload.history_compacted;
      fputs("{\"type\":\"history_compacted\"", stdout);
      put_key_u("messages_before", e->messages_before);
      put_key_u("messages_after", e->messages_after);
      put_key_u("tokens_before", e->tokens_before);
      put_key_u("tokens_after", e->tokens_after);
      break;
    }
    case PANTO_EV_ERROR: {
      const PantoErrorInfo *e = &ev->payload.error;
      printf("{\"type\":\"error\",\"kind\":\"%s\"", error_kind(e->kind));
      put_key_str("message", e->message);
      put_key_u("status", e->status);
      put_key_bool("retryable", e->retryable);
      if (e->provider_code.ptr != NULL)
        put_key_str("provider_code", e->provider_code);
      else
        fputs(",\"provider_code\":null", stdout);
      if (e->output.ptr != NULL) put_key_str("output", e->output);
      break;
    }
    default:
      printf("{\"type\":\"unknown\",\"code\":%u", ev->kind);
  }
  fputs("}\n", stdout);
  fflush(stdout);
}

/* An error outside the stream (configuration, starting the turn), as the error line. */
static void print_error(PantoError *err) {
  PantoEvent ev = PANTO_EVENT_INIT;
  ev.kind = PANTO_EV_ERROR;
  ev.payload.error.kind = panto_error_kind(err);
  ev.payload.error.status = panto_error_status(err);
  ev.payload.error.retryable = panto_error_retryable(err);
  ev.payload.error.message = panto_error_message(err);
  ev.payload.error.provider_code = panto_error_provider_code(err);
  print_event(&ev);
}

/* ---- host tools answered later, from another thread ------------------------------- */

typedef struct {
  PantoStream *stream;
  char *call_id;
  const Answer *answer;
} LateAnswer;

static void *answer_later(void *arg) {
  LateAnswer *late = arg;
  struct timespec ts = {late->answer->delay_ms / 1000, (late->answer->delay_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  /* Refused when the turn gave up on the call (its timeout) — what a slow tool gets. */
  submit(late->stream, late->call_id, strlen(late->call_id), late->answer, NULL);
  free(late->call_id);
  free(late);
  return NULL;
}

static int str_is(PantoStr s, const char *c) {
  return strlen(c) == s.len && memcmp(c, s.ptr, s.len) == 0;
}

static void answer_call(PantoStream *stream, const PantoToolCallStart *call, const Answer *answers,
                        int n_answers) {
  for (int i = 0; i < n_answers; i++) {
    const Answer *a = &answers[i];
    if (!str_is(call->name, a->name)) continue;
    if (a->delay_ms < 0) return;
    if (a->delay_ms == 0) {
      PantoError *err = NULL;
      if (submit(stream, call->call_id.ptr, call->call_id.len, a, &err) != PANTO_OK) {
        PantoStr m = panto_error_message(err);
        fprintf(stderr, "conformance: submit: %.*s\n", (int)m.len, m.ptr);
        panto_error_free(err);
      }
      return;
    }
    LateAnswer *late = malloc(sizeof *late);
    char *id = malloc(call->call_id.len + 1);
    if (late == NULL || id == NULL) abort();
    memcpy(id, call->call_id.ptr, call->call_id.len);
    id[call->call_id.len] = 0;
    *late = (LateAnswer){stream, id, a};
    pthread_t thread;
    if (pthread_create(&thread, NULL, answer_later, late) != 0) abort();
    pthread_detach(thread);
    return;
  }
}

/* What the runner does besides answering tools (the flags after --answer). */
typedef struct {
  Answer answers[MAX_ANSWERS];
  int n_answers;
  long cancel_after;       /* < 0: never */
  const char *resume;      /* NULL: no resume; "end" or the index K */
  const char *resume_answers;
  const char *held[MAX_ANSWERS]; /* --after-resume: not answered before the resume */
  int n_held;
  const char *steer_tool, *steer_text; /* --steer-during */
} Plan;

static int held(const Plan *plan, PantoStr name) {
  for (int i = 0; i < plan->n_held; i++)
    if (str_is(name, plan->held[i])) return 1;
  return 0;
}

/* Prints the stream's events and answers its host tools. In the first turn (`first`)
 * it also steers and cancels as asked, and returns the checkpoint to resume from (owned
 * by the caller) when --resume is given; NULL otherwise. */
static char *play(PantoStream *stream, const Plan *plan, int first) {
  long resume_at = -1; /* -1: at the end */
  if (first && plan->resume != NULL && strcmp(plan->resume, "end") != 0)
    resume_at = strtol(plan->resume, NULL, 10);
  int steer = first && plan->steer_tool != NULL;
  PantoEvent ev = PANTO_EVENT_INIT;
  for (long index = 0;; index++) {
    PantoStatus status = panto_next_event(stream, &ev);
    if (status == PANTO_DONE) break;
    print_event(&ev);
    if (status != PANTO_EVENT) break;
    if (first && plan->resume != NULL && index == resume_at) {
      /* The turn is abandoned here, as if its process died: the checkpoint is what it
       * reached, the rest of it is never seen. */
      PantoString cp = {NULL, 0};
      PantoError *err = NULL;
      char *out = NULL;
      if (panto_stream_checkpoint(stream, &cp, &err) == PANTO_OK) {
        out = strdup(cp.ptr);
        panto_string_free(&cp);
      } else {
        panto_error_free(err);
      }
      panto_stream_cancel(stream);
      return out;
    }
    if (ev.kind == PANTO_EV_TOOL_CALL_START && ev.payload.tool_call_start.host) {
      const PantoToolCallStart *call = &ev.payload.tool_call_start;
      if (steer && str_is(call->name, plan->steer_tool)) {
        steer = 0;
        PantoError *err = NULL;
        if (panto_stream_steer(stream, plan->steer_text, strlen(plan->steer_text), NULL, 0,
                               &err) != PANTO_OK) {
          PantoStr m = panto_error_message(err);
          fprintf(stderr, "conformance: steer: %.*s\n", (int)m.len, m.ptr);
          panto_error_free(err);
        }
      }
      if (!(first && held(plan, call->name)))
        answer_call(stream, call, plan->answers, plan->n_answers);
    }
    if (first && index == plan->cancel_after) panto_stream_cancel(stream);
  }
  if (first && plan->resume != NULL && resume_at < 0) {
    PantoString cp = {NULL, 0};
    PantoError *err = NULL;
    if (panto_stream_checkpoint(stream, &cp, &err) != PANTO_OK) {
      panto_error_free(err);
      return NULL;
    }
    char *out = strdup(cp.ptr);
    panto_string_free(&cp);
    return out;
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *config = NULL, *prompt = NULL, *input = NULL;
  static Plan plan = {.cancel_after = -1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      config = argv[++i];
    } else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
      prompt = argv[++i];
    } else if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
      input = argv[++i];
    } else if (strcmp(argv[i], "--cancel-after") == 0 && i + 1 < argc) {
      plan.cancel_after = strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--answer") == 0 && i + 4 < argc && plan.n_answers < MAX_ANSWERS) {
      plan.answers[plan.n_answers++] = (Answer){argv[i + 1], strtol(argv[i + 2], NULL, 10),
                                                strcmp(argv[i + 3], "true") == 0, argv[i + 4], 0};
      i += 4;
    } else if (strcmp(argv[i], "--answer-parts") == 0 && i + 4 < argc &&
               plan.n_answers < MAX_ANSWERS) {
      plan.answers[plan.n_answers++] = (Answer){argv[i + 1], strtol(argv[i + 2], NULL, 10),
                                                strcmp(argv[i + 3], "true") == 0, argv[i + 4], 1};
      i += 4;
    } else if (strcmp(argv[i], "--resume") == 0 && i + 2 < argc) {
      plan.resume = argv[i + 1];
      plan.resume_answers = argv[i + 2];
      i += 2;
    } else if (strcmp(argv[i], "--after-resume") == 0 && i + 1 < argc &&
               plan.n_held < MAX_ANSWERS) {
      plan.held[plan.n_held++] = argv[++i];
    } else if (strcmp(argv[i], "--steer-during") == 0 && i + 2 < argc) {
      plan.steer_tool = argv[i + 1];
      plan.steer_text = argv[i + 2];
      i += 2;
    } else {
      fprintf(stderr, "conformance: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  if (config == NULL || (prompt == NULL) == (input == NULL)) {
    fprintf(stderr,
            "usage: %s --config JSON (--prompt TEXT | --input PARTS) [--cancel-after K] "
            "[--answer ...] [--resume (end | K) ANSWERS] [--after-resume NAME]... "
            "[--steer-during NAME TEXT]\n",
            argv[0]);
    return 2;
  }

  PantoAgent *agent = NULL;
  PantoStream *stream = NULL;
  PantoError *err = NULL;
  if (panto_agent_new(config, strlen(config), &agent, &err) != PANTO_OK) {
    print_error(err);
    panto_error_free(err);
    return 0;
  }
  PantoStatus started;
  if (input != NULL) {
    size_t n = strlen(input) + sizeof "{\"input\":}";
    char *options = malloc(n);
    if (options == NULL) abort();
    snprintf(options, n, "{\"input\":%s}", input);
    started = panto_agent_stream_with(agent, "", 0, options, strlen(options), &stream, &err);
    free(options);
  } else {
    started = panto_agent_stream(agent, prompt, strlen(prompt), &stream, &err);
  }
  if (started != PANTO_OK) {
    print_error(err);
    panto_error_free(err);
    panto_agent_free(agent);
    return 0;
  }
  char *checkpoint = play(stream, &plan, 1);
  if (checkpoint != NULL) {
    puts("{\"runner\":\"resume\"}");
    fflush(stdout);
    PantoAgent *resumed = NULL;
    PantoStream *rstream = NULL;
    if (panto_agent_new(config, strlen(config), &resumed, &err) != PANTO_OK ||
        panto_agent_resume(resumed, checkpoint, strlen(checkpoint), plan.resume_answers,
                           strlen(plan.resume_answers), &rstream, &err) != PANTO_OK) {
      print_error(err);
      panto_error_free(err);
    } else {
      play(rstream, &plan, 0);
    }
    free(checkpoint);
  }
  /* A detached late answer may still hold the stream: leave it to process exit. */
  _exit(0);
}
