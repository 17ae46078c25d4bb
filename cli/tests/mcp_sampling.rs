//! The CLI answering an MCP server's own requests, against the reference server
//! (`@modelcontextprotocol/server-everything`, installed by tests/mcp/everything.sh):
//! with `sampling` and `elicitation` enabled in the profile and no terminal, a sampling
//! request is answered by the run's model (the configuration is the consent) and an
//! elicitation is declined; `--json` prints both events. On a terminal (a pty) the
//! person is asked: sampling allowed or refused, the elicitation's form filled in field
//! by field. Without node and npm the tests skip, except in CI.

mod support;

use std::os::unix::process::CommandExt;
use std::process::Command;

use expectrl::Expect;
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

/// The scripted model: it calls the sampling tool of `sampler` and the elicitation tool
/// of `asker` at once, is asked by the sampling request ("teal"), then ends the turn.
fn both_requests_turn(sampler: &str, asker: &str) -> panto_testserver::TestServer {
    server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[
            ("c1", &format!("{sampler}__trigger-sampling-request"), r#"{"prompt":"name a colour","maxTokens":500}"#),
            ("c2", &format!("{asker}__trigger-elicitation-request"), "{}"),
        ])),
        script::exchange(script::openai_text(&["teal"])),
        script::exchange(script::openai_text(&["done"])),
    ]}))
}

/// A profile `t` whose servers (`names`) are each server-everything over stdio, with
/// sampling (at most 64 tokens) and elicitation on; returns the config file's path.
fn sampling_profile(home: &std::path::Path, entry: &str, names: &[&str]) -> String {
    let config = home.join("config.toml");
    let servers: String = names
        .iter()
        .map(|name| {
            format!(
                "[profiles.t.mcp_servers.{name}]\ncommand = \"node\"\nargs = {:?}\n\
                 sampling = true\nsampling_max_tokens = 64\nelicitation = true\n",
                everything::stdio_args(entry)
            )
        })
        .collect();
    std::fs::write(&config, servers).unwrap();
    config.to_string_lossy().into_owned()
}

#[test]
fn without_a_terminal_sampling_is_answered_and_elicitation_declined() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let server = both_requests_turn("ev", "ev");
    let home = temp_dir("mcp-sampling");
    let cfg = sampling_profile(&home, &entry, &["ev"]);
    let base = format!("{}/v1", server.url());
    let out = run(without_terminal(&mut panto_in(
        &home,
        &run_args(&cfg, &base, "--json"),
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

/// `panto run` of profile `t` of `cfg` against the test server at `base`, saying "go";
/// `flag` is `--json` or `--` (nothing).
fn run_args<'a>(cfg: &'a str, base: &'a str, flag: &'a str) -> [&'a str; 11] {
    [
        "run",
        "--config",
        cfg,
        "-p",
        "t",
        "--base-url",
        base,
        "--api-key",
        "k",
        flag,
        "go",
    ]
}

/// The text of the tool result for `call_id` in a request body (what the model was sent).
fn tool_result_sent(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id} in {body}"))["content"]
        .to_string()
}

#[test]
fn on_a_terminal_the_person_allows_sampling_and_fills_in_the_elicitation() {
    let Some(entry) = everything::entry() else {
        return;
    };
    // Two servers, so that their requests reach panto at the same time.
    let server = both_requests_turn("ev", "ew");
    let home = temp_dir("mcp-sampling-pty");
    let cfg = sampling_profile(&home, &entry, &["ev", "ew"]);
    let base = format!("{}/v1", server.url());
    let mut p = panto_on_pty(&home, &run_args(&cfg, &base, "--"), &[]);
    // The two calls (on two servers) run at once; their questions come one dialog at a
    // time, in either order. Each step waits for its question before answering it.
    let sampling = "Allow? [y/N] ";
    let elicitation = "answer it? [y]es / [N]o (decline) / [c]ancel ";
    let first = p.expect(expectrl::Any([sampling, elicitation])).unwrap();
    let sampling_first = first.get(0) == Some(sampling.as_bytes());
    let answer_sampling = |p: &mut Pty| {
        p.send("y\r").unwrap();
    };
    // The fields in the order the schema's properties are held (by name): a value for
    // the required name, the integer and the boolean; the others keep their default or
    // are skipped (an empty line).
    let answer_elicitation = |p: &mut Pty| {
        p.send("y\r").unwrap();
        for (question, answer) in [
            ("Your date of birth", ""),
            ("Agree to the terms and conditions", "y"),
            ("Your email address", ""),
            ("Favorite first line of a story", ""),
            ("Portfolio / personal website", ""),
            ("Your favorite integer", "seven"),
            ("not a valid answer; again", "7"),
            ("Choose your favorite type of pet", ""),
            ("Your full, legal name", "Ada Lovelace"),
            ("Favorite number", ""),
            ("Choose your favorite types of fish", ""),
            ("Choose your favorite hero", ""),
            ("Choose your favorite instruments", ""),
            ("Choose your favorite friend", ""),
        ] {
            p.expect(question).unwrap();
            p.expect(": ").unwrap();
            p.send(format!("{answer}\r")).unwrap();
        }
    };
    if sampling_first {
        answer_sampling(&mut p);
        p.expect(elicitation).unwrap();
        answer_elicitation(&mut p);
    } else {
        answer_elicitation(&mut p);
        p.expect(sampling).unwrap();
        answer_sampling(&mut p);
    }
    p.expect("done").unwrap();
    p.expect(expectrl::Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "the sampling request went to the model");
    assert_eq!(requests[1].body["max_tokens"], 64);
    let sampled = tool_result_sent(&requests[2].body, "c1");
    assert!(sampled.contains("teal"), "{sampled}");
    let elicited = tool_result_sent(&requests[2].body, "c2");
    for shown in [
        "User provided the requested information",
        "Name: Ada Lovelace",
        "Agreed to terms: true",
        "Favorite Integer: 7",
        "Favorite Number: 3.14",
    ] {
        assert!(elicited.contains(shown), "{shown:?} not in {elicited}");
    }
}

#[test]
fn on_a_terminal_a_refused_sampling_request_never_reaches_the_model() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[(
            "c1",
            "ev__trigger-sampling-request",
            r#"{"prompt":"name a colour","maxTokens":500}"#,
        )])),
        script::exchange(script::openai_text(&["done"])),
    ]}));
    let home = temp_dir("mcp-sampling-pty-no");
    let cfg = sampling_profile(&home, &entry, &["ev"]);
    let base = format!("{}/v1", server.url());
    let mut p = panto_on_pty(&home, &run_args(&cfg, &base, "--"), &[]);
    p.expect("the MCP server ev asks the model: ").unwrap();
    p.expect("Allow? [y/N] ").unwrap();
    p.send("n\r").unwrap();
    p.expect("done").unwrap();
    p.expect(expectrl::Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "the refused request was not sent to the model"
    );
    let result = tool_result_sent(&requests[1].body, "c1");
    assert!(!result.contains("teal"), "{result}");
}
