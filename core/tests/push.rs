//! The push loop as async Rust uses it: a `Send` future that can be `tokio::spawn`ed on
//! a multi-thread runtime, dropped at any await point (how `timeout` and `select!`
//! cancel) without corrupting the history or leaving tools running, and time limits that
//! match what users mean. Also the turn rules of a reply cut off by the output limit and
//! the cap on tool output.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use panto::message::{history_from_json, validate_history};
use panto::{
    Agent, Block, Collect, Config, ErrorKind, Event, FnTool, ProviderKind, RetryConfig, StopReason,
    Timeouts, ToolOutput, TurnControl,
};
use panto_testkit::config;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use proptest::prelude::*;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

fn assert_send<T: Send>(_: &T) {}

#[test]
fn the_push_future_is_send() {
    // Compile-time: this test does not build if `Agent::run` stops being `Send`.
    let server = TestServer::start(script::scenario(vec![])).unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let mut events = Collect::default();
    let control = TurnControl::default();
    let turn = agent.run("x", &mut events, &control, Default::default());
    assert_send(&turn);
    let slot = agent.reserve();
    drop(turn);
    drop(slot);
}

#[test]
fn a_spawned_turn_runs_on_a_multi_thread_runtime() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "c1",
            "weather",
            r#"{"city":"Paris"}"#,
        )])),
        exchange(script::openai_text(&["sunny"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            |_: Value, _| async { ToolOutput::ok("18°C") },
        ))
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let task_agent = agent.clone();
    let summary = rt.block_on(async move {
        let handle = tokio::spawn(async move {
            let mut events = Collect::default();
            let r = task_agent
                .run(
                    "weather?",
                    &mut events,
                    &TurnControl::default(),
                    Default::default(),
                )
                .await;
            (r, events.0)
        });
        tokio::time::timeout(HANG_GUARD, handle)
            .await
            .expect("the spawned turn hung")
            .expect("the spawned turn panicked")
    });
    let (r, events) = summary;
    assert_eq!(r.unwrap().text, "sunny");
    assert!(events.last().unwrap().is_terminal());
    validate_history(&agent.history()).unwrap();
}

// ---- drop safety ----------------------------------------------------------------------

/// Counts tool futures alive, and any that completed after the turn was dropped.
#[derive(Default)]
struct ToolLedger {
    alive: AtomicUsize,
    turn_dropped: AtomicBool,
    completed_after_drop: AtomicUsize,
}

struct AliveGuard(Arc<ToolLedger>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

fn slow_tool(ledger: Arc<ToolLedger>, ms: u64) -> impl panto::Tool {
    FnTool::new("slow", "", json!({"type":"object"}), move |_: Value, _| {
        let ledger = ledger.clone();
        ledger.alive.fetch_add(1, Ordering::SeqCst);
        let guard = AliveGuard(ledger.clone());
        async move {
            let _guard = guard;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if ledger.turn_dropped.load(Ordering::SeqCst) {
                ledger.completed_after_drop.fetch_add(1, Ordering::SeqCst);
            }
            ToolOutput::ok("done")
        }
    })
}

fn two_step(kind: ProviderKind, calls: usize) -> Vec<Value> {
    let ids: Vec<String> = (0..calls).map(|i| format!("call_{i}")).collect();
    let refs: Vec<(&str, &str, &str)> = ids.iter().map(|id| (id.as_str(), "slow", "{}")).collect();
    match kind {
        ProviderKind::OpenAi => vec![
            exchange(script::openai_tool_calls(&refs)),
            exchange(script::openai_text(&["all ", "done"])),
        ],
        ProviderKind::Anthropic => vec![
            exchange(script::anthropic_tool_calls(&refs)),
            exchange(script::anthropic_text(&["all ", "done"])),
        ],
        ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
        other => unreachable!("{other:?} has its own suite"),
    }
}

/// Drops `agent.run` after `after_ms` (its future, as `timeout` does), then checks the
/// history and that no tool outlived the drop.
fn drop_turn_after(kind: ProviderKind, calls: usize, tool_ms: u64, after_ms: u64, paced: bool) {
    let mut exchanges = two_step(kind, calls);
    if paced {
        for ex in &mut exchanges {
            ex["response"]["chunk_delay_ms"] = json!(3);
        }
    }
    let server = TestServer::start(script::scenario(exchanges)).unwrap();
    let agent = Agent::new(config(kind, &server)).unwrap();
    let ledger = Arc::new(ToolLedger::default());
    agent.add_tool(slow_tool(ledger.clone(), tool_ms)).unwrap();
    // Current-thread: a dropped turn's tool tasks cannot be mid-poll on another thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut events = Collect::default();
        let control = TurnControl::default();
        let r = tokio::time::timeout(
            Duration::from_millis(after_ms),
            agent.run("go", &mut events, &control, Default::default()),
        )
        .await;
        ledger.turn_dropped.store(true, Ordering::SeqCst);
        if let Ok(done) = r {
            done.unwrap();
        }
        // Give aborted tools every chance to (wrongly) finish their sleep.
        tokio::time::sleep(Duration::from_millis(tool_ms + 20)).await;
    });
    assert_eq!(
        ledger.alive.load(Ordering::SeqCst),
        0,
        "a tool outlived the turn"
    );
    assert_eq!(
        ledger.completed_after_drop.load(Ordering::SeqCst),
        0,
        "a tool ran to completion after the turn was dropped"
    );
    let history = agent.history();
    validate_history(&history).unwrap_or_else(|e| panic!("{e}: {history:#?}"));
    let saved = agent.history_json();
    let loaded = history_from_json(&saved).unwrap();
    validate_history(&loaded).unwrap();
    let fresh = Agent::new(config(kind, &server)).unwrap();
    fresh.load_history_json(&saved).unwrap();
    // The agent is free for the next turn.
    assert!(agent.reserve().is_ok());
}

#[test]
fn dropping_the_turn_while_its_tools_run_commits_the_step_whole() {
    // The classic case: a 400 ms timeout around a turn whose tool takes 1 s.
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        drop_turn_after(kind, 2, 1000, 400, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn dropping_the_turn_at_any_point_leaves_a_valid_history(
        anthropic in any::<bool>(),
        calls in 1usize..4,
        tool_ms in 0u64..40,
        after_ms in 0u64..120,
        paced in any::<bool>(),
    ) {
        let kind = if anthropic { ProviderKind::Anthropic } else { ProviderKind::OpenAi };
        drop_turn_after(kind, calls, tool_ms, after_ms, paced);
    }
}

#[test]
fn history_read_during_a_turn_is_always_valid() {
    let server = TestServer::start(script::scenario(
        (0..6)
            .flat_map(|_| two_step(ProviderKind::OpenAi, 3).into_iter().take(1))
            .chain([exchange(script::openai_text(&["done"]))])
            .collect(),
    ))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let ledger = Arc::new(ToolLedger::default());
    agent.add_tool(slow_tool(ledger, 2)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (agent, stop) = (agent.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut snapshots = 0usize;
            let mut lengths = std::collections::BTreeSet::new();
            while !stop.load(Ordering::SeqCst) {
                let h = agent.history();
                validate_history(&h).unwrap_or_else(|e| panic!("mid-turn history invalid: {e}"));
                lengths.insert(h.len());
                snapshots += 1;
            }
            (snapshots, lengths)
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(agent.run(
        "go",
        &mut Collect::default(),
        &TurnControl::default(),
        Default::default(),
    ));
    stop.store(true, Ordering::SeqCst);
    let (snapshots, lengths) = reader.join().unwrap();
    assert_eq!(r.unwrap().text, "done");
    assert!(snapshots > 0);
    // Only whole steps are ever visible: nothing yet, the user message, then (assistant,
    // tool) pairs, then the answer.
    for len in lengths {
        assert!(
            len == 0 || len % 2 == 1 || len == 14,
            "partial step visible: {len}"
        );
    }
}

// ---- time limits ----------------------------------------------------------------------

fn short_idle(c: Config) -> Config {
    c.with_timeouts(Timeouts {
        connect_ms: 5000,
        idle_ms: 300,
        request_ms: 600_000,
    })
}

#[tokio::test]
async fn the_wait_for_response_headers_is_bounded_by_idle_ms() {
    // The server accepts and says nothing for a minute; request_ms is 10 minutes.
    let server = TestServer::start(script::scenario(vec![exchange(
        json!({"delay_ms": 60_000, "sse": script::openai_text_events(&["late"])}),
    )]))
    .unwrap();
    let agent = Agent::new(short_idle(config(ProviderKind::OpenAi, &server))).unwrap();
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run(
            "x",
            &mut events,
            &TurnControl::default(),
            Default::default(),
        ),
    )
    .await
    .expect("the wait for headers was not bounded by idle_ms");
    let err = r.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert!(err.message.contains("response headers"), "{}", err.message);
    assert!(err.retryable);
}

#[tokio::test]
async fn retries_stop_at_the_overall_deadline() {
    // Every attempt fails with a retryable 500; 100 retries are allowed, but the retry
    // budget (max_elapsed_ms) is far shorter than their backoffs.
    let server = TestServer::start(script::scenario(vec![json!({
        "times": 1000,
        "response": {"status": 500, "json": {"error": {"type": "server_error", "message": "down"}}}
    })]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server).with_retry(RetryConfig {
            max_retries: 100,
            initial_delay_ms: 50,
            max_delay_ms: 50,
            max_elapsed_ms: 400,
            ..RetryConfig::default()
        }),
    )
    .unwrap();
    let mut events = Collect::default();
    let err = tokio::time::timeout(
        HANG_GUARD,
        agent.run(
            "x",
            &mut events,
            &TurnControl::default(),
            Default::default(),
        ),
    )
    .await
    .expect("retries were not bounded")
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Server);
    let retries = events
        .0
        .iter()
        .filter(|e| matches!(e, Event::ProviderRetry { .. }))
        .count();
    assert!(retries >= 1, "no retry at all");
    assert!(
        retries < 100,
        "the budget did not stop the retries ({retries})"
    );
    assert_eq!(server.requests().len(), retries + 1);
}

// ---- max_tokens ends the turn ---------------------------------------------------------

#[tokio::test]
async fn a_reply_cut_off_by_max_tokens_ends_the_turn_without_running_tools() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let first = match kind {
            ProviderKind::OpenAi => {
                let mut sse =
                    script::openai_tool_calls_events(&[("c1", "slow", r#"{"city":"Par"#)]);
                // finish_reason "length": the output limit cut the call.
                for item in &mut sse {
                    if item["data"]["choices"][0]["finish_reason"] == "tool_calls" {
                        item["data"]["choices"][0]["finish_reason"] = json!("length");
                    }
                }
                json!({ "sse": sse })
            }
            ProviderKind::Anthropic => {
                let mut sse = script::anthropic_tool_calls_events(&[("c1", "slow", "{}")]);
                for item in &mut sse {
                    if item["event"] == "message_delta" {
                        item["data"]["delta"]["stop_reason"] = json!("max_tokens");
                    }
                }
                json!({ "sse": sse })
            }
            ProviderKind::Gemini => {
                unreachable!("Gemini has tests of its own (core/tests/gemini.rs)")
            }
            other => unreachable!("{other:?} has its own suite"),
        };
        let server = TestServer::start(script::scenario(vec![
            exchange(first),
            exchange(script::openai_text(&["never asked"])),
        ]))
        .unwrap();
        let agent = Agent::new(config(kind, &server)).unwrap();
        let ledger = Arc::new(ToolLedger::default());
        agent.add_tool(slow_tool(ledger.clone(), 0)).unwrap();
        let mut events = Collect::default();
        let summary = agent
            .run(
                "x",
                &mut events,
                &TurnControl::default(),
                Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(summary.stop_reason, StopReason::MaxTokens, "{kind:?}");
        assert_eq!(server.requests().len(), 1, "{kind:?}: asked again");
        assert!(
            !events
                .0
                .iter()
                .any(|e| matches!(e, Event::ToolCallStart { .. } | Event::ToolResult { .. })),
            "{kind:?}: a call that will not run was announced"
        );
        assert_eq!(ledger.alive.load(Ordering::SeqCst), 0);
        match events.0.last().unwrap() {
            Event::MessageComplete { stop_reason, .. } => {
                assert_eq!(*stop_reason, StopReason::MaxTokens)
            }
            other => panic!("{other:?}"),
        }
        let history = agent.history();
        validate_history(&history).unwrap();
        // The unrun call is answered in the history, so the next turn is valid.
        assert!(matches!(
            history.last().unwrap().content[0],
            Block::ToolResult { is_error: true, .. }
        ));
    }
}

// ---- tool output is capped ------------------------------------------------------------

#[tokio::test]
async fn tool_output_is_capped_with_a_note_the_model_reads() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[("c1", "flood", "{}")])),
        exchange(script::openai_text(&["ok"])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_max_tool_output_bytes(1000)).unwrap();
    agent
        .add_tool(FnTool::new(
            "flood",
            "",
            json!({"type":"object"}),
            |_: Value, _| async { ToolOutput::ok("é".repeat(10_000_000)) },
        ))
        .unwrap();
    let mut events = Collect::default();
    agent
        .run(
            "x",
            &mut events,
            &TurnControl::default(),
            Default::default(),
        )
        .await
        .unwrap();
    let output = events
        .0
        .iter()
        .find_map(|e| match e {
            Event::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .unwrap();
    assert!(output.len() < 1200, "{} bytes", output.len());
    assert!(output.contains("output truncated"), "{output}");
    assert!(output.contains("20000000 bytes"), "{output}");
    // What reached the model is the capped text, not 20 MB.
    let sent = server.requests()[1].body.to_string();
    assert!(sent.len() < 10_000, "{} bytes sent", sent.len());
}
