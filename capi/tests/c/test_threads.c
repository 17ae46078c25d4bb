/* C tests of streams and threads: a consumer blocked in panto_next_event, woken by a
 * cancel from another thread; a stream freed mid-turn (response held, queue full); two
 * agents' turns at once on two threads; a second consumer of one stream (busy). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "panto.h"

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

static void test_cancel_from_another_thread(void) {
  Turn turn;
  pthread_t th;
  bool joined = true;
  Consumer c;
  memset(&c, 0, sizeof c);
  CHECK(start_turn(&turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  c.stream = turn.stream;
  CHECK(pthread_create(&th, NULL, consume, &c) == 0);
  joined = false;
  StatWait held = {&turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(consumer_blocked, &c, 30000));
  CHECK(!atomic_load(&c.finished));
  /* A second consumer at the same time is refused, not a race (busy, at once for a
   * timeout of 0; test_second_consumer has the rest). */
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event_timeout(turn.stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECK(str_contains(ev.payload.error.message, "another thread"));
  /* Cancel from this thread wakes the blocked one. */
  CHECK(panto_stream_cancel(turn.stream) == PANTO_OK);
  CHECK(pthread_join(th, NULL) == 0);
  joined = true;
  CHECK(c.last == PANTO_ERROR);
  CHECKF(c.error_kind == PANTO_ERR_CANCELLED, "kind %u", c.error_kind);
  CHECK(atomic_load(&c.events) == 3); /* message_start, block_start, content_delta */
  /* Idempotent, and sticky. */
  CHECK(panto_stream_cancel(turn.stream) == PANTO_OK);
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_CANCELLED);
  /* The turn is over: its connection is closed, the agent takes a new turn. */
  CHECK(wait_until(no_client_connection, &turn.srv, 30000));
  panto_stream_free(turn.stream);
  turn.stream = start_stream(turn.agent, "again");
  CHECK(turn.stream != NULL);
out:
  if (!joined) {
    panto_stream_cancel(turn.stream);
    pthread_join(th, NULL);
  }
  end_turn(&turn);
}

static bool turn_paused(void *arg) { return panto_stream_turn_paused((PantoStream *)arg); }

/* Free mid-turn: with the response held by the server, and with the queue full (the turn
 * paused on a consumer that stopped reading). Free returns promptly and the connection is
 * closed. */
static void test_free_mid_turn(void) {
  Turn held_turn, flood_turn = {0}; /* flood_turn is ended at out: even if never started */
  CHECK(start_turn(&held_turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  PantoEvent ev = PANTO_EVENT_INIT;
  CHECK(panto_next_event(held_turn.stream, &ev) == PANTO_EVENT &&
        ev.kind == PANTO_EV_MESSAGE_START);
  StatWait held = {&held_turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  int64_t t0 = now_ms();
  panto_stream_free(held_turn.stream);
  held_turn.stream = NULL;
  CHECKF(now_ms() - t0 < 5000, "free took %lld ms", (long long)(now_ms() - t0));
  CHECK(wait_until(no_client_connection, &held_turn.srv, 30000));
  panto_agent_free(held_turn.agent);
  held_turn.agent = NULL;

  CHECK(start_turn(&flood_turn, scenario("flood.json"), "sk-test", ",\"queue_capacity\":4",
                   "hi") == 0);
  CHECK(panto_next_event(flood_turn.stream, &ev) == PANTO_EVENT);
  CHECK(wait_until(turn_paused, flood_turn.stream, 30000));
  /* The turn waits for this consumer; the event just read is still valid. */
  CHECK(ev.kind == PANTO_EV_MESSAGE_START && str_eq(ev.payload.message_start.model, "gpt-4o-mini"));
  t0 = now_ms();
  panto_stream_free(flood_turn.stream);
  flood_turn.stream = NULL;
  CHECKF(now_ms() - t0 < 5000, "free took %lld ms", (long long)(now_ms() - t0));
  CHECK(wait_until(no_client_connection, &flood_turn.srv, 30000));
  /* The agent is free again at once. */
  flood_turn.stream = start_stream(flood_turn.agent, "again");
  CHECK(flood_turn.stream != NULL);
out:
  end_turn(&flood_turn);
  end_turn(&held_turn);
}

/* Two agents, two threads, two turns in flight at once: both responses are held by the
 * server at the same moment, then both complete. */
typedef struct ThreadTurn {
  const TestServer *srv;
  PantoAgent *agent;
  Consumer c;
} ThreadTurn;

static void *run_turn(void *arg) {
  ThreadTurn *t = arg;
  t->c.stream = start_stream(t->agent, "hi");
  if (t->c.stream == NULL) {
    atomic_store(&t->c.finished, true);
    return NULL;
  }
  return consume(&t->c);
}

static bool both_hello(void *arg) {
  ThreadTurn *t = arg;
  return atomic_load(&t[0].c.saw_hello) && atomic_load(&t[1].c.saw_hello);
}

static void test_two_agents_two_threads(void) {
  TestServer srv;
  ThreadTurn turns[2];
  pthread_t th[2];
  int started = 0;
  memset(turns, 0, sizeof turns);
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
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
  Turn turn;
  pthread_t first_th, second_th;
  bool first_running = false, second_running = false;
  Consumer c;
  Second s;
  memset(&c, 0, sizeof c);
  memset(&s, 0, sizeof s);
  CHECK(start_turn(&turn, scenario("text-held.json"), "sk-test", NULL, "hi") == 0);
  c.stream = turn.stream;
  CHECK(pthread_create(&first_th, NULL, consume, &c) == 0);
  first_running = true;
  StatWait held = {&turn.srv, "held", 1};
  CHECK(wait_until(stat_is, &held, 30000));
  CHECK(wait_until(consumer_blocked, &c, 30000));

  /* Timed: busy after its timeout, not before; 0: at once. */
  PantoEvent ev = PANTO_EVENT_INIT;
  int64_t t0 = now_ms();
  CHECK(panto_next_event_timeout(turn.stream, &ev, 100) == PANTO_ERROR);
  CHECKF(now_ms() - t0 >= 95, "returned after %lld ms", (long long)(now_ms() - t0));
  CHECK(ev.kind == PANTO_EV_ERROR && ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECK(str_eq(panto_error_kind_name(ev.payload.error.kind), "busy"));
  t0 = now_ms();
  CHECK(panto_next_event_timeout(turn.stream, &ev, 0) == PANTO_ERROR);
  CHECK(ev.payload.error.kind == PANTO_ERR_BUSY);
  CHECKF(now_ms() - t0 < 1000, "a timeout of 0 waited %lld ms", (long long)(now_ms() - t0));

  /* Untimed: asleep for as long as the first one is inside. */
  s.stream = turn.stream;
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
  CHECK(!atomic_load(&c.finished) && panto_stream_consumer_waiting(turn.stream));

  /* The first one returns (with the rest of the turn): the second wakes with busy. */
  CHECK(server_open_gate(&turn.srv) == 0);
  CHECK(pthread_join(second_th, NULL) == 0);
  second_running = false;
  CHECKF(s.status == PANTO_ERROR && s.kind == PANTO_EV_ERROR && s.error_kind == PANTO_ERR_BUSY,
         "status %d kind %u error %u", s.status, s.kind, s.error_kind);
  CHECK(pthread_join(first_th, NULL) == 0);
  first_running = false;
  /* The first consumer got the whole turn: busy consumed nothing and stuck to nothing. */
  CHECKF(c.last == PANTO_DONE, "status %d kind %u", c.last, c.error_kind);
  CHECK(strcmp(c.text, "Hello from panto.") == 0);
  CHECK(panto_next_event(turn.stream, &ev) == PANTO_DONE);
out:
  if (first_running || second_running) {
    panto_stream_cancel(turn.stream);
    server_open_gate(&turn.srv);
    if (first_running) pthread_join(first_th, NULL);
    if (second_running) pthread_join(second_th, NULL);
  }
  end_turn(&turn);
}

static const TestCase TESTS[] = {
    {"cancel_from_another_thread", test_cancel_from_another_thread},
    {"free_mid_turn", test_free_mid_turn},
    {"two_agents_two_threads", test_two_agents_two_threads},
    {"second_consumer", test_second_consumer},
};
const TestSuite THREAD_TESTS = {"test_threads.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
