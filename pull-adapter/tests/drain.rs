//! Reading a burst ahead (`drain_ready`, `wait_ready`), the queryable state
//! (`Stream::state`) and `close`: what bindings build on instead of keeping their own
//! terminal state. Events read ahead are delivered by `next` / `try_next` with every
//! rule of the contract applied then: `message_complete` once and last, exhausted only
//! after it, failures after the events before them and sticky, a cancel winning over
//! everything read ahead but not over a delivered `message_complete`.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use panto::{Agent, ErrorKind, Event, ProviderKind};
use panto_pull::{active_streams, AgentStreamExt, Next, Stream, StreamState};
use panto_testkit::{config, eventually};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::json;

/// Tests wait for `active_streams()` (process-wide) to reach 0: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const DEADLINE: Duration = Duration::from_secs(20);
/// More than any turn here produces: a drain takes everything that is ready.
const ALL: usize = 1024;

fn agent_for(server: &TestServer) -> Agent {
    Agent::new(config(ProviderKind::OpenAi, server).with_queue_capacity(256)).unwrap()
}

fn text_turn() -> TestServer {
    TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "a", "b", "c",
    ]))]))
    .unwrap()
}

/// A stream whose turn has ended: every event it produced (the queue holds them all)
/// is ready, so one drain takes the whole turn.
fn finished_stream(agent: &Agent) -> Stream {
    let s = agent.stream("go").unwrap();
    eventually("the turn to end", || active_streams() == 0);
    s
}

fn all_by_next(agent: &Agent) -> Vec<Event> {
    let mut s = agent.stream("again").unwrap();
    let mut events = Vec::new();
    while let Some(ev) = s.next().unwrap() {
        events.push(ev);
    }
    events
}

#[test]
fn a_burst_read_ahead_is_delivered_in_order_and_ends_at_message_complete() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a", "b", "c"])),
        exchange(script::openai_text(&["a", "b", "c"])),
    ]))
    .unwrap();
    let agent = agent_for(&server);
    let mut s = finished_stream(&agent);
    let held = s.drain_ready(ALL);
    assert!(held > 3, "only {held} events read ahead");
    // Nothing follows message_complete: draining again takes nothing more.
    assert_eq!(s.drain_ready(ALL), held);
    // Read ahead is not delivered: the stream is running until message_complete is.
    assert_eq!(s.state(), StreamState::Running);
    let mut events = Vec::new();
    loop {
        match s.try_next().unwrap() {
            Next::Event(ev) => {
                let last = ev.is_terminal();
                events.push(ev);
                assert_eq!(
                    s.state(),
                    if last {
                        StreamState::Done
                    } else {
                        StreamState::Running
                    }
                );
            }
            Next::Done => break,
            Next::Pending => panic!("pending with the whole turn read ahead"),
        }
    }
    assert_eq!(events.len(), held);
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
    assert!(events.last().unwrap().is_terminal());
    for _ in 0..3 {
        assert_eq!(s.next().unwrap(), None);
        assert_eq!(s.try_next().unwrap(), Next::Done);
        assert_eq!(s.drain_ready(ALL), 0);
        assert!(s.wait_ready(Duration::ZERO, ALL));
    }
    drop(s);
    // The same turn taken event by event is the same sequence.
    assert_eq!(all_by_next(&agent), events);
}

#[test]
fn a_cancel_wins_over_a_burst_read_ahead() {
    let _g = serial();
    let server = text_turn();
    let agent = agent_for(&server);
    let mut s = finished_stream(&agent);
    let held = s.drain_ready(ALL);
    assert!(held > 3);
    let Next::Event(first) = s.try_next().unwrap() else {
        panic!("no first event")
    };
    assert!(!first.is_terminal());
    // message_complete is read ahead but not delivered: the cancel wins.
    s.cancel();
    assert_eq!(
        s.state(),
        StreamState::Failed(panto::Error::cancelled()),
        "the state shows a winning cancel before the next call"
    );
    assert!(s.wait_ready(Duration::ZERO, ALL));
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    for _ in 0..3 {
        assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
        assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
        assert_eq!(s.drain_ready(ALL), 0);
    }
    assert!(matches!(s.state(), StreamState::Failed(e) if e.kind == ErrorKind::Cancelled));
}

#[test]
fn a_cancel_after_message_complete_was_delivered_changes_nothing() {
    let _g = serial();
    let server = text_turn();
    let agent = agent_for(&server);
    let mut s = finished_stream(&agent);
    s.drain_ready(ALL);
    while let Next::Event(_) = s.try_next().unwrap() {}
    assert_eq!(s.state(), StreamState::Done);
    let control = s.control();
    control.cancel();
    s.cancel();
    assert!(
        !control.is_cancelled(),
        "a cancel after completion took effect"
    );
    assert_eq!(s.state(), StreamState::Done);
    assert_eq!(s.next().unwrap(), None);
    // Closing a completed stream keeps it completed.
    s.close();
    assert_eq!(s.state(), StreamState::Done);
    assert_eq!(s.next().unwrap(), None);
}

#[test]
fn a_failure_read_ahead_follows_the_events_before_it_and_sticks() {
    let _g = serial();
    // The body ends after the first delta: no finish_reason, no [DONE].
    let mut sse = script::openai_text_events(&["cut", "short"]);
    sse.truncate(2);
    let server =
        TestServer::start(script::scenario(vec![exchange(json!({ "sse": sse }))])).unwrap();
    let agent = agent_for(&server);
    let mut s = finished_stream(&agent);
    let held = s.drain_ready(ALL);
    assert!(held >= 2, "{held}");
    assert_eq!(s.state(), StreamState::Running);
    let mut events = Vec::new();
    let err = loop {
        match s.try_next() {
            Ok(Next::Event(ev)) => events.push(ev),
            Ok(other) => panic!("{other:?} before the failure"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind, ErrorKind::Incomplete);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ContentDelta { .. })));
    assert!(events.iter().all(|e| !e.is_terminal()));
    assert_eq!(events.len() + 1, held, "the failure came last");
    assert_eq!(s.state(), StreamState::Failed(err.clone()));
    for _ in 0..3 {
        assert_eq!(s.next().unwrap_err(), err);
        assert_eq!(s.try_next().unwrap_err(), err);
        assert_eq!(s.drain_ready(ALL), 0);
    }
    // A cancel after a failure changes nothing either: the failure stays.
    s.cancel();
    s.close();
    assert_eq!(s.next().unwrap_err(), err);
}

fn stalled_after_first_delta() -> TestServer {
    let mut sse = script::openai_text_events(&["partial"]);
    sse.truncate(2);
    TestServer::start(script::scenario(vec![exchange(
        json!({"sse": sse, "fault": {"kind": "stall", "after_bytes": 1_000_000}}),
    )]))
    .unwrap()
}

#[test]
fn wait_ready_waits_reads_ahead_and_a_cancel_wakes_it() {
    let _g = serial();
    let server = stalled_after_first_delta();
    let agent = agent_for(&server);
    let mut s = agent.stream("x").unwrap();
    // Wait for the first delta through wait_ready alone; nothing is delivered by it.
    let mut events = Vec::new();
    while !events
        .iter()
        .any(|e| matches!(e, Event::ContentDelta { .. }))
    {
        assert!(s.wait_ready(DEADLINE, ALL), "nothing within the deadline");
        while let Next::Event(ev) = s.try_next().unwrap() {
            events.push(ev);
        }
    }
    // Stalled: a drain takes nothing and never waits; a short wait times out.
    let start = Instant::now();
    for _ in 0..100 {
        assert_eq!(s.drain_ready(ALL), 0);
    }
    assert!(start.elapsed() < DEADLINE);
    assert!(!s.wait_ready(Duration::from_millis(20), ALL));
    assert_eq!(s.state(), StreamState::Running);
    // A wait blocked on another thread wakes at a cancel.
    let control = s.control();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let ready = s.wait_ready(Duration::MAX, ALL);
        tx.send(()).unwrap();
        (ready, s)
    });
    eventually("wait_ready to block", || control.consumer_waiting());
    assert!(
        rx.try_recv().is_err(),
        "wait_ready returned before the cancel"
    );
    control.cancel();
    rx.recv_timeout(DEADLINE)
        .expect("cancel did not wake wait_ready");
    let (ready, mut s) = waiter.join().unwrap();
    assert!(ready);
    assert_eq!(s.try_next().unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
    drop(s);
    panto::message::validate_history(&agent.history()).unwrap();
}

#[test]
fn close_ends_a_running_stream_as_cancelled_and_keeps_its_state() {
    let _g = serial();
    let server = stalled_after_first_delta();
    let agent = agent_for(&server);
    let mut s = agent.stream("x").unwrap();
    let Some(_) = s.next().unwrap() else {
        panic!("no first event")
    };
    s.close();
    // The turn is over (close waits for it), the agent is free, and the stream answers
    // `cancelled` from now on.
    assert_eq!(active_streams(), 0);
    assert!(matches!(s.state(), StreamState::Failed(e) if e.kind == ErrorKind::Cancelled));
    for _ in 0..3 {
        assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
    }
    s.close();
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Cancelled);
    panto::message::validate_history(&agent.history()).unwrap();
}

// ---- property test: reading ahead in random ways never bends the contract -------------

use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Next,
    TryNext,
    Drain(usize),
    WaitReady(u64),
    Cancel,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Next),
        3 => Just(Op::TryNext),
        2 => (0usize..6).prop_map(Op::Drain),
        2 => (0u64..3).prop_map(Op::WaitReady),
        1 => Just(Op::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_contract_holds_whatever_mix_of_reads_ahead_and_takes(
        pieces in 1usize..20,
        capacity in 1usize..6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let _g = serial();
        let texts: Vec<String> = (0..pieces).map(|i| format!("p{i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&refs))])).unwrap();
        let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_queue_capacity(capacity)).unwrap();
        let mut s = agent.stream("go").unwrap();
        let mut events = Vec::new();
        let mut end: Option<Result<(), panto::Error>> = None;
        let mut cancelled_before_end = false;
        // The ops, then `next` until the end.
        let tail = std::iter::repeat_n(Op::Next, 10_000);
        for op in ops.iter().cloned().chain(tail) {
            let took = match op {
                Op::Next => Some(s.next().map(|e| e.map_or(Next::Done, Next::Event))),
                Op::TryNext => Some(s.try_next()),
                Op::Drain(k) => { s.drain_ready(k); None }
                Op::WaitReady(ms) => { s.wait_ready(Duration::from_millis(ms), 4); None }
                Op::Cancel => {
                    if !matches!(s.state(), StreamState::Done) && end.is_none() {
                        cancelled_before_end = true;
                    }
                    s.cancel();
                    None
                }
            };
            match (took, &end) {
                (None, _) | (Some(Ok(Next::Pending)), None) => {}
                (Some(Ok(Next::Event(ev))), None) => events.push(ev),
                (Some(Ok(Next::Done)), None) => end = Some(Ok(())),
                (Some(Err(e)), None) => end = Some(Err(e)),
                // After the end, the same end again, whatever the call.
                (Some(Ok(Next::Done)), Some(Ok(()))) => {}
                (Some(Err(e)), Some(Err(first))) => prop_assert_eq!(&e, first),
                (Some(other), Some(first)) => prop_assert!(false, "{other:?} after {first:?}"),
            }
            if end.is_some() && matches!(op, Op::Next) {
                break;
            }
        }
        let terminals = events.iter().filter(|e| e.is_terminal()).count();
        prop_assert!(terminals <= 1);
        match end {
            Some(Ok(())) => {
                prop_assert_eq!(terminals, 1);
                prop_assert!(events.last().unwrap().is_terminal());
                prop_assert_eq!(s.state(), StreamState::Done);
            }
            Some(Err(e)) => {
                prop_assert_eq!(terminals, 0);
                prop_assert!(cancelled_before_end, "failed without a cancel: {e}");
                prop_assert_eq!(e.kind, ErrorKind::Cancelled);
                prop_assert_eq!(s.state(), StreamState::Failed(e));
            }
            None => prop_assert!(false, "no end"),
        }
        drop(s);
        prop_assert_eq!(active_streams(), 0);
        panto::message::validate_history(&agent.history()).unwrap();
    }
}
