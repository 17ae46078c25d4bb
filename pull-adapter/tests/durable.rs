//! Durable turns through the pull stream: `Stream::checkpoint` as the consumer reads,
//! `panto_pull::resume`, and the crash test — a child process (this test binary, run
//! again as `crash_child`) runs a turn, writes each checkpoint to a file as it gets
//! it and blocks inside a tool; it is SIGKILLed, and the turn is resumed from the file
//! in a new agent here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use panto::{
    Agent, Answers, Checkpoint, Config, Event, FnTool, ProviderKind, StopReason, ToolOutput,
};
use panto_pull::AgentStreamExt;
use panto_testkit::{eventually, quick_retries, API_KEY};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::json;

const CHILD_URL: &str = "PANTO_DURABLE_CHILD_URL";
const CHILD_DIR: &str = "PANTO_DURABLE_CHILD_DIR";

fn config_for(url: &str) -> Config {
    Config::new(ProviderKind::OpenAi, "scripted-model")
        .with_base_url(format!("{url}/v1"))
        .with_api_key(API_KEY)
        .with_retry(quick_retries(0))
}

fn server() -> TestServer {
    TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "lookup",
            r#"{"q":"x"}"#,
        )])),
        exchange(script::openai_text(&["The answer ", "is 42."])),
    ]))
    .unwrap()
}

/// `lookup`: answers at once, or (in the child) marks that it started and blocks.
fn lookup(block_in: Option<PathBuf>) -> impl panto::Tool {
    FnTool::new(
        "lookup",
        "Looks something up",
        json!({"type":"object","properties":{"q":{"type":"string"}}}),
        move |_, _| {
            let block_in = block_in.clone();
            async move {
                if let Some(dir) = block_in {
                    let _ = std::fs::write(dir.join("tool-started"), b"1");
                    std::future::pending::<()>().await;
                }
                ToolOutput::ok("42")
            }
        },
    )
}

fn write_atomically(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// The child's side of the crash test (does nothing when run as an ordinary test).
#[test]
fn crash_child() {
    let (Ok(url), Ok(dir)) = (std::env::var(CHILD_URL), std::env::var(CHILD_DIR)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let agent = Agent::new(config_for(&url)).unwrap();
    agent.add_tool(lookup(Some(dir.clone()))).unwrap();
    let mut stream = agent.stream("What is the answer?").unwrap();
    while let Some(_event) = stream.next().unwrap() {
        if let Some(checkpoint) = stream.checkpoint() {
            write_atomically(&dir, "checkpoint.json", &checkpoint.to_json());
        }
    }
    unreachable!("the tool blocks until the process is killed");
}

#[test]
fn a_turn_killed_inside_a_tool_resumes_in_a_new_process_from_its_last_checkpoint() {
    // What an uninterrupted turn gives.
    let reference_server = server();
    let reference = Agent::new(config_for(&reference_server.url())).unwrap();
    reference.add_tool(lookup(None)).unwrap();
    let mut stream = reference.stream("What is the answer?").unwrap();
    let mut want = None;
    while let Some(ev) = stream.next().unwrap() {
        if let Event::MessageComplete { .. } = ev {
            want = Some(ev);
        }
    }
    drop(stream);
    let want_history = reference.history();

    let server = server();
    let dir = std::env::temp_dir().join(format!("panto-durable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_URL, server.url())
        .env(CHILD_DIR, &dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the child's tool started", || {
        dir.join("tool-started").exists()
    });
    // The checkpoint the child wrote after tool_call_start holds the response.
    eventually("the child wrote a checkpoint with the response", || {
        std::fs::read_to_string(dir.join("checkpoint.json"))
            .ok()
            .and_then(|j| Checkpoint::from_json(&j).ok())
            .is_some_and(|c| c.steps() == 1)
    });
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(server.requests().len(), 1);

    let json = std::fs::read_to_string(dir.join("checkpoint.json")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let checkpoint = Checkpoint::from_json(&json).unwrap();
    let fresh = Agent::new(config_for(&server.url())).unwrap();
    fresh.add_tool(lookup(None)).unwrap();
    let mut stream = panto_pull::resume(&fresh, checkpoint, Answers::new()).unwrap();
    let mut got = None;
    let mut results = 0;
    while let Some(ev) = stream.next().unwrap() {
        match ev {
            Event::ToolResult { ref output, .. } => {
                assert_eq!(output, "42");
                results += 1;
            }
            Event::MessageComplete { .. } => got = Some(ev),
            _ => {}
        }
    }
    drop(stream);
    assert_eq!(results, 1, "the call without a result ran again, once");
    assert_eq!(
        server.requests().len(),
        2,
        "the response the checkpoint held was not requested again"
    );
    assert_eq!(
        got, want,
        "the same message_complete (text, usage of both steps, count)"
    );
    assert_eq!(fresh.history(), want_history);
}

#[test]
fn the_checkpoint_includes_what_the_consumer_was_given() {
    let server = server();
    let agent = Agent::new(config_for(&server.url())).unwrap();
    agent.add_tool(lookup(None)).unwrap();
    let mut stream = agent.stream("What is the answer?").unwrap();
    // The turn starts on the worker: by its first event the input is checkpointed.
    let first = stream.next().unwrap().expect("a first event");
    assert!(
        matches!(first, Event::MessageStart { message: 0, .. }),
        "{first:?}"
    );
    let at_start = stream
        .checkpoint()
        .expect("the input is checkpointed first");
    // A lower bound: the worker runs ahead of the consumer, so by now the first
    // response may be in it too; the input always is.
    assert!(at_start.steps() <= 1, "{}", at_start.steps());
    assert!(
        at_start
            .conversation()
            .iter()
            .any(|m| m.text() == "What is the answer?"),
        "{:?}",
        at_start.conversation()
    );
    let mut after_end = false;
    while let Some(ev) = stream.next().unwrap() {
        let checkpoint = stream.checkpoint().unwrap();
        let json = checkpoint.to_json();
        if after_end {
            assert_eq!(checkpoint.steps(), 1, "the response is in it");
            after_end = false;
        }
        match &ev {
            Event::MessageEnd { message: 0, .. } => after_end = true,
            Event::ToolResult { .. } => assert!(json.contains(r#""output":"42""#), "{json}"),
            Event::MessageComplete { stop_reason, .. } => {
                assert_eq!(stop_reason, &StopReason::EndTurn);
                assert_eq!(checkpoint.steps(), 2);
            }
            _ => {}
        }
    }
    // A turn that ended refuses steering and gives the input back.
    let refused = stream.steer("late").unwrap_err();
    assert_eq!(refused.input, panto::Input::from("late"));
}
