//! The spine under real use: events are delivered while the server is still busy,
//! backpressure never becomes a timeout, pooled connections stay healthy across push and
//! pull turns, agents stream side by side, and a thousand streams need no thousand
//! threads. Servers hold or flood at a gate (`panto-testserver`), so every wait here is
//! on a state the test has established, never on a sleep.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use panto::{Agent, Collect, ErrorKind, Event, ProviderKind, Timeouts, ToolSpec, TurnControl};
use panto_pull::{active_streams, worker_threads, AgentStreamExt, Next, Stream};
use panto_testkit::threads::panto_threads;
use panto_testkit::{config, eventually};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(30);

static SERIAL: Mutex<()> = Mutex::new(());

/// Thread counts and timing-sensitive waits: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The next event, failing the test (instead of hanging) if none comes in time.
fn next_event(s: &mut Stream) -> Event {
    match s.next_timeout(DEADLINE) {
        Ok(Next::Event(ev)) => ev,
        other => panic!("expected an event, got {other:?}"),
    }
}

fn drain(s: &mut Stream) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        match s.next_timeout(DEADLINE) {
            Ok(Next::Event(ev)) => events.push(ev),
            Ok(Next::Done) => return events,
            other => panic!("stream ended with {other:?} after {} events", events.len()),
        }
    }
}

fn final_text(events: &[Event]) -> String {
    match events.last() {
        Some(Event::MessageComplete { text, .. }) => text.clone(),
        other => panic!("not complete: {other:?}"),
    }
}

/// The body bytes of SSE items as the test server writes them.
fn sse_len(items: &[Value]) -> usize {
    script::sse_len(items).unwrap()
}

fn pieces(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i} ")).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// An Anthropic text response whose server floods `ping` events after the first `k`
/// deltas, until the gate opens.
fn anthropic_flood_after(k: usize, total: usize) -> Value {
    let words = pieces("w", total);
    let sse = script::anthropic_text_events(&refs(&words));
    // message_start, content_block_start, then the deltas.
    let after = sse_len(&sse[..2 + k]);
    json!({"sse": sse, "fault": {"kind": "flood", "after_bytes": after,
        "chunk": {"event": "ping", "data": {"type": "ping"}}}})
}

// ---- 1. prompt delivery ---------------------------------------------------------------

#[test]
fn the_first_delta_arrives_while_the_server_floods_pings() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(anthropic_flood_after(
        1, 2,
    ))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::Anthropic, &server)).unwrap();
    let mut s = agent.stream("x").unwrap();
    loop {
        if let Event::ContentDelta { text, .. } = next_event(&mut s) {
            assert_eq!(text, "w0 ");
            break;
        }
    }
    // The gate is still closed, so the flood cannot have ended: the delta came through
    // while it runs (the server counts itself held a moment after writing the delta).
    eventually("the server to be flooding", || server.held() == 1);
    server.open_gate();
    assert_eq!(final_text(&drain(&mut s)), "w0 w1 ");
}

#[test]
fn a_burst_of_seventy_events_arrives_whole_while_the_server_floods() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(anthropic_flood_after(
        70, 71,
    ))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::Anthropic, &server)).unwrap();
    let mut s = agent.stream("x").unwrap();
    let mut deltas = 0;
    while deltas < 70 {
        if let Event::ContentDelta { .. } = next_event(&mut s) {
            deltas += 1;
        }
    }
    // The gate is still closed: whatever arrived did not wait for what it holds.
    eventually(
        "the server to hold (the last events waited for the flood to end)",
        || server.held() == 1,
    );
    server.open_gate();
    drain(&mut s);
}

#[test]
fn keepalive_comment_floods_do_not_hold_events_back_either() {
    let _g = serial();
    let sse = script::openai_text_events(&["thinking done", " answer"]);
    let after = sse_len(&sse[..2]);
    let server = TestServer::start(script::scenario(vec![exchange(json!({"sse": sse,
        "fault": {"kind": "flood", "after_bytes": after,
            "chunk": {"comment": "OPENROUTER PROCESSING"}}}))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let mut s = agent.stream("x").unwrap();
    loop {
        if let Event::ContentDelta { .. } = next_event(&mut s) {
            break;
        }
    }
    eventually("the server to be flooding", || server.held() == 1);
    server.open_gate();
    assert_eq!(final_text(&drain(&mut s)), "thinking done answer");
}

// ---- 2. backpressure is not idleness --------------------------------------------------

/// One raw SSE chunk holding `n` OpenAI text deltas (`{prefix}{i} ` each): the server
/// writes it as one HTTP chunk, so the client reads all of it at once.
fn delta_burst(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{prefix}{i} \"}}}}]}}\n\n"
            )
        })
        .collect()
}

#[test]
fn a_consumer_pausing_three_idle_periods_at_a_time_gets_the_whole_turn() {
    let _g = serial();
    let idle_ms = 400;
    let tail = script::openai_text_events(&[]);
    let (head, tail) = tail.split_at(1); // the role chunk; then finish, usage, [DONE]
    let first = delta_burst("a", 100);
    let second = delta_burst("b", 100);
    let mut sse: Vec<Value> = head.to_vec();
    sse.push(json!(first));
    sse.push(json!(second));
    sse.extend(tail.iter().cloned());
    // The server sends the role chunk and one burst of 100 events, then waits at the
    // gate: the turn reads the whole burst, and its queue (1 slot) and outbox fill, so it
    // pauses with nothing left to read.
    let after = sse_len(head) + first.len();
    let server = TestServer::start(script::scenario(vec![exchange(
        json!({"sse": sse, "fault": {"kind": "hold", "after_bytes": after}}),
    )]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server)
            .with_queue_capacity(1)
            .with_timeouts(Timeouts {
                connect_ms: 5000,
                idle_ms,
                request_ms: 600_000,
            }),
    )
    .unwrap();
    let mut s = agent.stream("x").unwrap();
    let control = s.control();
    let mut events = vec![next_event(&mut s)];
    let pause = || std::thread::sleep(Duration::from_millis(3 * idle_ms));

    // Pause 1: the turn is held back by the full queue, the server is at its gate, and
    // the consumer stays away for three idle periods. Once it drains the queue the turn
    // waits on a socket with nothing to read: an idle timer that had counted the
    // consumer's pause would fire at once.
    eventually("the turn to pause on the full queue", || {
        control.turn_paused() && server.held() == 1
    });
    pause();
    loop {
        let ev = next_event(&mut s);
        let last_of_burst = matches!(&ev, Event::ContentDelta { text, .. } if text == "a99 ");
        events.push(ev);
        if last_of_burst {
            break;
        }
    }
    // Everything before the gate is delivered and the turn is waiting on the socket;
    // the server goes on well within idle_ms.
    assert!(matches!(
        s.next_timeout(Duration::from_millis(10)).unwrap(),
        Next::Pending
    ));
    server.open_gate();

    // Pause 2, in the second burst.
    eventually("the turn to pause again", || control.turn_paused());
    pause();
    events.extend(drain(&mut s));
    let want: String = (0..100)
        .map(|i| format!("a{i} "))
        .chain((0..100).map(|i| format!("b{i} ")))
        .collect();
    assert_eq!(final_text(&events), want);
}

// ---- 3. one runtime model: pooled connections stay healthy ---------------------------

#[test]
fn push_after_pull_and_pull_after_push_on_one_agent() {
    let _g = serial();
    let server = TestServer::start(script::scenario(
        (0..6)
            .map(|i| exchange(script::openai_text(&[&format!("turn {i}")])))
            .collect(),
    ))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let pull = |agent: &Agent| {
        let mut s = agent.stream("x").unwrap();
        final_text(&drain(&mut s))
    };
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let push = |rt: &tokio::runtime::Runtime, agent: &Agent| {
        let agent = agent.clone();
        rt.block_on(async move {
            let mut events = Collect::default();
            tokio::time::timeout(
                DEADLINE,
                agent.run(
                    "x",
                    &mut events,
                    &TurnControl::default(),
                    Default::default(),
                ),
            )
            .await
            .expect("the push turn hung")
            .unwrap()
            .text
        })
    };
    assert_eq!(pull(&agent), "turn 0");
    assert_eq!(push(&multi, &agent), "turn 1");
    assert_eq!(pull(&agent), "turn 2");
    // The current-thread runtime is not driven between its turns: its connections must
    // not be handed to a pull turn, nor its pull connections to it.
    assert_eq!(push(&current, &agent), "turn 3");
    assert_eq!(pull(&agent), "turn 4");
    assert_eq!(push(&current, &agent), "turn 5");
}

#[test]
fn idle_connections_the_server_closed_are_not_reused() {
    let _g = serial();
    let server = TestServer::start(script::scenario(
        (0..4)
            .map(|i| exchange(script::openai_text(&[&format!("turn {i}")])))
            .collect(),
    ))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    for i in 0..4 {
        let mut s = agent.stream("x").unwrap();
        assert_eq!(final_text(&drain(&mut s)), format!("turn {i}"));
        drop(s);
        // The server drops the keep-alive connection while the agent is idle.
        eventually("the connection to go idle", || {
            server.close_idle_connections() > 0 || server.connections_open() == 0
        });
        eventually("the closed connection to be gone", || {
            server.connections_open() == 0
        });
    }
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn a_hundred_agents_one_after_another_share_each_workers_connection() {
    // One agent per request, as C, Go and Python hosts scale out: every agent is made,
    // streams one turn and is freed before the next. Connections are the process's, per
    // worker thread, so the agents share one per worker (an agent's own pool: 100).
    let _g = serial();
    const AGENTS: usize = 100;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": AGENTS,
        "response": script::openai_text(&["shared"]),
    })]))
    .unwrap();
    for i in 0..AGENTS {
        let agent =
            Agent::new(config(ProviderKind::OpenAi, &server).with_api_key(format!("sk-agent-{i}")))
                .unwrap();
        let mut s = agent.stream("x").unwrap();
        assert_eq!(final_text(&drain(&mut s)), "shared");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), AGENTS);
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(
            r.headers.get("authorization"),
            Some(&format!("Bearer sk-agent-{i}")),
            "request {i} carried another agent's key"
        );
    }
    let connections = server.connections_total();
    assert!(
        connections <= worker_threads(),
        "{AGENTS} agents on {} workers opened {connections} connections",
        worker_threads()
    );
}

#[test]
fn ten_turns_reuse_one_connection() {
    let _g = serial();
    let server = TestServer::start(script::scenario(
        (0..10)
            .map(|i| exchange(script::openai_text(&[&format!("turn {i}")])))
            .collect(),
    ))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    for i in 0..10 {
        let mut s = agent.stream("x").unwrap();
        assert_eq!(final_text(&drain(&mut s)), format!("turn {i}"));
    }
    assert_eq!(server.connections_total(), 1, "a turn paid a new connect");
}

#[test]
fn two_agents_stream_at_once() {
    let _g = serial();
    let words = pieces("a", 200);
    let server_a = TestServer::start(script::scenario(vec![exchange(script::openai_text(
        &refs(&words),
    ))]))
    .unwrap();
    let server_b = TestServer::start(script::scenario(vec![exchange(script::anthropic_text(
        &refs(&words),
    ))]))
    .unwrap();
    let a = Agent::new(config(ProviderKind::OpenAi, &server_a).with_queue_capacity(2)).unwrap();
    let b = Agent::new(config(ProviderKind::Anthropic, &server_b).with_queue_capacity(2)).unwrap();
    let mut sa = a.stream("x").unwrap();
    let mut sb = b.stream("y").unwrap();
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    let (mut done_a, mut done_b) = (false, false);
    // Interleaved, one event at a time from each.
    while !(done_a && done_b) {
        for (s, events, done) in [
            (&mut sa, &mut ea, &mut done_a),
            (&mut sb, &mut eb, &mut done_b),
        ] {
            if *done {
                continue;
            }
            match s.next_timeout(DEADLINE).unwrap() {
                Next::Event(ev) => events.push(ev),
                Next::Done => *done = true,
                Next::Pending => panic!("a stream stalled"),
            }
        }
    }
    assert_eq!(final_text(&ea), words.concat());
    assert_eq!(final_text(&eb), words.concat());
}

/// Many short turns on a one-slot queue: the turn ends right after its burst, while
/// the consumer decides whether to wait for the worker's hand-off or take the rest
/// itself. A hand-off that could be missed in that window (the consumer seeing the turn
/// still running just before it stopped for good) leaves a stream stalled with its last
/// events in the outbox; over hundreds of turns that window is hit.
#[test]
fn short_turns_on_a_one_slot_queue_all_end() {
    let _g = serial();
    const TURNS: usize = 400;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": TURNS,
        "response": {"sse": script::openai_text_events(&["one ", "two ", "three"])}
    })]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_queue_capacity(1)).unwrap();
    for i in 0..TURNS {
        let mut s = agent.stream("x").unwrap();
        let events = drain(&mut s);
        assert_eq!(final_text(&events), "one two three", "turn {i}");
    }
}

#[test]
fn a_thousand_streams_at_once_on_a_bounded_number_of_threads() {
    let _g = serial();
    const STREAMS: usize = 1000;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": STREAMS,
        "response": {"sse": script::openai_text_events(&["one ", "of ", "many"]), "chunk_delay_ms": 2}
    })]))
    .unwrap();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let before = active_streams();
    let agents: Vec<Agent> = (0..STREAMS)
        .map(|_| Agent::new(config(ProviderKind::OpenAi, &server)).unwrap())
        .collect();
    let mut streams: Vec<Stream> = agents.iter().map(|a| a.stream("x").unwrap()).collect();
    assert!(active_streams() > before);
    let mut most_threads = panto_threads();
    // Round-robin consumption, as many consumer threads would do.
    let mut done = vec![false; STREAMS];
    let mut texts = vec![String::new(); STREAMS];
    let end = Instant::now() + Duration::from_secs(120);
    while done.iter().any(|d| !d) {
        assert!(Instant::now() < end, "the streams did not finish");
        for (i, s) in streams.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match s.next_timeout(Duration::from_millis(1)).unwrap() {
                Next::Event(Event::MessageComplete { text, .. }) => texts[i] = text,
                Next::Event(_) | Next::Pending => {}
                Next::Done => done[i] = true,
            }
        }
        most_threads = most_threads.max(panto_threads());
    }
    assert!(texts.iter().all(|t| t == "one of many"));
    assert!(
        most_threads <= cores + 4,
        "{most_threads} panto threads for {STREAMS} streams on {cores} cores"
    );
    assert!(worker_threads() <= cores.max(2));
    drop(streams);
    assert_eq!(active_streams(), before);
}

// ---- 4. host tools are announced at once ----------------------------------------------

#[test]
fn a_host_call_is_announced_while_another_stream_floods_the_same_worker() {
    let _g = serial();
    let flood_server = TestServer::start(script::scenario(vec![exchange(anthropic_flood_after(
        1, 2,
    ))]))
    .unwrap();
    let host_server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[("h1", "ask", "{}")])),
        exchange(script::openai_text(&["thanks"])),
    ]))
    .unwrap();
    let flooder = Agent::new(config(ProviderKind::Anthropic, &flood_server)).unwrap();
    // An agent whose turns run on the flooder's worker thread.
    let spec = ToolSpec {
        name: "ask".into(),
        description: String::new(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let asker = std::iter::repeat_with(|| {
        Agent::new(config(ProviderKind::OpenAi, &host_server).with_host_tool(spec.clone())).unwrap()
    })
    .find(|a| (a.id() as usize) % worker_threads() == (flooder.id() as usize) % worker_threads())
    .unwrap();
    let mut flood = flooder.stream("x").unwrap();
    while !matches!(next_event(&mut flood), Event::ContentDelta { .. }) {}
    eventually("the other stream's server to flood", || {
        flood_server.held() == 1
    });
    let mut s = asker.stream("y").unwrap();
    let call_id = loop {
        if let Event::ToolCallStart {
            call_id,
            host: true,
            ..
        } = next_event(&mut s)
        {
            break call_id;
        }
    };
    assert_eq!(
        flood_server.held(),
        1,
        "announced only after the flood ended"
    );
    s.submit_tool_result(&call_id, "Ada", false).unwrap();
    assert_eq!(final_text(&drain(&mut s)), "thanks");
    flood_server.open_gate();
    drain(&mut flood);
}

/// The scheduling state of thread `tid` of this process (`R`, `S`, `D`…).
fn thread_state(tid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

#[test]
fn events_reach_a_waiting_consumer_when_the_worker_goes_idle() {
    let _g = serial();
    // "Let me ask." at once; at the gate, a host tool call, after which the turn waits
    // for its answer and the worker has nothing left to do.
    let mut sse = script::openai_tool_calls_events(&[("h1", "ask", "{}")]);
    sse[0] = json!({"data": {"id": "chatcmpl-tools", "object": "chat.completion.chunk",
        "created": 1, "model": "scripted-model", "choices": [{"index": 0,
        "delta": {"role": "assistant", "content": "Let me ask."}, "finish_reason": null}]}});
    let first = sse_len(&sse[..1]);
    let server = TestServer::start(script::scenario(vec![
        exchange(json!({"sse": sse, "fault": {"kind": "hold", "after_bytes": first}})),
        exchange(script::openai_text(&["thanks"])),
    ]))
    .unwrap();
    let spec = ToolSpec {
        name: "ask".into(),
        description: String::new(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_host_tool(spec)).unwrap();
    let mut s = agent.stream("x").unwrap();
    while !matches!(next_event(&mut s), Event::ContentDelta { .. }) {}
    eventually("the server to hold the rest", || server.held() == 1);
    // A consumer blocked in `next` before the rest is even sent...
    let control = s.control();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let call_id = loop {
            if let Event::ToolCallStart {
                call_id,
                host: true,
                ..
            } = next_event(&mut s)
            {
                break call_id;
            }
        };
        (call_id, s)
    });
    let tid = tid_rx.recv().unwrap();
    eventually("the consumer to block in next()", || {
        control.consumer_waiting() && thread_state(tid) == Some('S')
    });
    server.open_gate();
    // ...gets the call, produced by a later poll of the turn after which the worker goes
    // idle (the turn waits for the answer): the worker hands it over before it sleeps,
    // or when it is FLUSH_AFTER old, never only at the tool's timeout. (The unit tests
    // in src/handoff.rs take each of those two paths alone.)
    let (call_id, mut s) = waiter.join().unwrap();
    s.submit_tool_result(&call_id, "Ada", false).unwrap();
    assert_eq!(final_text(&drain(&mut s)), "thanks");
}

// ---- 9. the end of a body is not waited for -------------------------------------------

#[test]
fn message_complete_does_not_wait_for_the_rest_of_the_body() {
    let _g = serial();
    // The server sends the whole answer, [DONE] included, then holds the body open.
    let sse = script::openai_text_events(&["finished"]);
    let all = sse_len(&sse);
    let server = TestServer::start(script::scenario(vec![exchange(
        json!({"sse": sse, "fault": {"kind": "hold", "after_bytes": all}}),
    )]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let mut s = agent.stream("x").unwrap();
    assert_eq!(final_text(&drain(&mut s)), "finished");
    // The gate is still closed: whatever arrived did not wait for what it holds.
    eventually(
        "the server to hold (message_complete waited for the body's end)",
        || server.held() == 1,
    );
    server.open_gate();
}

#[test]
fn the_next_step_does_not_wait_for_the_rest_of_the_body() {
    let _g = serial();
    let sse = script::openai_tool_calls_events(&[("h1", "ask", "{}")]);
    let all = sse_len(&sse);
    let server = TestServer::start(script::scenario(vec![
        exchange(json!({"sse": sse, "fault": {"kind": "hold", "after_bytes": all}})),
        exchange(script::openai_text(&["next step"])),
    ]))
    .unwrap();
    let spec = ToolSpec {
        name: "ask".into(),
        description: String::new(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_host_tool(spec)).unwrap();
    let mut s = agent.stream("x").unwrap();
    let mut events = Vec::new();
    loop {
        let ev = next_event(&mut s);
        if let Event::ToolCallStart { call_id, .. } = &ev {
            s.submit_tool_result(call_id, "answer", false).unwrap();
        }
        let last = ev.is_terminal();
        events.push(ev);
        if last {
            break;
        }
    }
    assert_eq!(final_text(&events), "next step");
    // The gate is still closed: whatever arrived did not wait for what it holds.
    eventually(
        "the server to hold (the second request waited for the first body's end)",
        || server.held() == 1,
    );
    assert_eq!(server.requests().len(), 2);
    server.open_gate();
}

#[test]
fn a_failed_stream_reports_its_kind_and_frees_the_agent() {
    let _g = serial();
    let server = TestServer::start(script::scenario(vec![exchange(script::http_error(
        401,
        "authentication_error",
        json!({}),
    ))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let mut s = agent.stream("x").unwrap();
    assert_eq!(s.next().unwrap_err().kind, ErrorKind::Authentication);
    assert!(agent.reserve().is_ok());
}
