//! The CLI answering an MCP server's own requests, against the reference server
//! (`@modelcontextprotocol/server-everything`, installed by tests/mcp/everything.sh):
//! with `sampling` and `elicitation` enabled in the profile and no terminal, a sampling
//! request is answered by the run's model (the configuration is the consent) and an
//! elicitation is declined; `--json` prints both events. Without node and npm the test
//! skips, except in CI.

mod support;

use std::os::unix::process::CommandExt;
use std::process::Command;

use panto_testkit::everything;
use panto_testserver::script;
use serde_json::{json, Value};
use support::*;

/// No controlling terminal, whatever runs the tests: nobody to ask.
fn without_terminal(cmd: &mut Command) -> &mut Command {
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd
}

#[test]
fn without_a_terminal_sampling_is_answered_and_elicitation_declined() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[
            ("c1", "ev__trigger-sampling-request", r#"{"prompt":"name a colour","maxTokens":500}"#),
            ("c2", "ev__trigger-elicitation-request", "{}"),
        ])),
        script::exchange(script::openai_text(&["teal"])),
        script::exchange(script::openai_text(&["done"])),
    ]}));
    let home = temp_dir("mcp-sampling");
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.t.mcp_servers.ev]\ncommand = \"node\"\nargs = {:?}\n\
             sampling = true\nsampling_max_tokens = 64\nelicitation = true\n",
            everything::stdio_args(&entry)
        ),
    )
    .unwrap();
    let base = format!("{}/v1", server.url());
    let cfg = config.to_string_lossy().into_owned();
    let out = run(without_terminal(&mut panto_in(
        &home,
        &[
            "run",
            "--config",
            &cfg,
            "-p",
            "t",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "--json",
            "go",
        ],
    )));
    assert!(out.status.success(), "{}", describe(&out));
    let events = json_lines(&out);
    let of = |ty: &str| -> Vec<&Value> { events.iter().filter(|e| e["type"] == ty).collect() };
    let sampling = of("mcp_sampling_request");
    assert_eq!(sampling.len(), 1, "{events:?}");
    assert_eq!(sampling[0]["server"], "ev");
    assert_eq!(sampling[0]["max_tokens"], 64);
    assert_eq!(sampling[0]["outcome"], "answered");
    let elicitation = of("mcp_elicitation_request");
    assert_eq!(elicitation.len(), 1, "{events:?}");
    assert_eq!(elicitation[0]["outcome"], "decline");
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["call_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}: {events:?}"))["output"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let sampled = result("c1");
    assert!(sampled.contains("\"text\": \"teal\""), "{sampled}");
    assert!(result("c2").contains("User declined"), "{}", result("c2"));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].body["max_tokens"], 64);
}
