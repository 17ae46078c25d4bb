//! A profile's credentials go only where the profile points: its key and its credential
//! headers are not sent to a `--base-url` given on the command line; and `--continue`
//! with a stale or corrupt session pointer is an error, not a new conversation. Each
//! test failed before its fix. Driven against the scripted provider server; no test
//! sleeps to synchronize.

mod support;

use serde_json::json;
use support::*;

/// Writes `config.toml` under `home`'s config directory.
fn write_config(home: &std::path::Path, text: &str) {
    let dir = home.join("config/panto");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// A profile's key is tied to the profile's base URL (or, without one, to the
/// provider's own API): `--base-url` typed to try another server must not receive it,
/// even when that profile is the default one.
#[test]
fn a_profile_key_is_not_sent_to_a_command_line_base_url() {
    let home = temp_dir("review-profile-key");
    let secret = "sk-profile-secret-0123456789";
    write_config(
        &home,
        r#"
default_profile = "work"
[profiles.work]
base_url = "https://work.example.invalid/v1"
api_key_env = "WORK_KEY"

[profiles.plain]
api_key_cmd = "echo sk-profile-secret-0123456789"
"#,
    );
    let srv = server(json!({"exchanges": [
        {"times": 10, "response": {"status": 401, "json": {"error": {"message": "no key", "type": "invalid_api_key"}}}},
    ]}));
    let base = format!("{}/v1", srv.url());
    for args in [
        vec!["--base-url", base.as_str(), "hello"],
        vec!["-p", "work", "--base-url", base.as_str(), "hello"],
        vec!["-p", "plain", "--base-url", base.as_str(), "hello"],
    ] {
        let out = run(panto_in(&home, &args).env("WORK_KEY", secret));
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", describe(&out));
        let request = srv.requests().pop().expect("a request");
        assert!(
            !request.headers.contains_key("authorization"),
            "{args:?}: the profile's key went to a command-line URL: {:?}",
            request.headers
        );
        let stderr = stderr_of(&out);
        assert!(!stderr.contains(secret), "{stderr}");
        assert!(stderr.contains("--api-key-env"), "{args:?}: {stderr}");
    }

    // The profile's own base URL given again on the command line is still its URL.
    write_config(
        &home,
        &format!("[profiles.work]\nbase_url = \"{base}\"\napi_key_env = \"WORK_KEY\"\n"),
    );
    srv.set_scenario(
        panto_testserver::Scenario::from_json(
            &json!({"exchanges": [answer_text("With key.", 1)]}).to_string(),
        )
        .unwrap(),
    );
    let out = run(panto_in(
        &home,
        &["-p", "work", "--base-url", &format!("{base}/"), "hello"],
    )
    .env("WORK_KEY", secret));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.headers["authorization"], format!("Bearer {secret}"));
}

/// `-c` whose remembered conversation is gone (pruned, deleted) or whose pointer file
/// is garbage must say so, not silently start an empty conversation (in the garbage's
/// name, relative to the working directory).
#[test]
fn continue_with_a_stale_or_corrupt_pointer_is_an_error() {
    let home = temp_dir("review-continue-stale");
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let state = home.join("state/panto");
    std::fs::create_dir_all(&state).unwrap();
    let srv = server(json!({"exchanges": [answer_text("Fresh.", 2)]}));
    let base = format!("{}/v1", srv.url());
    let gone = home.join("state/panto/conversations/000-gone.json");
    for pointer in [format!("{}\n", gone.display()), "\u{1}garbage\n".to_owned()] {
        std::fs::write(state.join("last-conversation"), &pointer).unwrap();
        let out = run(panto_in(&home, &["-c", "--base-url", &base, "more"]).current_dir(&work));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{pointer:?}: {}",
            describe(&out)
        );
        assert!(
            stderr_of(&out).contains("--continue"),
            "{pointer:?}: {}",
            describe(&out)
        );
        assert!(srv.requests().is_empty(), "{pointer:?}: a request was made");
        assert!(
            !gone.exists(),
            "{pointer:?}: a new conversation was started"
        );
        assert_eq!(
            std::fs::read_dir(&work).unwrap().count(),
            0,
            "{pointer:?}: files were created in the working directory"
        );
    }
}

/// A profile's credential headers (Azure's `api-key`) follow its key: a command-line
/// base URL elsewhere gets neither; ordinary headers still go.
#[test]
fn a_profile_credential_header_is_not_sent_to_a_command_line_base_url() {
    let home = temp_dir("review-profile-header");
    let secret = "azure-secret-0123456789";
    write_config(
        &home,
        r#"
default_profile = "azure"
[profiles.azure]
base_url = "https://work.example.invalid/openai/v1"
headers = { "api-key" = "${AZURE_KEY}", "X-Team" = "blue" }
"#,
    );
    let srv = server(json!({"exchanges": [answer_text("Fine.", 2)]}));
    let base = format!("{}/v1", srv.url());
    let out = run(panto_in(&home, &["--base-url", &base, "hello"]).env("AZURE_KEY", secret));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert!(
        !request.headers.contains_key("api-key"),
        "the profile's credential header went to a command-line URL: {:?}",
        request.headers
    );
    assert_eq!(request.headers["x-team"], "blue");
    assert!(stderr_of(&out).contains("not sending profile header api-key"));

    // To the profile's own URL it goes.
    write_config(
        &home,
        &format!("[profiles.azure]\nbase_url = \"{base}\"\nheaders = {{ \"api-key\" = \"${{AZURE_KEY}}\" }}\n"),
    );
    let out = run(panto_in(&home, &["-p", "azure", "hello"]).env("AZURE_KEY", secret));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.headers["api-key"], secret);
}
