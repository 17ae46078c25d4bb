/* C tests of readiness for hosts with their own event loop: a stream's readiness
 * descriptor (ABI 1.1) and ready sets, one descriptor for many streams (ABI 1.2) —
 * polled from one thread, woken by a cancel or a free from another, and a set after
 * fork() (run.sh runs ready_set_fork apart: see its $forks). */
#define _GNU_SOURCE
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "panto.h"

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

/* Makes p's agent for `srv` and starts its stream ("hi"); false if either failed. */
static bool polled_start(Polled *p, const TestServer *srv) {
  p->agent = new_agent(srv, "sk-test", NULL);
  if (p->agent == NULL) return false;
  p->stream = start_stream(p->agent, "hi");
  return p->stream != NULL;
}

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
    CHECK(polled_start(&ps[i], &srv));
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
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  CHECK(polled_start(&p, &srv));
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
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  int64_t fd = 7;
  CHECK(panto_stream_readiness_fd(NULL, &fd) == PANTO_ERROR && fd == -1);
  CHECK(polled_start(&p, &srv));
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
    CHECK(polled_start(&ps[i], &srv));
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
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  CHECK(panto_ready_set_new(&set) == PANTO_OK);
  for (int i = 0; i < 2; i++) {
    CHECK(polled_start(&p[i], &srv));
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
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  CHECK(panto_ready_set_new(&set) == PANTO_OK && panto_ready_set_new(&other) == PANTO_OK);
  for (int i = 0; i < 4; i++) {
    CHECK(polled_start(&p[i], &srv));
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
  CHECK(server_start(&srv, scenario("text-held.json")) == 0);
  CHECK(panto_ready_set_new(&set) == PANTO_OK);
  CHECK(polled_start(&p, &srv));
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
  pid_t got = wait_child(pid, &status, 60000);
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

static const TestCase TESTS[] = {
    {"poll_many_streams", test_poll_many_streams},
    {"readiness_cancel_from_another_thread", test_readiness_cancel_from_another_thread},
    {"readiness_free_while_polling", test_readiness_free_while_polling},
    {"ready_set_many_streams", test_ready_set_many_streams},
    {"ready_set_cancel_and_free", test_ready_set_cancel_and_free},
    {"ready_set_one_way_tiny_takes_and_freed_first",
     test_ready_set_one_way_tiny_takes_and_freed_first},
    {"ready_set_fork", test_ready_set_fork},
};
const TestSuite READINESS_TESTS = {"test_readiness.c", TESTS, sizeof TESTS / sizeof TESTS[0]};
