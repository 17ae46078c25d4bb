//! MCP resources and prompts, against the fixture server written with the `mcp` package
//! (tests/mcp/fixture_server.py, from the pinned venv of tests/mcp/venv.sh), over stdio
//! and Streamable HTTP: listing over every page, reading text and binary contents, the
//! parts they become, prompts with arguments, the servers' errors and their kinds,
//! cancellation and timeouts, secrets kept out of errors, and the opt-in
//! `read_resource` tool the model follows a `resource_link` with.

use std::collections::BTreeMap;
use std::time::Duration;

use panto::{
    Agent, Block, CancellationToken, ErrorKind, McpResourceBody, McpServer, McpServers,
    ProviderKind, Role, TurnControl,
};
use panto_testkit::mcp::{fixture_server, unique, HttpFixture};
use panto_testkit::{eventually_async, model, offered};
use panto_testserver::script;
use serde_json::json;

const HANG_GUARD: Duration = Duration::from_secs(90);

fn set(servers: Vec<(&str, McpServer)>) -> McpServers {
    McpServers::new(
        servers
            .into_iter()
            .map(|(n, s)| (n.to_owned(), s))
            .collect(),
    )
    .unwrap()
}

/// What every transport must show of the fixture's resources.
async fn check_resources(servers: &McpServers, name: &str) {
    let none = CancellationToken::new();
    let listed = servers.resources(name, &none).await.unwrap();
    // Two pages, in order.
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "fixture://notes",
            "fixture://pixel.png",
            "file:///tmp/report.txt",
            "fixture://data.bin"
        ]
    );
    assert_eq!(listed[0].server, name);
    assert_eq!(listed[0].title.as_deref(), Some("The notes"));
    assert_eq!(listed[0].mime_type.as_deref(), Some("text/plain"));
    assert_eq!(listed[1].size, Some(70));
    let templates = servers.resource_templates(name, &none).await.unwrap();
    assert_eq!(templates.len(), 1);
    assert_eq!(templates[0].uri_template, "fixture://greeting/{name}");

    let notes = servers
        .read_resource(name, "fixture://notes", &none)
        .await
        .unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].body, McpResourceBody::Text("the notes".into()));
    assert_eq!(
        notes[0].to_part(),
        Block::text("[resource: fixture://notes type text/plain]\nthe notes")
    );
    let pixel = servers
        .read_resource(name, "fixture://pixel.png", &none)
        .await
        .unwrap();
    match (&pixel[0].body, pixel[0].to_part()) {
        (McpResourceBody::Blob(bytes), Block::Image(media)) => {
            assert!(bytes.starts_with(b"\x89PNG"));
            assert_eq!(media.media_type(), Some("image/png"));
        }
        other => panic!("{other:?}"),
    }
    let data = servers
        .read_resource(name, "fixture://data.bin", &none)
        .await
        .unwrap();
    assert_eq!(data[0].body, McpResourceBody::Blob(vec![0, 1, 2]));
    assert_eq!(
        data[0].to_part(),
        Block::text(
            "[resource: fixture://data.bin, application/octet-stream, 3 bytes, not shown to the model]"
        )
    );
    let greeting = servers
        .read_resource(name, "fixture://greeting/Ann", &none)
        .await
        .unwrap();
    assert_eq!(greeting[0].body, McpResourceBody::Text("hello Ann".into()));
    // The JSON form the bindings get holds parts a turn's input takes.
    let v = panto::mcp::resource_contents_to_value(&pixel);
    let input = panto::Input::from_value(&json!([v["contents"][0]["part"]])).unwrap();
    assert!(input.has_attachments());

    let missing = servers
        .read_resource(name, "fixture://nothing", &none)
        .await
        .unwrap_err();
    assert_eq!(missing.kind, ErrorKind::NotFound, "{missing:?}");
    assert!(
        missing.message.contains("no resource fixture://nothing"),
        "{}",
        missing.message
    );
}

/// What every transport must show of the fixture's prompts.
async fn check_prompts(servers: &McpServers, name: &str) {
    let none = CancellationToken::new();
    let prompts = servers.prompts(name, &none).await.unwrap();
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["greet", "picture"]);
    let greet = &prompts[0];
    assert_eq!(greet.title.as_deref(), Some("Greeting"));
    assert_eq!(greet.arguments.len(), 2);
    assert!(greet.arguments[0].required && !greet.arguments[1].required);
    assert_eq!(greet.arguments[1].name, "style");

    let args = BTreeMap::from([
        ("name".to_owned(), "Ann".to_owned()),
        ("style".to_owned(), "formal".to_owned()),
    ]);
    let got = servers
        .get_prompt(name, "greet", &args, &none)
        .await
        .unwrap();
    assert_eq!(got.description.as_deref(), Some("A greeting."));
    assert_eq!(got.messages.len(), 2);
    assert_eq!(got.messages[0].role, Role::User);
    assert_eq!(
        got.messages[0].parts,
        [Block::text("Say hello to Ann in a formal way")]
    );
    assert_eq!(got.messages[1].role, Role::Assistant);
    assert_eq!(
        got.text(),
        "user: Say hello to Ann in a formal way\nassistant: Hello, Ann!\n"
    );
    let picture = servers
        .get_prompt(name, "picture", &BTreeMap::new(), &none)
        .await
        .unwrap();
    assert!(matches!(picture.messages[0].parts[0], Block::Image(_)));
    assert_eq!(
        picture.messages[1].parts,
        [Block::text(
            "[resource: fixture://notes type text/plain]\nthe notes"
        )]
    );
    // A missing argument and an unknown prompt are the server's -32602.
    let e = servers
        .get_prompt(name, "greet", &BTreeMap::new(), &none)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest, "{e:?}");
    assert!(
        e.message.contains("greet needs the argument name"),
        "{}",
        e.message
    );
    let e = servers
        .get_prompt(name, "nope", &BTreeMap::new(), &none)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest, "{e:?}");
}

#[tokio::test]
async fn resources_and_prompts_over_stdio() {
    let servers = set(vec![("fx", fixture_server(&[]))]);
    check_resources(&servers, "fx").await;
    check_prompts(&servers, "fx").await;
    // Every server's at once (here, one).
    let all = servers
        .all_resources(&CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(
        servers
            .all_prompts(&CancellationToken::new())
            .await
            .unwrap()
            .len(),
        2
    );
    // A server that is not there is a config error naming the servers there are.
    let e = servers
        .resources("nope", &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("(the servers: fx)"), "{}", e.message);
    // Closed servers answer nothing.
    servers.close();
    let e = servers
        .prompts("fx", &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e:?}");
}

#[tokio::test]
async fn resources_and_prompts_over_streamable_http() {
    let fx = HttpFixture::start(&[]);
    let servers = set(vec![("web", McpServer::http(fx.url()))]);
    check_resources(&servers, "web").await;
    check_prompts(&servers, "web").await;
    // Dropping the set ends the session: its DELETE runs on this runtime, so the wait
    // for it runs off it.
    drop(servers);
    let stopped = tokio::task::spawn_blocking(|| panto::mcp::wait_stopped(HANG_GUARD));
    assert!(stopped.await.unwrap());
    let log = fx.log();
    assert_eq!(
        log.last().map(|r| r["method"].clone()),
        Some(json!("DELETE")),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_cancelled_read_is_withdrawn_and_a_silent_one_times_out() {
    let marker = unique("cancel");
    let servers = set(vec![(
        "fx",
        fixture_server(&["--cancel-marker", &marker]).with_timeout_ms(60_000),
    )]);
    let cancel = CancellationToken::new();
    let read = {
        let servers = servers.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { servers.read_resource("fx", "fixture://hang", &cancel).await })
    };
    let started = format!("{marker}.started");
    eventually_async("the server got the read", || {
        std::path::Path::new(&started).exists()
    })
    .await;
    assert!(
        !read.is_finished(),
        "the read ended before it was cancelled"
    );
    cancel.cancel();
    let e = tokio::time::timeout(HANG_GUARD, read)
        .await
        .expect("the cancelled read hung")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled);
    eventually_async("the server saw notifications/cancelled", || {
        std::path::Path::new(&marker).exists()
    })
    .await;
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&started);
    // A token cancelled before the call sends nothing and fails at once.
    let e = servers.prompts("fx", &cancel).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled);

    let quick = set(vec![("fx", fixture_server(&[]).with_timeout_ms(300))]);
    let e = tokio::time::timeout(
        HANG_GUARD,
        quick.read_resource("fx", "fixture://hang", &CancellationToken::new()),
    )
    .await
    .expect("the read hung past its timeout")
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    assert!(
        e.message
            .contains("did not answer resources/read within 300 ms"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn secrets_stay_out_of_a_servers_errors() {
    // A credential-like variable of a stdio server's env, echoed by the server's error.
    let secret = "tok-resource-secret-0123456789";
    let servers = set(vec![(
        "fx",
        fixture_server(&[]).with_env("API_TOKEN", secret),
    )]);
    let e = servers
        .read_resource(
            "fx",
            "fixture://env-error/API_TOKEN",
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Server, "{e:?}");
    assert!(
        e.message.contains("the value is [REDACTED]"),
        "{}",
        e.message
    );
    assert!(!format!("{e:?}").contains(secret));

    // An HTTP server's header: a 401 names the server, never the credential.
    let token = "tok-http-resources-0123456789";
    let fx = HttpFixture::start(&["--require-header", &format!("Authorization=Bearer {token}")]);
    let wrong = "tok-wrong-resources-987654";
    let servers = set(vec![(
        "web",
        McpServer::http(fx.url()).with_header("Authorization", format!("Bearer {wrong}")),
    )]);
    let e = servers
        .resources("web", &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert!(!format!("{e:?}").contains(wrong));
}

#[tokio::test]
async fn the_model_follows_a_resource_link_with_read_resource() {
    let server = model(vec![
        script::openai_tool_calls(&[("l", "fx__resource", "{}")]),
        script::openai_tool_calls(&[(
            "r",
            "fx__read_resource",
            r#"{"uri":"file:///tmp/report.txt"}"#,
        )]),
        script::openai_tool_calls(&[
            ("p", "fx__read_resource", r#"{"uri":"fixture://pixel.png"}"#),
            ("m", "fx__read_resource", r#"{"uri":"fixture://nothing"}"#),
            ("n", "fx__read_resource", "{}"),
        ]),
        script::openai_text(&["done"]),
    ]);
    let agent = Agent::new(
        panto_testkit::config(ProviderKind::OpenAi, &server)
            .with_mcp_server("fx", fixture_server(&[]).with_read_resource(true)),
    )
    .unwrap();
    let (events, r) =
        panto_testkit::turn_with(&agent, "go", &TurnControl::default(), Default::default()).await;
    assert_eq!(r.unwrap().text, "done");
    assert!(offered(&server, 0).contains(&"fx__read_resource".to_owned()));
    let results: BTreeMap<String, (String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            panto::Event::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => Some((call_id.clone(), (output.clone(), *is_error))),
            _ => None,
        })
        .collect();
    assert!(results["l"]
        .0
        .contains("[resource link: file:///tmp/report.txt"));
    assert_eq!(
        results["r"],
        (
            "[resource: file:///tmp/report.txt type text/plain]\nthe report".to_owned(),
            false
        )
    );
    assert!(!results["p"].1);
    assert!(results["m"].1 && results["m"].0.contains("no resource fixture://nothing"));
    assert!(results["n"].1 && results["n"].0.contains("needs a \"uri\""));
    // The image reached the model as an image part of the tool result.
    let third = serde_json::to_string(&server.requests()[3].body).unwrap();
    assert!(third.contains("data:image/png;base64,"), "{third}");

    // Off by default: not offered.
    let server = model(vec![script::openai_text(&["ok"])]);
    let agent = Agent::new(
        panto_testkit::config(ProviderKind::OpenAi, &server)
            .with_mcp_server("fx", fixture_server(&[])),
    )
    .unwrap();
    let (_, r) =
        panto_testkit::turn_with(&agent, "go", &TurnControl::default(), Default::default()).await;
    assert_eq!(r.unwrap().text, "ok");
    let names = offered(&server, 0);
    assert!(names.contains(&"fx__echo".to_owned()));
    assert!(
        !names.iter().any(|n| n.ends_with("read_resource")),
        "{names:?}"
    );
    // The agent's own set answers the host between turns.
    let set = agent.mcp_servers().unwrap();
    assert_eq!(
        set.prompts("fx", &CancellationToken::new())
            .await
            .unwrap()
            .len(),
        2
    );
}
