//! Connections are the process's, not an agent's: agents with the same transport settings
//! on the same runtime share one connection pool (and TLS session cache), so one agent
//! per request does not cost one handshake per request. What must hold with that:
//! the number of connections follows the concurrency, not the number of agents; each
//! request carries only its own agent's credentials and headers, even on a connection
//! another agent opened; the idle pool is bounded and can be closed.
//!
//! Its own test binary: the process-wide pool is shared by every test in it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use panto::{Agent, Collect, Config, ProviderKind, RetryConfig, TurnControl};
use panto_testserver::script;
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(60);

/// Serializes the tests of this binary: they count the connections of one process-wide
/// pool, which `close_idle_connections` (called by one of them) empties.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn agent_config(server: &TestServer, i: usize) -> Config {
    Config::new(ProviderKind::OpenAi, "scripted-model")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key(format!("sk-agent-{i:03}-SECRET"))
        .with_header("x-agent", format!("agent-{i:03}"))
        .with_header("x-agent-token", format!("token-{i:03}"))
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
}

/// Polls `cond` (driving the runtime between polls) until true or the generous
/// hang-catcher deadline passes.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + HANG_GUARD;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn one_turn(agent: &Agent, input: String) -> String {
    let mut events = Collect::default();
    let summary = tokio::time::timeout(
        HANG_GUARD,
        agent.run(
            &input,
            &mut events,
            &TurnControl::default(),
            Default::default(),
        ),
    )
    .await
    .expect("the turn hung")
    .expect("the turn failed");
    summary.text
}

/// The last user message of a recorded request body.
fn prompt(body: &Value) -> String {
    let messages = body["messages"].as_array().expect("messages");
    let last = messages.last().expect("a message");
    last["content"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| last["content"][0]["text"].as_str().unwrap_or("").to_owned())
}

const AGENTS: usize = 100;
const CONCURRENCY: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_agents_use_about_as_many_connections_as_run_at_once() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": AGENTS,
        "response": script::openai_text(&["hello"]),
    })]))
    .unwrap();
    let agents: Vec<Agent> = (0..AGENTS)
        .map(|i| Agent::new(agent_config(&server, i)).unwrap())
        .collect();
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut turns = tokio::task::JoinSet::new();
    for (i, agent) in agents.iter().enumerate() {
        let agent = agent.clone();
        let limit = limit.clone();
        turns.spawn(async move {
            let _permit = limit.acquire_owned().await.unwrap();
            one_turn(&agent, format!("I am agent {i:03}")).await
        });
    }
    while let Some(text) = turns.join_next().await {
        assert_eq!(text.unwrap(), "hello");
    }

    let requests = server.requests();
    assert_eq!(requests.len(), AGENTS);
    let connections = server.connections_total();
    // One pool per agent opened one connection per agent (100). Shared, a new connection
    // is only opened while every pooled one is busy: at most one per turn running at
    // once, plus one per response whose end was still being read as the next turn began.
    assert!(
        connections <= 2 * CONCURRENCY,
        "{AGENTS} agents, {CONCURRENCY} at a time, opened {connections} connections"
    );

    // Each request carried its own agent's key and headers, and no other's, though
    // connections went from agent to agent.
    let mut agents_per_connection: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for r in &requests {
        let p = prompt(&r.body);
        let i = p.strip_prefix("I am agent ").expect("the agent's prompt");
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer sk-agent-{i}-SECRET").as_str()),
            "{p}"
        );
        assert_eq!(r.headers.get("x-agent"), Some(&format!("agent-{i}")), "{p}");
        assert_eq!(
            r.headers.get("x-agent-token"),
            Some(&format!("token-{i}")),
            "{p}"
        );
        agents_per_connection
            .entry(r.connection)
            .or_default()
            .insert(i.to_owned());
    }
    assert!(
        agents_per_connection.values().any(|a| a.len() > 1),
        "no connection was shared by two agents: {agents_per_connection:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn agents_one_after_another_reuse_one_connection() {
    // The one-agent-per-request pattern at low traffic: each agent is created, runs one
    // turn and is dropped before the next exists. The connection outlives them.
    let _serial = SERIAL.lock().await;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": 20,
        "response": script::openai_text(&["hello"]),
    })]))
    .unwrap();
    for i in 0..20 {
        let agent = Agent::new(agent_config(&server, i)).unwrap();
        assert_eq!(
            one_turn(&agent, format!("I am agent {i:03}")).await,
            "hello"
        );
    }
    assert_eq!(server.requests().len(), 20);
    assert_eq!(server.connections_total(), 1, "an agent paid a new connect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_pool_is_bounded_and_closes_on_request() {
    let _serial = SERIAL.lock().await;
    const AT_ONCE: usize = 40;
    // Every response waits at the server's gate, so all 40 turns hold a connection at
    // once.
    let sse = script::openai_text_events(&["hello"]);
    let before_end = script::sse_len(&sse[..1]).unwrap();
    let server = TestServer::start(script::scenario(vec![json!({
        "times": AT_ONCE,
        "response": {"sse": sse, "fault": {"kind": "hold", "after_bytes": before_end}},
    })]))
    .unwrap();
    let agents: Vec<Agent> = (0..AT_ONCE)
        .map(|i| Agent::new(agent_config(&server, i)).unwrap())
        .collect();
    let mut turns = tokio::task::JoinSet::new();
    for (i, agent) in agents.iter().enumerate() {
        let agent = agent.clone();
        turns.spawn(async move { one_turn(&agent, format!("I am agent {i:03}")).await });
    }
    eventually("every turn to wait at the gate", || {
        server.held() == AT_ONCE
    })
    .await;
    assert_eq!(server.connections_open(), AT_ONCE);
    server.open_gate();
    while let Some(text) = turns.join_next().await {
        assert_eq!(text.unwrap(), "hello");
    }
    // 40 connections went idle together; the pool keeps at most 32 of them.
    eventually("the idle pool to shrink to its bound", || {
        server.connections_open() <= 32
    })
    .await;
    assert!(server.connections_open() > 0, "nothing was kept for reuse");

    // The agents are gone; their connections are the process's, and stay (for reuse by
    // later agents) until idle for 90 s or closed on request.
    drop(agents);
    panto::http::close_idle_connections();
    eventually("the idle connections to close", || {
        server.connections_open() == 0
    })
    .await;

    // A later agent opens a fresh connection and works.
    let agent = Agent::new(agent_config(&server, 99)).unwrap();
    server.set_scenario(script::scenario(vec![script::exchange(
        script::openai_text(&["again"]),
    )]));
    assert_eq!(one_turn(&agent, "I am agent 099".into()).await, "again");
}

/// A finished response whose end has arrived goes back to the pool from the turn itself,
/// without a task of its own to read that end (at thousands of streams, that task was
/// the largest allocation cost of a turn); a body the server holds open is still read in
/// the background, and the turn does not wait for it. On a current-thread runtime, as
/// the pull adapter's workers are: the connection's task runs before the turn looks again.
#[tokio::test]
async fn a_finished_body_is_read_to_its_end_without_a_task_of_its_own() {
    let _serial = SERIAL.lock().await;
    const TURNS: u64 = 20;
    let server = TestServer::start(script::scenario(vec![json!({
        "times": TURNS,
        "response": script::openai_text(&["hello"]),
    })]))
    .unwrap();
    let agent = Agent::new(agent_config(&server, 0)).unwrap();
    let before = panto::http::background_drains();
    for i in 0..TURNS {
        assert_eq!(one_turn(&agent, format!("turn {i}")).await, "hello");
    }
    let drains = panto::http::background_drains() - before;
    // The server sends a body's end with its last event; a loaded machine may deliver
    // it late now and then, never for most turns.
    assert!(
        drains < TURNS / 2,
        "{drains} of {TURNS} turns left their body's end to a task of its own"
    );
    assert_eq!(server.connections_total(), 1, "a turn paid a new connect");

    // The whole answer, [DONE] included, then a body held open: the turn ends without
    // it, and a task of its own reads the end once the server sends it.
    let sse = script::openai_text_events(&["finished"]);
    let all = script::sse_len(&sse).unwrap();
    let held = TestServer::start(script::scenario(vec![json!({
        "response": {"sse": sse, "fault": {"kind": "hold", "after_bytes": all}},
    })]))
    .unwrap();
    let agent = Agent::new(agent_config(&held, 1)).unwrap();
    let before = panto::http::background_drains();
    assert_eq!(one_turn(&agent, "held".into()).await, "finished");
    // The turn is over while the gate, still closed, keeps the body's end from being
    // sent: it did not wait for it, a task of its own does. (The server counts the hold
    // once it has written the last byte before it, which the turn may read first.)
    assert_eq!(panto::http::background_drains() - before, 1);
    eventually("the server to hold the body's end", || held.held() == 1).await;
    held.open_gate();
}
