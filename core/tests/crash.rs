//! The crash test: a process SIGKILLed while its tool runs, and a new process that
//! resumes the turn from the checkpoint the first one left on disk.
//!
//! The test re-runs its own binary as the child (`crash_child`, an ignored test that
//! the parent runs with `PANTO_CRASH_CHILD` set): the child runs a turn against the scripted
//! server, keeps the turn's checkpoint in a file (replaced atomically at every event,
//! and by the tool as it starts: after a response's `message_end` no event comes until
//! the tool's result, so a push receiver has no later event to save at), prints
//! a line from inside the tool and blocks there. The parent kills it with SIGKILL,
//! resumes from the file in a new agent, and compares with an uninterrupted run: the
//! same answer, usage and history, and the server never asked again for the response
//! the checkpoint held.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use panto::{
    Agent, Answers, Checkpoint, Collect, Config, Event, Flow, FnTool, ProviderKind, Receiver,
    ToolOutput, TurnControl, TurnOptions,
};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const CHILD_ENV: &str = "PANTO_CRASH_CHILD";
/// The line the child prints from inside its tool (on a line of its own: the test
/// harness prints its own text on the same stream).
const IN_TOOL: &str = "panto-crash: in tool";
const HANG_GUARD: Duration = Duration::from_secs(60);

fn server() -> TestServer {
    TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "measure",
            r#"{"x":21}"#,
        )])),
        exchange(script::openai_text(&["It measures ", "42."])),
    ]))
    .unwrap()
}

/// The agent's configuration for the server at `base_url` (no retries: each scripted
/// exchange answers one request).
fn config(base_url: &str) -> Config {
    Config::new(ProviderKind::OpenAi, "scripted-model")
        .with_base_url(base_url)
        .with_api_key(panto_testkit::API_KEY)
        .with_retry(panto_testkit::quick_retries(0))
}

fn url_v1(server: &TestServer) -> String {
    format!("{}/v1", server.url())
}

/// The tool, as the surviving processes have it: it answers at once.
fn measure() -> impl panto::Tool {
    FnTool::new(
        "measure",
        "Measures x",
        json!({"type":"object","properties":{"x":{"type":"integer"}}}),
        |args: Value, _| async move {
            ToolOutput::ok((args["x"].as_i64().unwrap_or(0) * 2).to_string())
        },
    )
}

/// Replaces `path` with `text` atomically: a reader sees the old document or the new.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Saves the turn's checkpoint at every event, as an application would.
struct SaveAtEvents {
    control: TurnControl,
    path: PathBuf,
}

impl Receiver for SaveAtEvents {
    fn on_event(&mut self, _event: Event) -> Flow {
        if let Some(cp) = self.control.checkpoint() {
            save(&self.path, &cp.to_json());
        }
        Flow::Continue
    }
}

/// The child process's turn; returns only if the turn ends, which it must not. Ignored:
/// the crash test runs it (with `--ignored`) in the child, never by itself.
#[test]
#[ignore = "the crash test's child process; run by a_turn_killed_while_its_tool_runs_…"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        panic!("run by the crash test, with {CHILD_ENV} set");
    };
    let (base_url, path) = spec.split_once('\n').expect("base URL and path");
    let path = PathBuf::from(path);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let agent = Agent::new(config(base_url)).unwrap();
        let control = TurnControl::default();
        let (in_tool, saved_at) = (control.clone(), path.clone());
        agent
            .add_tool(FnTool::new(
                "measure",
                "Measures x (slowly)",
                json!({"type":"object","properties":{"x":{"type":"integer"}}}),
                move |_: Value, _| {
                    let (control, path) = (in_tool.clone(), saved_at.clone());
                    async move {
                        if let Some(cp) = control.checkpoint() {
                            save(&path, &cp.to_json());
                        }
                        println!("\n{IN_TOOL}");
                        std::io::stdout().flush().unwrap();
                        std::future::pending::<ToolOutput>().await // until killed
                    }
                },
            ))
            .unwrap();
        let mut receiver = SaveAtEvents {
            control: control.clone(),
            path,
        };
        let r = agent
            .run(
                "measure 21",
                &mut receiver,
                &control,
                TurnOptions::default(),
            )
            .await;
        println!("finished: {r:?}");
    });
}

#[test]
fn a_turn_killed_while_its_tool_runs_is_completed_by_a_new_process() {
    let rt = tokio::runtime::Runtime::new().unwrap();

    // The uninterrupted run, for comparison.
    let straight_server = server();
    let straight = Agent::new(config(&url_v1(&straight_server))).unwrap();
    straight.add_tool(measure()).unwrap();
    let expected = rt
        .block_on(async {
            tokio::time::timeout(
                HANG_GUARD,
                straight.run(
                    "measure 21",
                    &mut Collect::default(),
                    &TurnControl::default(),
                    TurnOptions::default(),
                ),
            )
            .await
        })
        .expect("the uninterrupted turn hung")
        .unwrap();
    let expected_requests: Vec<Value> = straight_server
        .requests()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(expected_requests.len(), 2);

    // The process that dies: this test binary again, running only crash_child.
    let srv = server();
    let dir = std::env::temp_dir().join(format!("panto-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("turn.checkpoint");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, format!("{}\n{}", url_v1(&srv), file.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // The child's stdout also carries the test harness's lines; wait for the tool's.
    // (A child that dies first ends its stdout: no hang.)
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line == IN_TOOL => break,
            Some(Ok(line)) => seen.push(line),
            _ => {
                let _ = child.kill();
                panic!("the child never reached its tool: {seen:?}");
            }
        }
    }
    child.kill().expect("SIGKILL the child");
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{status:?}"
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(
        !rest.iter().any(|l| l.starts_with("finished")),
        "the turn ended in the child: {rest:?}"
    );
    assert_eq!(srv.requests().len(), 1);

    // A new agent, in this process, resumes from the file.
    let saved = Checkpoint::from_json(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(saved.steps(), 1, "the checkpoint holds the first response");
    let resumed = Agent::new(config(&url_v1(&srv))).unwrap();
    resumed.add_tool(measure()).unwrap();
    let mut events = Collect::default();
    let done = rt
        .block_on(async {
            tokio::time::timeout(
                HANG_GUARD,
                resumed.resume(saved, Answers::new(), &mut events, &TurnControl::default()),
            )
            .await
        })
        .expect("the resumed turn hung")
        .unwrap();
    assert_eq!(done.text, expected.text);
    assert_eq!(done.text, "It measures 42.");
    assert_eq!(done.stop_reason, expected.stop_reason);
    assert_eq!(done.messages, expected.messages);
    assert_eq!(done.usage, expected.usage);
    // No repeated request: the one request made is the uninterrupted run's second.
    let requests = srv.requests();
    assert_eq!(
        requests.len(),
        2,
        "a response the checkpoint held was asked for again"
    );
    assert_eq!(requests[1].body, expected_requests[1]);
    assert_eq!(resumed.history(), straight.history());
    // The call without a result ran again, in the resumed stream.
    assert!(events.0.iter().any(
        |e| matches!(e, Event::ToolResult { call_id, output, .. } if call_id == "call_1" && output == "42")
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
