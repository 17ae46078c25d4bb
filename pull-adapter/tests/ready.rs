//! Waiting without a thread: the readiness descriptor (`Stream::readiness_fd`) and the
//! async wait (`Stream::next_async`, the `futures` `Stream` impl). The descriptor is
//! readable exactly while `try_next` has something to report, becomes readable on
//! hand-off, end, failure and cancel, is cleared by the `try_next` that finds nothing,
//! stays readable once the stream is over, and is closed (after waking its pollers) when
//! the stream is dropped. Every wait here is on a state the test established (the
//! server's gate, a waiter the kernel reports asleep), never on a sleep.

use std::future::Future;
use std::os::fd::RawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use panto::{Agent, ErrorKind, Event, ProviderKind};
use panto_pull::{active_streams, worker_threads, AgentStreamExt, Next, ReadySet, Stream};
use panto_testkit::{eventually, wait::HANG_GUARD as DEADLINE};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

static SERIAL: Mutex<()> = Mutex::new(());

/// Thread counts and `active_streams()` are process-wide: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn agent_for(server: &TestServer) -> Agent {
    Agent::new(panto_testkit::config(ProviderKind::OpenAi, server)).unwrap()
}

/// "Hello" is sent at once; " world" and the end wait at the server's gate. Answers
/// `times` requests.
fn held_after_hello(times: usize) -> TestServer {
    let sse = script::openai_text_events(&["Hello", " world"]);
    let first = script::sse_len(&sse[..2]).unwrap();
    let response: Value = json!({"sse": sse, "fault": {"kind": "hold", "after_bytes": first}});
    let mut ex = exchange(response);
    ex["times"] = json!(times);
    TestServer::start(script::scenario(vec![ex])).unwrap()
}

/// Whether `fd` is readable, waiting at most `timeout_ms` (-1: no limit).
fn readable(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Takes every ready event (until `Pending`), as a poller must after each readiness.
/// Returns the events and how the drain ended.
fn drain_ready(s: &mut Stream) -> (Vec<Event>, Result<Next, panto::Error>) {
    let mut events = Vec::new();
    loop {
        match s.try_next() {
            Ok(Next::Event(ev)) => events.push(ev),
            other => return (events, other),
        }
    }
}

fn is_hello(ev: &Event) -> bool {
    matches!(ev, Event::ContentDelta { text, .. } if text == "Hello")
}

// The thread-state checks the crate's unit tests use too (one copy).
#[path = "../src/test_support.rs"]
mod test_support;
use test_support::blocked_in_poll;

fn os_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// A thread blocked in `poll` on `fd` (no timeout), and what it saw. `start` returns
/// once the kernel reports the thread asleep and it has said it is about to poll.
struct Poller {
    done: std::sync::mpsc::Receiver<i16>,
    thread: std::thread::JoinHandle<()>,
}

impl Poller {
    fn start(fd: RawFd) -> Poller {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack; no timeout.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            assert_eq!(n, 1);
            done_tx.send(p.revents).unwrap();
        });
        let tid = tid_rx.recv_timeout(DEADLINE).unwrap();
        eventually("the poller to block in poll", || blocked_in_poll(tid));
        assert!(done.try_recv().is_err(), "poll returned on an unready fd");
        Poller { done, thread }
    }

    fn woken(self) -> i16 {
        let revents = self
            .done
            .recv_timeout(DEADLINE)
            .expect("the poller was not woken");
        self.thread.join().unwrap();
        revents
    }
}

/// A held stream read up to "Hello" through its descriptor alone; then drained, so the
/// descriptor is unreadable.
fn at_hello(agent: &Agent, server: &TestServer) -> (Stream, RawFd) {
    let mut s = agent.stream("hi").unwrap();
    let fd = s.readiness_fd().unwrap();
    let mut seen = Vec::new();
    while !seen.iter().any(is_hello) {
        assert!(readable(fd, DEADLINE.as_millis() as i32), "no readiness");
        let (events, end) = drain_ready(&mut s);
        assert_eq!(end.unwrap(), Next::Pending);
        seen.extend(events);
    }
    assert!(matches!(seen[0], Event::MessageStart { .. }));
    eventually("the server to hold the rest", || server.held() == 1);
    // Drained to Pending: nothing is ready, and the descriptor says so.
    assert_eq!(s.try_next().unwrap(), Next::Pending);
    assert!(!readable(fd, 0), "readable with nothing to report");
    (s, fd)
}

#[test]
fn the_fd_is_readable_while_try_next_has_something_and_after_the_end() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    let (mut s, fd) = at_hello(&agent, &server);
    // One descriptor per stream, the same from the stream and from its control.
    assert_eq!(s.readiness_fd().unwrap(), fd);
    assert_eq!(s.control().readiness_fd().unwrap(), fd);
    // A spurious look changes nothing.
    assert_eq!(s.try_next().unwrap(), Next::Pending);
    assert!(!readable(fd, 0));
    // The rest comes: readable until drained to the end, then readable for good.
    server.open_gate();
    let mut rest = Vec::new();
    let end = loop {
        assert!(readable(fd, DEADLINE.as_millis() as i32), "no readiness");
        let (events, end) = drain_ready(&mut s);
        rest.extend(events);
        match end {
            Ok(Next::Pending) => assert!(!rest.iter().any(Event::is_terminal)),
            other => break other,
        }
    };
    assert_eq!(end.unwrap(), Next::Done);
    assert!(
        matches!(rest.last(), Some(Event::MessageComplete { text, .. }) if text == "Hello world")
    );
    for _ in 0..3 {
        assert!(readable(fd, 0), "not readable after the end");
        assert_eq!(s.try_next().unwrap(), Next::Done);
    }
}

#[test]
fn a_failure_keeps_the_fd_readable() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(script::http_error(
        401,
        "invalid_api_key",
        json!({}),
    ))]))
    .unwrap();
    let agent = agent_for(&server);
    let mut s = agent.stream("hi").unwrap();
    let fd = s.readiness_fd().unwrap();
    assert!(readable(fd, DEADLINE.as_millis() as i32));
    let (events, end) = drain_ready(&mut s);
    assert!(events.is_empty());
    assert_eq!(end.unwrap_err().kind, ErrorKind::Authentication);
    for _ in 0..3 {
        assert!(readable(fd, 0));
        assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Authentication);
    }
}

#[test]
fn an_fd_asked_for_late_is_readable_at_once() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "a", "b",
    ]))]))
    .unwrap();
    let agent = agent_for(&server);
    let mut s = agent.stream("hi").unwrap();
    // The whole turn is in the queue before anyone asks for the descriptor.
    eventually("the turn to end", || active_streams() == 0);
    let fd = s.readiness_fd().unwrap();
    assert!(readable(fd, 0));
    let (events, end) = drain_ready(&mut s);
    assert_eq!(end.unwrap(), Next::Done);
    assert!(events.last().unwrap().is_terminal());
    assert!(readable(fd, 0));
}

#[test]
fn a_cancel_from_another_thread_makes_the_fd_readable() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    let (mut s, fd) = at_hello(&agent, &server);
    let poller = Poller::start(fd);
    let control = s.control();
    std::thread::spawn(move || control.cancel()).join().unwrap();
    assert!(poller.woken() & libc::POLLIN != 0);
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    assert!(readable(fd, 0), "not readable after the cancel");
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    drop(s);
    panto::message::validate_history(&agent.history()).unwrap();
}

/// A tool that blocks its worker thread (not just its task) until released: while it
/// runs, nothing on that worker hands anything over.
struct BlockingTool {
    entered: Mutex<std::sync::mpsc::Sender<()>>,
    release: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl panto::Tool for BlockingTool {
    fn spec(&self) -> panto::ToolSpec {
        panto::ToolSpec {
            name: "block".into(),
            description: "".into(),
            parameters: json!({"type": "object"}),
            needs_approval: false,
            external: false,
        }
    }
    fn call(&self, _: Value, _: panto::CancellationToken) -> panto::ToolFuture {
        let entered = self.entered.lock().unwrap().clone();
        let release = self.release.clone();
        Box::pin(async move {
            let _ = entered.send(());
            let _ = release.lock().unwrap().recv_timeout(DEADLINE);
            panto::ToolOutput::ok("")
        })
    }
}

#[test]
fn a_cancel_makes_the_fd_readable_while_the_worker_is_blocked() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[("c1", "block", "{}")])),
        exchange(script::openai_text(&["never"])),
    ]))
    .unwrap();
    let agent = agent_for(&server);
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    agent
        .add_tool(BlockingTool {
            entered: Mutex::new(entered_tx),
            release: Arc::new(Mutex::new(release_rx)),
        })
        .unwrap();
    let mut s = agent.stream("hi").unwrap();
    let fd = s.readiness_fd().unwrap();
    entered
        .recv_timeout(DEADLINE)
        .expect("the tool did not run");
    // The worker is stuck in the tool: take what it produced, then nothing is ready.
    let (events, end) = drain_ready(&mut s);
    assert_eq!(end.unwrap(), Next::Pending);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ToolCallStart { name, .. } if name == "block")));
    assert!(!readable(fd, 0));
    let poller = Poller::start(fd);
    let control = s.control();
    std::thread::spawn(move || control.cancel()).join().unwrap();
    // Woken by the cancel itself: the worker has not moved.
    assert!(poller.woken() & libc::POLLIN != 0);
    assert!(readable(fd, 0));
    // (Reporting the cancel waits for the turn to stop, which needs the worker back.)
    release.send(()).unwrap();
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    drop(s);
    assert_eq!(active_streams(), 0);
}

/// The identity of the file open as `fd`, if it is open.
fn file_id(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: fstat into a zeroed local stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

#[test]
fn dropping_the_stream_wakes_its_poller_and_closes_the_fd() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    let (s, fd) = at_hello(&agent, &server);
    let id = file_id(fd).unwrap();
    let control = s.control();
    let poller = Poller::start(fd);
    drop(s);
    // Woken: readable, or (when the poller looked again only after the close) an invalid
    // descriptor. Either way poll returned.
    let revents = poller.woken();
    assert!(
        revents & (libc::POLLIN | libc::POLLNVAL) != 0,
        "{revents:#x}"
    );
    // Closed: the number is free (or already another file's).
    assert_ne!(file_id(fd), Some(id));
    // The control outlives the stream; the descriptor does not come back.
    assert!(control.readiness_fd().is_err());
    assert_eq!(active_streams(), 0);
}

/// A waker that counts its wakes, and lets a thread wait for the next one.
#[derive(Default)]
struct Flag {
    woken: Mutex<usize>,
    cond: Condvar,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.woken.lock().unwrap() += 1;
        self.cond.notify_all();
    }
}

impl Flag {
    fn wait_for(&self, n: usize) {
        let guard = self.woken.lock().unwrap();
        let (guard, timeout) = self
            .cond
            .wait_timeout_while(guard, DEADLINE, |w| *w < n)
            .unwrap();
        assert!(!timeout.timed_out(), "not woken (wakes: {})", *guard);
    }
    fn count(&self) -> usize {
        *self.woken.lock().unwrap()
    }
}

#[test]
fn next_async_leaves_a_waker_and_a_cancel_wakes_it() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    let (mut s, _fd) = at_hello(&agent, &server);
    let control = s.control();
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut fut = Box::pin(s.next_async());
    // Nothing ready: Pending, with the stream's consumer waiting on this task and no
    // thread blocked anywhere (this one is right here).
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert!(control.consumer_waiting());
    assert_eq!(flag.count(), 0);
    std::thread::spawn(move || control.cancel()).join().unwrap();
    flag.wait_for(1);
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert_eq!(e.kind, ErrorKind::Cancelled),
        other => panic!("expected cancelled, got {other:?}"),
    }
    drop(fut);
    assert!(!s.control().consumer_waiting());
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
}

#[test]
fn dropping_next_async_mid_wait_consumes_nothing() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    let (mut s, _fd) = at_hello(&agent, &server);
    let control = s.control();
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    {
        let mut fut = Box::pin(s.next_async());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert!(control.consumer_waiting());
        // (dropped here, mid-wait)
    }
    assert!(
        !control.consumer_waiting(),
        "a dropped wait still registered"
    );
    server.open_gate();
    // The rest arrives whole, in order, to the next way of waiting.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let rest = rt.block_on(async {
        let mut rest = Vec::new();
        while let Some(ev) = s.next_async().await.unwrap() {
            rest.push(ev);
        }
        rest
    });
    let texts: Vec<&str> = rest
        .iter()
        .filter_map(|e| match e {
            Event::ContentDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, [" world"]);
    assert!(
        matches!(rest.last(), Some(Event::MessageComplete { text, .. }) if text == "Hello world")
    );
    assert_eq!(s.next().unwrap(), None);
    // The old waker was never used after the drop.
    assert_eq!(flag.count(), 0);
}

#[test]
fn many_streams_wait_on_one_runtime_without_a_thread_each() {
    let _g = serial();
    const N: usize = 100;
    let server = held_after_hello(N + 1);
    let agents: Vec<Agent> = (0..N).map(|_| agent_for(&server)).collect();
    // Warm the pool up (its threads start with the first stream).
    drop(agents[0].stream("warm").unwrap());
    let threads_before = os_threads();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let texts = rt.block_on(async {
        let mut controls = Vec::new();
        let mut tasks = Vec::new();
        for agent in &agents {
            let mut s = agent.stream("hi").unwrap();
            controls.push(s.control());
            tasks.push(tokio::spawn(async move {
                let mut text = None;
                while let Some(ev) = s.next_async().await.unwrap_or_else(|e| panic!("{e:?}")) {
                    if let Event::MessageComplete { text: t, .. } = ev {
                        text = Some(t);
                    }
                }
                text
            }));
        }
        // Every stream is held at the gate and every consumer waits, on this one thread.
        let end = Instant::now() + DEADLINE;
        while server.held() < N || !controls.iter().all(|c| c.consumer_waiting()) {
            assert!(Instant::now() < end, "the streams did not all wait");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let threads = os_threads();
        assert!(
            threads <= threads_before + worker_threads(),
            "{threads} threads with {N} waiting streams (before: {threads_before})"
        );
        server.open_gate();
        let mut texts = Vec::new();
        for t in tasks {
            texts.push(t.await.unwrap());
        }
        texts
    });
    assert_eq!(texts.len(), N);
    for t in texts {
        assert_eq!(t.as_deref(), Some("Hello world"));
    }
    eventually("every turn to end", || active_streams() == 0);
}

#[test]
fn the_futures_stream_yields_what_next_does() {
    let _g = serial();
    let scenario = || script::scenario(vec![exchange(script::openai_text(&["x", "y", "z"]))]);
    let server = TestServer::start(scenario()).unwrap();
    let agent = agent_for(&server);
    let mut by_next = Vec::new();
    let mut s = agent.stream("hi").unwrap();
    while let Some(ev) = s.next().unwrap() {
        by_next.push(ev);
    }
    drop(s);
    server.set_scenario(scenario());
    let agent = agent_for(&server);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let by_stream: Vec<Event> = rt.block_on(async {
        let s = agent.stream("hi").unwrap();
        s.map(|r| r.unwrap()).collect().await
    });
    assert_eq!(by_stream, by_next);
    // A failure is yielded once, then the stream ends.
    server.set_scenario(script::scenario(vec![exchange(script::http_error(
        401,
        "invalid_api_key",
        json!({}),
    ))]));
    let items: Vec<Result<Event, panto::Error>> =
        rt.block_on(async { agent.stream("again").unwrap().collect().await });
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].as_ref().unwrap_err().kind,
        ErrorKind::Authentication
    );
}

/// Edge-triggered waiting (epoll's `EPOLLET`, like Go's netpoller): a poller is told
/// only when the descriptor becomes readable, so a `Pending` from `try_next` must leave
/// it unreadable — were something handed over while `try_next` looked, and `Pending`
/// said with the descriptor still readable from before, no new edge would come and the
/// stream would be stranded. Many streams of many small hand-offs make that race
/// likely; a stranded stream shows as an `epoll_wait` that times out.
#[test]
fn edge_triggered_epoll_never_strands_a_stream() {
    let _g = serial();
    const STREAMS: usize = 24;
    let pieces: Vec<String> = (0..1500).map(|i| format!("{} ", i % 10)).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let mut ex = exchange(script::openai_text(&pieces));
    ex["times"] = json!(STREAMS);
    let server = TestServer::start(script::scenario(vec![ex])).unwrap();
    let agents: Vec<Agent> = (0..STREAMS).map(|_| agent_for(&server)).collect();
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut streams: Vec<Option<Stream>> = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let s = agent.stream("go").unwrap();
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: i as u64,
        };
        // SAFETY: registers the stream's descriptor with an event on the stack.
        let rc =
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.readiness_fd().unwrap(), &mut ev) };
        assert_eq!(rc, 0);
        streams.push(Some(s));
    }
    // An edge may have come before registration: every stream is drained once first.
    let mut ready: Vec<usize> = (0..STREAMS).collect();
    let mut done = 0;
    let mut texts = vec![0usize; STREAMS];
    while done < STREAMS {
        for i in ready.drain(..) {
            let Some(s) = streams[i].as_mut() else {
                continue;
            };
            let (events, end) = drain_ready(s);
            texts[i] += events
                .iter()
                .filter(|e| matches!(e, Event::ContentDelta { .. }))
                .count();
            match end.unwrap() {
                Next::Pending => {}
                Next::Done => {
                    let fd = s.readiness_fd().unwrap();
                    // SAFETY: removes a registered descriptor; the event is ignored.
                    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
                    streams[i] = None;
                    done += 1;
                }
                Next::Event(_) => unreachable!(),
            }
        }
        if done == STREAMS {
            break;
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; STREAMS];
        // SAFETY: epoll_wait writes at most STREAMS events into `evs`.
        let n = unsafe {
            libc::epoll_wait(
                ep,
                evs.as_mut_ptr(),
                STREAMS as i32,
                DEADLINE.as_millis() as i32,
            )
        };
        assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
        assert!(
            n > 0,
            "{} of {STREAMS} streams stranded: no edge within {DEADLINE:?} (chunks seen {texts:?})",
            STREAMS - done
        );
        ready.extend(evs[..n as usize].iter().map(|e| e.u64 as usize));
    }
    // SAFETY: closes the epoll descriptor this test made.
    unsafe { libc::close(ep) };
    assert!(texts.iter().all(|&n| n == 1500), "{texts:?}");
}

// ---- One descriptor for many streams: `ReadySet` --------------------------------------

/// Takes every token the set holds now.
fn take_all(set: &ReadySet) -> Vec<u64> {
    let mut all = Vec::new();
    let mut buf = [0u64; 4];
    loop {
        let n = set.take(&mut buf);
        all.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return all;
        }
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A held stream attached to `set` under `token`, read up to "Hello" through the set
/// alone, then drained: nothing is ready and the set is unreadable.
fn at_hello_in(set: &ReadySet, token: u64, agent: &Agent) -> Stream {
    let mut s = agent.stream("hi").unwrap();
    s.attach(set, token).unwrap();
    let mut seen = Vec::new();
    while !seen.iter().any(is_hello) {
        assert!(readable(set.fd(), DEADLINE.as_millis() as i32), "no report");
        let tokens = take_all(set);
        assert!(tokens.iter().all(|&t| t == token), "{tokens:?}");
        let (events, end) = drain_ready(&mut s);
        assert_eq!(end.unwrap(), Next::Pending);
        seen.extend(events);
    }
    s
}

#[test]
fn a_ready_set_reports_a_stream_exactly_when_it_has_something() {
    let _g = serial();
    let server = held_after_hello(2);
    let set = ReadySet::new().unwrap();
    let (a1, a2) = (agent_for(&server), agent_for(&server));
    let mut s1 = at_hello_in(&set, 1, &a1);
    let mut s2 = at_hello_in(&set, 2, &a2);
    eventually("the server to hold both", || server.held() == 2);
    let _ = take_all(&set);
    assert_eq!(s1.try_next().unwrap(), Next::Pending);
    assert_eq!(s2.try_next().unwrap(), Next::Pending);
    assert!(!readable(set.fd(), 0), "readable with nothing to report");
    // A stream has one way to report: no descriptor of its own once attached.
    assert!(s1.readiness_fd().is_err());
    assert!(s1.attach(&set, 9).is_err());
    // The rest comes for both: each is reported, drained to its end.
    server.open_gate();
    let mut ended = [false, false];
    while !ended.iter().all(|&e| e) {
        assert!(readable(set.fd(), DEADLINE.as_millis() as i32), "no report");
        for token in take_all(&set) {
            let s = if token == 1 { &mut s1 } else { &mut s2 };
            let (_, end) = drain_ready(s);
            match end.unwrap() {
                Next::Pending => {}
                Next::Done => ended[token as usize - 1] = true,
                Next::Event(_) => unreachable!(),
            }
        }
    }
    // Ended streams are not reported again (their calls answer Done at once).
    assert!(!readable(set.fd(), 0));
    assert_eq!(s1.try_next().unwrap(), Next::Done);
}

#[test]
fn a_cancel_wakes_a_poller_of_the_set_and_a_dropped_stream_is_never_reported() {
    let _g = serial();
    let server = held_after_hello(2);
    let set = ReadySet::new().unwrap();
    let (a1, a2) = (agent_for(&server), agent_for(&server));
    let mut s1 = at_hello_in(&set, 1, &a1);
    let s2 = at_hello_in(&set, 2, &a2);
    eventually("the server to hold both", || server.held() == 2);
    let _ = take_all(&set);
    assert_eq!(s1.try_next().unwrap(), Next::Pending);
    assert!(!readable(set.fd(), 0));
    let poller = Poller::start(set.fd());
    let control = s1.control();
    std::thread::spawn(move || control.cancel()).join().unwrap();
    assert!(poller.woken() & libc::POLLIN != 0);
    assert_eq!(take_all(&set), [1]);
    assert_eq!(s1.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    // Stream 2 is cancelled (reported), then dropped before anyone took its token.
    s2.control().cancel();
    assert!(readable(set.fd(), 0));
    drop(s2);
    assert_eq!(take_all(&set), Vec::<u64>::new());
    assert!(!readable(set.fd(), 0));
}

#[test]
fn a_hundred_streams_in_a_set_cost_no_descriptor_each() {
    let _g = serial();
    const N: usize = 100;
    let server = held_after_hello(N);
    let agents: Vec<Agent> = (0..N).map(|_| agent_for(&server)).collect();
    let mut streams: Vec<Stream> = agents.iter().map(|a| a.stream("hi").unwrap()).collect();
    eventually("the server to hold every stream", || server.held() == N);
    let before = open_fds();
    let set = ReadySet::new().unwrap();
    for (i, s) in streams.iter().enumerate() {
        s.attach(&set, i as u64).unwrap();
    }
    assert_eq!(
        open_fds(),
        before + 1,
        "one descriptor for the set, none per stream"
    );
    server.open_gate();
    let mut done = 0;
    while done < N {
        assert!(readable(set.fd(), DEADLINE.as_millis() as i32), "no report");
        for t in take_all(&set) {
            let (_, end) = drain_ready(&mut streams[t as usize]);
            if end.unwrap() == Next::Done {
                done += 1;
            }
        }
    }
}

/// As `edge_triggered_epoll_never_strands_a_stream`, with every stream behind one set.
#[test]
fn edge_triggered_epoll_on_a_set_never_strands_a_stream() {
    let _g = serial();
    const STREAMS: usize = 24;
    let pieces: Vec<String> = (0..1500).map(|i| format!("{} ", i % 10)).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let mut ex = exchange(script::openai_text(&pieces));
    ex["times"] = json!(STREAMS);
    let server = TestServer::start(script::scenario(vec![ex])).unwrap();
    let agents: Vec<Agent> = (0..STREAMS).map(|_| agent_for(&server)).collect();
    let set = ReadySet::new().unwrap();
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: 0,
    };
    // SAFETY: registers the set's descriptor with an event on the stack.
    assert_eq!(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, set.fd(), &mut ev) },
        0
    );
    let mut streams: Vec<Option<Stream>> = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let s = agent.stream("go").unwrap();
        s.attach(&set, i as u64).unwrap();
        streams.push(Some(s));
    }
    let mut done = 0;
    let mut texts = vec![0usize; STREAMS];
    while done < STREAMS {
        // Everything reported, in batches smaller than the streams (the set stays
        // readable between two takes: no edge is needed for the rest).
        for t in take_all(&set) {
            let Some(s) = streams[t as usize].as_mut() else {
                continue;
            };
            let (events, end) = drain_ready(s);
            texts[t as usize] += events
                .iter()
                .filter(|e| matches!(e, Event::ContentDelta { .. }))
                .count();
            if end.unwrap() == Next::Done {
                streams[t as usize] = None;
                done += 1;
            }
        }
        if done == STREAMS {
            break;
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
        // SAFETY: epoll_wait writes at most one event into `evs`.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 1, DEADLINE.as_millis() as i32) };
        assert!(
            n > 0,
            "{} of {STREAMS} streams stranded: no edge within {DEADLINE:?} (chunks seen {texts:?})",
            STREAMS - done
        );
    }
    // SAFETY: closes the epoll descriptor this test made.
    unsafe { libc::close(ep) };
    assert!(texts.iter().all(|&n| n == 1500), "{texts:?}");
}

/// Forks; the child runs `child` and exits with its answer (0-255). Returns the child's
/// exit code, or None if it did not exit within the hang guard (it is then killed).
fn in_child(child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child only runs `child` (no allocation is needed by what the tests
    // pass) and leaves with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child without running the parent's destructors or atexit.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for the child this test forked, without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if start.elapsed() > DEADLINE {
            // SAFETY: kills and reaps the child this test forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A forked child shares the set's descriptor (an eventfd, or a pipe) with the parent:
/// the child must not take the parent's readiness (its take would read the shared
/// counter, leaving the parent's queued tokens behind an unreadable descriptor for
/// good), nor make it readable (its drop would leave the parent's descriptor readable
/// with nothing queued, which a level-triggered loop then spins on). A parent's set is
/// inert in the child: take answers nothing, attach fails, the drop closes only the
/// child's copy of the descriptor.
#[test]
fn a_forked_child_leaves_its_parents_set_alone() {
    let _g = serial();
    let server = held_after_hello(1);
    let agent = agent_for(&server);
    // Idle parent: nothing queued. A child that drops the set must not make it readable.
    let set = ReadySet::new().unwrap();
    let code = in_child(|| {
        // SAFETY: the child's copy of the set is dropped once, here; the parent's is
        // untouched (another process).
        drop(unsafe { std::ptr::read(&set) });
        0
    });
    assert_eq!(code, Some(0), "the child hung or failed dropping the set");
    assert!(
        !readable(set.fd(), 0),
        "readable after the child dropped it"
    );
    assert!(take_all(&set).is_empty());
    assert!(
        !readable(set.fd(), 0),
        "take left it readable with nothing queued"
    );

    // A parent with a report queued: the child takes nothing, attaches nothing, and the
    // parent's descriptor stays readable with the token queued.
    let s = at_hello_in(&set, 7, &agent);
    s.control().cancel();
    assert!(readable(set.fd(), 0));
    let code = in_child(|| {
        let mut buf = [0u64; 4];
        let took = set.take(&mut buf);
        // A stream of the child's own (its agent made here) cannot join the parent's set.
        let child_agent = agent_for(&server);
        let other = child_agent.stream("hi");
        let attached = match &other {
            Ok(o) => o.attach(&set, 9).is_ok(),
            Err(_) => false,
        };
        std::mem::forget(other);
        std::mem::forget(child_agent);
        (took as i32) * 10 + i32::from(attached)
    });
    assert_eq!(
        code,
        Some(0),
        "the child took {:?} tokens (x10) / attached",
        code
    );
    assert!(
        readable(set.fd(), 0),
        "the child took the parent's readiness"
    );
    assert_eq!(take_all(&set), [7]);
    assert!(!readable(set.fd(), 0));
}
