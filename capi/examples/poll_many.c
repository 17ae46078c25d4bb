/*
 * poll_many.c — several panto turns at once on ONE thread: one poll() loop over the
 * streams' readiness descriptors (ABI 1.1), no thread per stream. Each prompt gets its
 * own agent and stream; deltas are printed as they come, tagged with the stream's
 * number, and each stream's whole answer once it is done.
 *
 *   poll_many BASE_URL PROMPT...
 *
 * BASE_URL is an OpenAI-compatible endpoint including its version, e.g.
 * https://api.openai.com/v1 or http://localhost:11434/v1 (Ollama). The API key comes
 * from $OPENAI_API_KEY, the model from $PANTO_MODEL (default gpt-4o-mini).
 *
 * Build (after scripts/install-capi.sh PREFIX, with PREFIX/lib/pkgconfig on
 * PKG_CONFIG_PATH):
 *   cc -std=c11 -o poll_many poll_many.c $(pkg-config --cflags --libs panto)
 *
 * The same loop works with epoll, select or an event loop's "reader" callbacks: wait
 * until a descriptor is readable, then take that stream's events with a timeout of 0
 * until PANTO_PENDING (or PANTO_DONE / PANTO_ERROR).
 *
 * Exit status: 0 when every turn completed, 1 when any failed, 2 for bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panto.h"

/* One turn in flight. */
typedef struct Turn {
  PantoAgent *agent;
  PantoStream *stream;
  int64_t fd;         /* its readiness descriptor: owned by the stream, never closed here */
  PantoStatus status; /* PANTO_PENDING while it runs, then PANTO_DONE or PANTO_ERROR */
  char *answer;       /* message_complete's text */
} Turn;

/* Appends `s` to `out` as the contents of a JSON string. */
static void json_escape(char *out, size_t cap, const char *s) {
  size_t n = strlen(out);
  for (; *s && n + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[n++] = '\\';
      out[n++] = (char)c;
    } else if (c < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
    } else {
      out[n++] = (char)c;
    }
  }
  out[n] = 0;
}

/* Takes everything this stream has ready — the drain rule: until PANTO_PENDING, which
 * also makes its descriptor unreadable again — and records how it ended, if it did. */
static void drain(Turn *t, int number) {
  PantoEvent ev = PANTO_EVENT_INIT;
  PantoStatus st;
  while ((st = panto_next_event_timeout(t->stream, &ev, 0)) == PANTO_EVENT) {
    if (ev.kind == PANTO_EV_CONTENT_DELTA && ev.payload.content_delta.kind == PANTO_DELTA_TEXT) {
      PantoStr text = ev.payload.content_delta.text;
      printf("[%d] delta: %.*s\n", number, (int)text.len, text.ptr);
    } else if (ev.kind == PANTO_EV_MESSAGE_COMPLETE) {
      PantoStr text = ev.payload.message_complete.text;
      t->answer = malloc(text.len + 1);
      if (t->answer != NULL) {
        memcpy(t->answer, text.ptr, text.len);
        t->answer[text.len] = 0;
      }
    }
    /* Every other kind, including kinds newer than this program, is skipped. */
  }
  if (st == PANTO_PENDING) return; /* more later: wait on the descriptor again */
  t->status = st == PANTO_DONE ? PANTO_DONE : PANTO_ERROR;
  if (t->status == PANTO_ERROR) {
    PantoStr m = ev.payload.error.message;
    fprintf(stderr, "[%d] failed: %.*s\n", number, (int)m.len, m.ptr);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BASE_URL PROMPT...\n", argv[0]);
    return 2;
  }
  /* The descriptor is ABI 1.1: refuse an older library, or one of another major. */
  unsigned abi = panto_abi_version();
  if ((abi >> 16) != PANTO_ABI_VERSION_MAJOR || (abi & 0xffff) < 1) {
    fprintf(stderr, "libpanto ABI %u.%u, need %d.1 or later\n", abi >> 16, abi & 0xffff,
            PANTO_ABI_VERSION_MAJOR);
    return 1;
  }
  const char *model = getenv("PANTO_MODEL") ? getenv("PANTO_MODEL") : "gpt-4o-mini";
  char config[4096] = "{\"provider\":\"openai\",\"model\":\"";
  json_escape(config, sizeof config, model);
  strcat(config, "\",\"base_url\":\"");
  json_escape(config, sizeof config, argv[1]);
  strcat(config, "\"}");

  int n = argc - 2;
  Turn *turns = calloc((size_t)n, sizeof *turns);
  struct pollfd *fds = calloc((size_t)n, sizeof *fds);
  int *which = calloc((size_t)n, sizeof *which);
  int failed = 0;
  if (turns == NULL || fds == NULL || which == NULL) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }

  /* Start every turn (each returns at once: the requests go out on the library's own
   * worker threads) and ask each stream for its descriptor. */
  for (int i = 0; i < n; i++) {
    const char *prompt = argv[i + 2];
    PantoError *err = NULL;
    turns[i].status = PANTO_ERROR;
    if (panto_agent_new(config, strlen(config), &turns[i].agent, &err) != PANTO_OK ||
        panto_agent_stream(turns[i].agent, prompt, strlen(prompt), &turns[i].stream, &err) !=
            PANTO_OK) {
      PantoStr m = panto_error_message(err);
      fprintf(stderr, "[%d] %.*s\n", i, (int)m.len, m.ptr);
      panto_error_free(err);
      continue;
    }
    if (panto_stream_readiness_fd(turns[i].stream, &turns[i].fd) != PANTO_OK) {
      fprintf(stderr, "[%d] no readiness descriptor\n", i);
      continue;
    }
    turns[i].status = PANTO_PENDING;
  }

  /* The loop: wait for any running stream to be ready, drain the ready ones. */
  for (;;) {
    int waiting = 0;
    for (int i = 0; i < n; i++) {
      if (turns[i].status != PANTO_PENDING) continue;
      fds[waiting].fd = (int)turns[i].fd;
      fds[waiting].events = POLLIN;
      fds[waiting].revents = 0;
      which[waiting++] = i;
    }
    if (waiting == 0) break;
    if (poll(fds, (nfds_t)waiting, -1) < 0) {
      perror("poll");
      return 1;
    }
    for (int j = 0; j < waiting; j++)
      if (fds[j].revents & (POLLIN | POLLERR | POLLHUP)) drain(&turns[which[j]], which[j]);
  }

  for (int i = 0; i < n; i++) {
    if (turns[i].status == PANTO_DONE)
      printf("[%d] answer: %s\n", i, turns[i].answer != NULL ? turns[i].answer : "");
    else
      failed = 1;
    /* Frees the stream and closes its descriptor (nobody polls it any more). */
    panto_stream_free(turns[i].stream);
    panto_agent_free(turns[i].agent);
    free(turns[i].answer);
  }
  free(turns);
  free(fds);
  free(which);
  return failed;
}
