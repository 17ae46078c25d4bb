//! The pull contract of DESIGN.md, checked on `panto_pull::Stream` against
//! `panto-testserver`: ordering and exhaustion, sticky errors, cancel from another thread,
//! drop at any point (including on a full queue and while a host tool is awaited),
//! busy, pooling, push/pull equivalence — and that worker threads and sockets return to
//! their baseline afterwards.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use panto::{
    Agent, Collect, Config, ErrorKind, Event, FnTool, ProviderKind, ToolOutput, ToolSpec,
    TurnControl,
};
use panto_pull::{active_streams, AgentStreamExt, Next, Stream};
use panto_testkit::threads::{panto_threads, thread_names};
use panto_testkit::{config, eventually, poll_until};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Leak checks count process-wide workers and threads: tests that check them run one at a
/// time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const DEADLINE: Duration = Duration::from_secs(20);

fn agent_for(server: &TestServer, tweak: impl FnOnce(Config) -> Config) -> Agent {
    Agent::new(tweak(config(ProviderKind::OpenAi, server))).unwrap()
}

fn weather(agent: &Agent) {
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            |a: Value, _| async move {
                ToolOutput::ok(format!("sunny in {}", a["city"].as_str().unwrap_or("?")))
            },
        ))
        .unwrap();
}

fn two_step() -> Vec<Value> {
    vec![
        exchange(script::openai_tool_calls(&[
            ("c1", "weather", r#"{"city":"Paris"}"#),
            ("c2", "weather", r#"{"city":"Oslo"}"#),
        ])),
        exchange(script::openai_text(&["It is ", "sunny ", "everywhere."])),
    ]
}

/// Workers, OS threads and the server's sockets are back to where they were.
fn assert_released(server: &TestServer, threads_before: usize) {
    eventually("stream workers to exit", || active_streams() == 0);
    // Connections whose response was read to its end are the process's pool's, kept for
    // the next agent; close those, so what is left open is what a stream leaked.
    panto::http::close_idle_connections();
    eventually("server sockets to close", || server.connections_open() == 0);
    let back = poll_until(DEADLINE, || panto_threads() <= threads_before);
    assert!(
        back,
        "threads not back to {threads_before} (now {}): {:?}",
        panto_threads(),
        thread_names()
    );
}

fn drain(stream: &mut Stream) -> (Vec<Event>, Option<panto::Error>) {
    let mut events = Vec::new();
    loop {
        match stream.next() {
            Ok(Some(ev)) => events.push(ev),
            Ok(None) => return (events, None),
            Err(e) => return (events, Some(e)),
        }
    }
}

/// The runtime and its threads exist once per process; start them before taking a
/// thread baseline.
fn warm_up() -> usize {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "w",
    ]))]))
    .unwrap();
    let agent = agent_for(&server, |c| c);
    let mut s = agent.stream("warm").unwrap();
    drain(&mut s);
    drop(s);
    drop(agent);
    panto::http::close_idle_connections();
    eventually("warm-up sockets to close", || {
        server.connections_open() == 0
    });
    drop(server);
    panto_threads()
}

#[test]
fn pull_events_equal_push_events_one_for_one() {
    let _g = serial();
    let push = {
        let server = TestServer::start(script::scenario(two_step())).unwrap();
        let agent = agent_for(&server, |c| c);
        weather(&agent);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut c = Collect::default();
        rt.block_on(agent.run(
            "weather?",
            &mut c,
            &TurnControl::default(),
            Default::default(),
        ))
        .unwrap();
        c.0
    };
    let server = TestServer::start(script::scenario(two_step())).unwrap();
    let agent = agent_for(&server, |c| c);
    weather(&agent);
    let mut s = agent.stream("weather?").unwrap();
    let (pull, err) = drain(&mut s);
    assert!(err.is_none(), "{err:?}");
    // Tool results arrive live, in completion order, which may differ between runs; compare
    // them as a set and everything else in order.
    let key = |evs: &[Event]| {
        let mut ordered = Vec::new();
        let mut results = Vec::new();
        for e in evs {
            match e {
                Event::ToolResult { .. } | Event::ToolCallStart { .. } => results.push(e.to_json()),
                _ => ordered.push(e.to_json()),
            }
        }
        results.sort();
        (ordered, results)
    };
    assert_eq!(key(&pull), key(&push));
    assert_eq!(pull.len(), push.len());
    assert!(pull.last().unwrap().is_terminal());
}

#[test]
fn exhausted_only_after_message_complete_and_forever() {
    let _g = serial();
    let server = TestServer::start(script::scenario(two_step())).unwrap();
    let agent = agent_for(&server, |c| c);
    weather(&agent);
    let mut s = agent.stream("go").unwrap();
    let (events, err) = drain(&mut s);
    assert!(err.is_none());
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
    assert!(events.last().unwrap().is_terminal());
    for _ in 0..3 {
        assert_eq!(s.next().unwrap(), None);
        assert_eq!(
            s.next_timeout(Duration::from_millis(1)).unwrap(),
            Next::Done
        );
    }
    // A cancel after completion changes nothing.
    s.cancel();
    assert_eq!(s.next().unwrap(), None);
}

#[test]
fn errors_are_sticky_and_no_event_follows() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(script::http_error(
        401,
        "authentication_error",
        json!({}),
    ))]))
    .unwrap();
    let agent = agent_for(&server, |c| c);
    let mut s = agent.stream("x").unwrap();
    let (events, err) = drain(&mut s);
    assert!(events.is_empty());
    assert_eq!(err.unwrap().kind, ErrorKind::Authentication);
    for _ in 0..3 {
        assert_eq!(s.next().unwrap_err().kind, ErrorKind::Authentication);
    }
    // The iterator yields the failure once, then ends.
    let mut s = {
        server.reset();
        agent.stream("y").unwrap()
    };
    let items: Vec<_> = s.events().collect();
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].as_ref().unwrap_err().kind,
        ErrorKind::Authentication
    );
}

fn stalled_after_first_delta() -> Vec<Value> {
    let mut sse = script::openai_text_events(&["partial"]);
    sse.truncate(2);
    vec![exchange(
        json!({"sse": sse, "fault": {"kind": "stall", "after_bytes": 1_000_000}}),
    )]
}

#[test]
fn cancel_from_another_thread_wakes_a_blocked_next() {
    let _g = serial();
    let threads = warm_up();
    let server = TestServer::start(script::scenario(stalled_after_first_delta())).unwrap();
    let agent = agent_for(&server, |c| c);
    let mut s = agent.stream("x").unwrap();
    // Read until the stream is known to be stalled mid-message.
    loop {
        if let Event::ContentDelta { .. } = s.next().unwrap().unwrap() {
            break;
        }
    }
    assert_eq!(
        s.next_timeout(Duration::from_millis(20)).unwrap(),
        Next::Pending
    );
    let control = s.control();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let r = s.next();
        tx.send(()).unwrap();
        (r, s)
    });
    // Establish that the waiter really is blocked inside next(): the stream says its
    // consumer is waiting, and the kernel says the thread is asleep.
    let tid = tid_rx.recv_timeout(DEADLINE).unwrap();
    eventually("the waiter to block in next()", || {
        control.consumer_waiting() && thread_state(tid) == Some('S')
    });
    assert!(rx.try_recv().is_err(), "next() returned before the cancel");
    control.cancel();
    control.cancel(); // idempotent
    rx.recv_timeout(DEADLINE)
        .expect("cancel did not wake the blocked next()");
    let (r, mut s) = waiter.join().unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
    drop(s);
    panto::message::validate_history(&agent.history()).unwrap();
    drop(agent);
    assert_released(&server, threads);
}

/// The scheduling state of thread `tid` of this process (`R`, `S`, `D`…).
fn thread_state(tid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The state follows the parenthesized command name, which may contain spaces.
    stat.rsplit_once(") ")?.1.chars().next()
}

#[test]
fn drop_while_the_turn_is_paused_on_a_full_queue() {
    let _g = serial();
    let threads = warm_up();
    let pieces: Vec<String> = (0..500).map(|i| format!("w{i} ")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let server =
        TestServer::start(script::scenario(vec![exchange(script::openai_text(&refs))])).unwrap();
    let agent = agent_for(&server, |c| c.with_queue_capacity(2));
    let mut s = agent.stream("x").unwrap();
    let control = s.control();
    assert!(matches!(
        s.next().unwrap(),
        Some(Event::MessageStart { .. })
    ));
    // The turn fills the 2-slot queue and its outbox, and pauses; the 500-chunk response
    // cannot finish. Establish that before dropping.
    eventually("the turn to pause on the full queue", || {
        control.turn_paused()
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(s);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(DEADLINE)
        .expect("dropping a stream whose turn is paused hung");
    assert_eq!(active_streams(), 0, "drop waits for the turn to end");
    // The half-read response's socket closes with the stream, not with the agent.
    eventually("the dropped stream's socket to close", || {
        server.connections_open() == 0
    });
    panto::message::validate_history(&agent.history()).unwrap();
    drop(agent);
    assert_released(&server, threads);
}

#[test]
fn drop_while_a_host_tool_is_awaited() {
    let _g = serial();
    let threads = warm_up();
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_tool_calls(
        &[("h", "ask_user", "{}")],
    ))]))
    .unwrap();
    let spec = ToolSpec {
        name: "ask_user".into(),
        description: "".into(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = agent_for(&server, |c| c.with_host_tool(spec));
    let mut s = agent.stream("x").unwrap();
    let control = s.control();
    loop {
        if let Some(Event::ToolCallStart { host, .. }) = s.next().unwrap() {
            assert!(host);
            break;
        }
    }
    assert_eq!(
        s.next_timeout(Duration::from_millis(10)).unwrap(),
        Next::Pending
    );
    drop(s);
    assert_eq!(active_streams(), 0);
    // The call was given a cancelled result; answering it now is a tool error.
    assert_eq!(
        control
            .submit_tool_result("h", "late", false)
            .unwrap_err()
            .kind,
        ErrorKind::Tool
    );
    let h = agent.history();
    panto::message::validate_history(&h).unwrap();
    assert_eq!(h.len(), 3);
    drop(agent);
    assert_released(&server, threads);
}

#[test]
fn host_tool_results_submitted_through_the_stream() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "h",
            "ask_user",
            r#"{"q":"name?"}"#,
        )])),
        exchange(script::openai_text(&["Hello Ada"])),
    ]))
    .unwrap();
    let spec = ToolSpec {
        name: "ask_user".into(),
        description: "".into(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = agent_for(&server, |c| c.with_host_tool(spec));
    let mut s = agent.stream("x").unwrap();
    let mut saw = Vec::new();
    while let Some(ev) = s.next().unwrap() {
        if let Event::ToolCallStart {
            call_id,
            host: true,
            ..
        } = &ev
        {
            assert_eq!(
                s.submit_tool_result("nope", "x", false).unwrap_err().kind,
                ErrorKind::Tool
            );
            s.submit_tool_result(call_id, "Ada", false).unwrap();
        }
        saw.push(ev);
    }
    match saw.last().unwrap() {
        Event::MessageComplete { text, .. } => assert_eq!(text, "Hello Ada"),
        other => panic!("{other:?}"),
    }
    assert!(server.requests()[1].body.to_string().contains("Ada"));
}

#[test]
fn a_slow_consumer_does_not_freeze_tools() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("a", "mark", "{}"),
            ("b", "mark", "{}"),
            ("c", "mark", "{}"),
        ])),
        exchange(script::openai_text(&["ok"])),
    ]))
    .unwrap();
    let agent = agent_for(&server, |c| {
        c.with_queue_capacity(1).with_tool_concurrency(3)
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_tx = Arc::new(Mutex::new(done_tx));
    agent
        .add_tool(FnTool::new(
            "mark",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let tx = done_tx.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(1)).await; // a timer must fire too
                    let _ = tx.lock().unwrap().send(());
                    ToolOutput::ok("marked")
                }
            },
        ))
        .unwrap();
    let mut s = agent.stream("x").unwrap();
    loop {
        if let Some(Event::ToolCallStart { .. }) = s.next().unwrap() {
            break;
        }
    }
    // Stop consuming: the worker blocks on the 1-slot queue, yet the started tools (and
    // their timers) must finish.
    done_rx
        .recv_timeout(DEADLINE)
        .expect("tool frozen by a slow consumer");
    let (events, err) = drain(&mut s);
    assert!(err.is_none());
    assert!(events.last().unwrap().is_terminal());
}

#[test]
fn busy_while_streaming_and_free_after_drop() {
    let _g = serial();
    let server = TestServer::start(script::scenario(stalled_after_first_delta())).unwrap();
    let agent = agent_for(&server, |c| c);
    let mut s = agent.stream("x").unwrap();
    assert_eq!(agent.stream("y").unwrap_err().kind, ErrorKind::Busy);
    // Its request has reached the server (which now stalls it) before the scenario
    // changes, so it cannot consume the next stream's exchange.
    while !matches!(s.next().unwrap(), Some(Event::ContentDelta { .. })) {}
    assert_eq!(agent.stream("y").unwrap_err().kind, ErrorKind::Busy);
    drop(s);
    server.set_scenario(script::scenario(vec![exchange(script::openai_text(&[
        "free",
    ]))]));
    let mut s2 = agent.stream("z").unwrap();
    let (events, err) = drain(&mut s2);
    assert!(err.is_none());
    assert!(events.last().unwrap().is_terminal());
}

#[test]
fn streams_of_one_agent_share_a_pooled_connection() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a"])),
        exchange(script::openai_text(&["b"])),
    ]))
    .unwrap();
    let agent = agent_for(&server, |c| c);
    for _ in 0..2 {
        let mut s = agent.stream("x").unwrap();
        assert!(drain(&mut s).1.is_none());
    }
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].connection, reqs[1].connection,
        "the second stream paid a new connect"
    );
    assert_eq!(server.connections_total(), 1);
}

/// A tool whose spec works once (when added) and then panics, so the loop itself panics.
struct PanickyTool(std::sync::atomic::AtomicBool);

impl panto::Tool for PanickyTool {
    fn spec(&self) -> ToolSpec {
        if self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            panic!("spec exploded");
        }
        ToolSpec {
            name: "boom".into(),
            description: "".into(),
            parameters: json!({"type":"object"}),
            needs_approval: false,
            external: false,
        }
    }
    fn call(&self, _: Value, _: panto::CancellationToken) -> panto::ToolFuture {
        Box::pin(async { ToolOutput::ok("") })
    }
}

#[test]
fn a_panicking_worker_is_an_internal_error() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "x",
    ]))]))
    .unwrap();
    let agent = agent_for(&server, |c| c);
    agent.add_tool(PanickyTool(Default::default())).unwrap();
    let mut s = agent.stream("x").unwrap();
    let (events, err) = drain(&mut s);
    assert!(events.is_empty());
    let err = err.unwrap();
    assert_eq!(err.kind, ErrorKind::Internal);
    assert!(err.message.contains("spec exploded"));
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Internal);
    drop(s);
    assert_eq!(active_streams(), 0);
    // The agent is usable again (the turn slot was released by the unwinding).
    assert!(agent.reserve().is_ok());
}

// ---- property test: random pacing, cancels and drops ------------------------------------

#[derive(Debug, Clone)]
enum Stop {
    None,
    CancelAt(usize),
    DropAt(usize),
}

fn stop_strategy() -> impl Strategy<Value = Stop> {
    prop_oneof![
        Just(Stop::None),
        (0usize..40).prop_map(Stop::CancelAt),
        (0usize..40).prop_map(Stop::DropAt)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn contract_holds_under_random_pacing_cancels_and_drops(
        tools in 0usize..4,
        text_pieces in 1usize..30,
        pace_us in proptest::collection::vec(0u64..1500, 8),
        capacity in 1usize..8,
        stop in stop_strategy(),
    ) {
        let _g = serial();
        let calls: Vec<(String, &str, &str)> = (0..tools).map(|i| (format!("c{i}"), "weather", r#"{"city":"X"}"#)).collect();
        let refs: Vec<(&str, &str, &str)> = calls.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
        let pieces: Vec<String> = (0..text_pieces).map(|i| format!("p{i} ")).collect();
        let prefs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let mut ex = Vec::new();
        if tools > 0 {
            ex.push(exchange(script::openai_tool_calls(&refs)));
        }
        ex.push(exchange(script::openai_text(&prefs)));
        let server = TestServer::start(script::scenario(ex)).unwrap();
        let agent = agent_for(&server, |c| c.with_queue_capacity(capacity));
        weather(&agent);
        let mut s = agent.stream("go").unwrap();
        let mut events = Vec::new();
        let mut failure = None;
        let mut dropped = false;
        for i in 0.. {
            match &stop {
                Stop::CancelAt(k) if *k == i => s.cancel(),
                Stop::DropAt(k) if *k == i => { dropped = true; break; }
                _ => {}
            }
            std::thread::sleep(Duration::from_micros(pace_us[i % pace_us.len()]));
            match s.next() {
                Ok(Some(ev)) => {
                    prop_assert!(failure.is_none());
                    events.push(ev);
                }
                Ok(None) => break,
                Err(e) => { failure = Some(e); break; }
            }
        }
        // Contract: message_complete at most once, and only last; exhausted only after it.
        let terminals = events.iter().filter(|e| e.is_terminal()).count();
        prop_assert!(terminals <= 1);
        if terminals == 1 {
            prop_assert!(events.last().unwrap().is_terminal());
        }
        if !dropped {
            match &failure {
                None => {
                    prop_assert_eq!(terminals, 1);
                    prop_assert_eq!(s.next().unwrap(), None);
                }
                Some(e) => {
                    prop_assert_eq!(terminals, 0);
                    prop_assert_eq!(e.kind, ErrorKind::Cancelled);
                    prop_assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
                }
            }
        }
        drop(s);
        prop_assert_eq!(active_streams(), 0);
        panto::message::validate_history(&agent.history()).unwrap();
        drop(agent);
        panto::http::close_idle_connections();
        eventually("sockets closed", || server.connections_open() == 0);
    }
}

#[test]
fn try_next_never_waits_and_drains_a_burst() {
    let _g = serial();
    let server = TestServer::start(script::scenario(stalled_after_first_delta())).unwrap();
    let agent = agent_for(&server, |c| c);
    let mut s = agent.stream("x").unwrap();
    // Wait (blocking) for the first delta, then the stream is stalled: try_next says so
    // at once, every time.
    loop {
        if let Some(Event::ContentDelta { .. }) = s.next().unwrap() {
            break;
        }
    }
    let start = Instant::now();
    for _ in 0..100 {
        assert_eq!(s.try_next().unwrap(), Next::Pending);
    }
    assert!(start.elapsed() < DEADLINE);
    s.cancel();
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);

    // A completed turn drains through try_next alone, ending in Done.
    let server = TestServer::start(script::scenario(two_step())).unwrap();
    let agent = agent_for(&server, |c| c);
    weather(&agent);
    let mut s = agent.stream("go").unwrap();
    let mut events = Vec::new();
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < end, "try_next never delivered the turn");
        match s.try_next().unwrap() {
            Next::Event(ev) => events.push(ev),
            Next::Done => break,
            Next::Pending => std::thread::yield_now(),
        }
    }
    assert!(events.last().unwrap().is_terminal());
}

#[test]
fn next_timeout_without_a_representable_deadline_waits_like_next() {
    let _g = serial();
    let server = TestServer::start(script::scenario(two_step())).unwrap();
    let agent = agent_for(&server, |c| c);
    weather(&agent);
    let mut s = agent.stream("go").unwrap();
    let mut events = Vec::new();
    loop {
        match s.next_timeout(Duration::MAX).unwrap() {
            Next::Event(ev) => events.push(ev),
            Next::Done => break,
            Next::Pending => panic!("an unlimited wait timed out"),
        }
    }
    assert!(events.last().unwrap().is_terminal());
}

#[test]
fn queue_capacity_has_an_upper_bound() {
    let server = TestServer::start(script::scenario(vec![])).unwrap();
    let err = Agent::new(
        Config::new(ProviderKind::OpenAi, "m")
            .with_base_url(server.url())
            .with_queue_capacity(usize::MAX),
    )
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(err.message.starts_with("queue_capacity"), "{}", err.message);
}
