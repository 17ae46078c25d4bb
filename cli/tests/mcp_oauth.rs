//! The CLI signs in to an OAuth-protected MCP server (tests/mcp/oauth_server.py, the
//! `mcp` package's resource and authorization servers on loopback): the authorization
//! code flow with PKCE through `$BROWSER` (tests/mcp/browser.py follows the URL), the
//! tokens kept in a file of mode 0600 and used by the next run without a browser, and
//! client credentials for `panto mcp list`; no token in any output or saved file.

mod support;

use std::path::Path;

use panto_testkit::mcp::{python, root, OAuthFixture};
use panto_testserver::script;
use serde_json::json;
use support::*;

fn profile(home: &Path, fx: &OAuthFixture, oauth: &str) -> String {
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.t.mcp_servers.sec]\nurl = {:?}\n[profiles.t.mcp_servers.sec.oauth]\n{oauth}\n",
            fx.url()
        ),
    )
    .unwrap();
    config.to_string_lossy().into_owned()
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if let Ok(text) = std::fs::read(&path) {
            out.push((
                path.to_string_lossy().into_owned(),
                String::from_utf8_lossy(&text).into_owned(),
            ));
        }
    }
    out
}

#[test]
fn the_cli_signs_in_through_the_browser_and_keeps_the_tokens_private() {
    let fx = OAuthFixture::start(&[]);
    let home = temp_dir("mcp-oauth-code");
    let cfg = profile(&home, &fx, "grant = \"authorization_code\"");
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[("w", "sec__whoami", "{}"), ("l", "sec__leak", "{}")])),
        script::exchange(script::openai_text(&["signed in"])),
        script::exchange(script::openai_tool_calls(&[("w2", "sec__whoami", "{}")])),
        script::exchange(script::openai_text(&["again"])),
    ]}));
    let base = format!("{}/v1", server.url());
    let browser = format!(
        "{} {}",
        python(),
        root().join("tests/mcp/browser.py").to_string_lossy()
    );
    let args = [
        "run",
        "--json",
        "--config",
        &cfg,
        "-p",
        "t",
        "--base-url",
        &base,
        "--api-key",
        "k",
        "go",
    ];
    let out = run(panto_in(&home, &args).env("BROWSER", &browser));
    assert!(out.status.success(), "{}", describe(&out));
    let events = json_lines(&out);
    let result = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_result" && e["call_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}: {}", describe(&out)))["output"]
            .clone()
    };
    let who = result("w");
    let who = who.as_str().unwrap();
    assert!(
        who.starts_with("client ") && who.ends_with(&format!(" resource {}", fx.url())),
        "{who}"
    );
    assert_eq!(result("l"), "your token is [REDACTED]");
    assert!(
        stderr_of(&out).contains("asks you to sign in; opening http://127.0.0.1:"),
        "{}",
        describe(&out)
    );
    assert_eq!(fx.grants(), ["authorization_code"]);

    // The tokens are in the state directory, readable by the owner only.
    let file = home.join("state/panto/mcp-tokens.json");
    let saved = std::fs::read_to_string(&file).expect("the token file");
    assert!(saved.contains(&fx.url()), "{saved}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    // The next run uses them: no browser (one that fails), no new grant.
    let out = run(panto_in(&home, &args).env("BROWSER", "false"));
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!stderr_of(&out).contains("sign in"), "{}", describe(&out));
    assert_eq!(fx.grants(), ["authorization_code"]);

    // No token anywhere but the token file: not in the output, the requests to the
    // model, or the saved conversations.
    let tokens = fx.tokens();
    assert_eq!(tokens.len(), 2, "an access and a refresh token");
    let mut shown = vec![
        ("stdout".to_owned(), stdout_of(&out)),
        ("stderr".to_owned(), stderr_of(&out)),
    ];
    for r in server.requests() {
        shown.push(("a model request".to_owned(), r.body.to_string()));
    }
    shown.extend(
        files_under(&home.join("state"))
            .into_iter()
            .filter(|(p, _)| !p.ends_with("mcp-tokens.json")),
    );
    for (what, text) in shown {
        for t in &tokens {
            assert!(!text.contains(t.as_str()), "{what} shows a token: {text}");
        }
    }
}

#[test]
fn mcp_list_signs_in_with_client_credentials() {
    let fx = OAuthFixture::start(&[]);
    let home = temp_dir("mcp-oauth-cc");
    let cfg = profile(
        &home,
        &fx,
        "grant = \"client_credentials\"\nclient_id = \"panto-cc\"\nclient_secret = \"cc-secret-0123456789\"",
    );
    let out = run(&mut panto_in(
        &home,
        &["mcp", "list", "--config", &cfg, "-p", "t"],
    ));
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout_of(&out);
    assert!(text.contains("sec: 2 tools\n  sec__leak"), "{text}");
    assert_eq!(fx.grants(), ["client_credentials"]);
    assert!(!text.contains("cc-secret-0123456789"));

    // A wrong secret (and no token kept from before): the authentication exit code, the
    // secret not shown.
    let home = temp_dir("mcp-oauth-cc-wrong");
    let cfg = profile(
        &home,
        &fx,
        "grant = \"client_credentials\"\nclient_id = \"panto-cc\"\nclient_secret = \"wrong-secret-0123456789\"",
    );
    let out = run(&mut panto_in(
        &home,
        &["mcp", "list", "--config", &cfg, "-p", "t"],
    ));
    let text = stdout_of(&out);
    assert!(
        text.contains("sec: error (authentication)") && text.contains("invalid_client"),
        "{}",
        describe(&out)
    );
    assert!(!describe(&out).contains("wrong-secret-0123456789"));
    assert_ne!(out.status.code(), Some(0));
}
