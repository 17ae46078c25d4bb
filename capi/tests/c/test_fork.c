/* C tests of fork(): the pre-fork server pattern (a child makes its own agent; the
 * parent's agents and streams fail in it at once and are freed without blocking).
 * run.sh runs these apart: see its $forks. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

/* What a forked child does (test_fork): returns 0 when everything held, else the
 * number of the first check that failed. */
static int fork_child(const TestServer *srv, PantoAgent *parent_agent, PantoAgent *busy_agent,
                      PantoStream *parent_stream) {
  PantoError *err = NULL;
  PantoEvent ev = PANTO_EVENT_INIT;
  /* 1. A new agent runs a whole turn: the child has a pool of its own. */
  PantoAgent *agent = new_agent(srv, "sk-test", NULL);
  if (agent == NULL) return 1;
  PantoStream *stream = start_stream(agent, "hi");
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
  Turn turn, held_turn = {0}; /* held_turn is ended at out: even if never started */
  CHECK(start_turn(&turn, scenario("text.json"), "sk-test", NULL, "hi") == 0);
  CHECK(turn.stream != NULL && drain(turn.stream, NULL) == PANTO_DONE);
  panto_stream_free(turn.stream);
  turn.stream = NULL;
  /* An open stream, its turn held by the server at fork time. */
  CHECK(start_turn(&held_turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(held_turn.stream, &ev) == PANTO_EVENT);
  StatWait held = {&held_turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));

  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(fork_child(&turn.srv, turn.agent, held_turn.agent, held_turn.stream));
  int status = 0;
  pid_t got = wait_child(pid, &status, 60000);
  CHECKF(got == pid, "the child did not finish within 60 s (it hangs)");
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "child: %s %d (the number of the check that failed)",
         WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));

  /* The parent is unaffected: its open stream goes on, its agent takes another turn. */
  CHECK(server_open_gate(&held_turn.srv) == 0);
  CHECK(drain(held_turn.stream, NULL) == PANTO_DONE);
  turn.stream = start_stream(turn.agent, "again");
  CHECK(turn.stream != NULL && drain(turn.stream, NULL) == PANTO_DONE);
out:
  end_turn(&turn);
  end_turn(&held_turn);
}

static const TestCase TESTS[] = {
    {"fork", test_fork},
};
const TestSuite FORK_TESTS = {"test_fork.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
