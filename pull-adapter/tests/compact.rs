//! The blocking compaction entry point the CLI and the bindings call.

use panto::provider::ProviderKind;
use panto::{Agent, CompactOptions, ErrorKind};
use panto_pull::AgentStreamExt;
use panto_testkit::config;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::json;

fn agent_for(server: &TestServer) -> Agent {
    Agent::new(config(ProviderKind::OpenAi, server)).unwrap()
}

fn drain(agent: &Agent, input: &str) {
    let mut s = agent.stream(input).unwrap();
    while s.next().unwrap().is_some() {}
}

#[test]
fn blocking_compact_replaces_the_history_and_reports_busy_during_a_turn() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a"])),
        exchange(script::openai_text(&["b"])),
        json!({"match": {"body_contains": ["<conversation>"]},
               "response": script::openai_text(&["summary of one"])}),
        json!({"response": {"sse": script::openai_text_events(&["c"]),
            "fault": {"kind": "hold", "after_bytes": 0}}}),
    ]))
    .unwrap();
    let agent = agent_for(&server);
    drain(&agent, "one");
    drain(&agent, "two");
    let options = CompactOptions {
        keep_last: 2,
        ..Default::default()
    };
    let done = panto_pull::compact(&agent, &options).unwrap();
    assert!(done.changed);
    assert_eq!(done.messages_after, 4);
    assert!(agent.history()[0].text().ends_with("summary of one"));
    // A stream holds the agent: compaction is refused, not queued. The turn is known to
    // be in flight once its response waits at the server's gate.
    let mut s = agent.stream("three").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.held() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the turn never reached the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(
        panto_pull::compact(&agent, &options).unwrap_err().kind,
        ErrorKind::Busy
    );
    server.open_gate();
    while s.next().unwrap().is_some() {}
}
