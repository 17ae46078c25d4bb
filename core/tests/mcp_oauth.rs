//! OAuth 2.1 for Streamable HTTP MCP servers, end to end against a real OAuth-protected
//! server: tests/mcp/oauth_server.py, the `mcp` package's resource server and its
//! authorization server on loopback (pinned venv, tests/mcp/venv.sh). Client
//! credentials, the authorization code flow with PKCE driven by the test (its "browser"
//! follows the authorization URL to panto's loopback listener), dynamic registration,
//! refresh after the server refuses a token, tokens kept by the host's store, refused
//! credentials as `authentication` errors, and no token in any event, error or request
//! to the model.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use panto::{
    Agent, Config, ErrorKind, Event, McpOAuth, McpOAuthHooks, McpServer, McpTokenStore,
    ProviderKind, TurnControl,
};
use panto_testkit::mcp::OAuthFixture;
use panto_testkit::{model, turn_with};
use panto_testserver::script;
use panto_testserver::TestServer;

const CC_CLIENT: &str = "panto-cc";
const CC_SECRET: &str = "cc-secret-0123456789";

fn config(server: &TestServer) -> Config {
    panto_testkit::config(ProviderKind::OpenAi, server)
}

/// A host's token store: what was saved, by server URL, and how often.
#[derive(Default)]
struct MemoryStore {
    saved: Mutex<HashMap<String, String>>,
    saves: Mutex<usize>,
}

impl McpTokenStore for MemoryStore {
    fn load(&self, server_url: &str) -> Option<String> {
        self.saved.lock().unwrap().get(server_url).cloned()
    }

    fn save(&self, server_url: &str, tokens: &str) {
        self.saved
            .lock()
            .unwrap()
            .insert(server_url.to_owned(), tokens.to_owned());
        *self.saves.lock().unwrap() += 1;
    }
}

/// The test's browser: follows the authorization URL (the authorization server
/// approves at once and redirects to panto's loopback listener). Records every URL.
fn browser(opened: Arc<Mutex<Vec<String>>>) -> panto::McpOpenUrl {
    Arc::new(move |url: &str| {
        opened.lock().unwrap().push(url.to_owned());
        let url = url.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let answer = reqwest::get(&url).await.expect("the browser's request");
                assert!(answer.status().is_success(), "{}", answer.status());
                let page = answer.text().await.unwrap();
                assert!(page.contains("panto is signed in"), "{page}");
            });
        });
        Ok(())
    })
}

fn agent_with(server: &TestServer, mcp: McpServer, hooks: McpOAuthHooks) -> Agent {
    let agent = Agent::new(config(server).with_mcp_server("sec", mcp)).unwrap();
    agent.mcp_servers().unwrap().set_oauth_hooks(hooks);
    agent
}

/// Runs a turn: its events and the text, or the error.
async fn run(agent: &Agent) -> (Vec<Event>, panto::Result<String>) {
    let (events, r) = turn_with(agent, "go", &TurnControl::default(), Default::default()).await;
    (events, r.map(|s| s.text))
}

/// Every tool result's output, by call id (calls run at once: their order is not).
fn outputs(events: &[Event]) -> HashMap<String, String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => {
                assert!(!is_error, "{output}");
                Some((call_id.clone(), output.clone()))
            }
            _ => None,
        })
        .collect()
}

/// No token the authorization server issued appears in `text`.
fn assert_no_token(fx: &OAuthFixture, what: &str, text: &str) {
    for t in fx.tokens() {
        assert!(!text.contains(&t), "{what} shows a token: {text}");
    }
}

fn assert_nothing_shows_a_token(fx: &OAuthFixture, events: &[Event], model: &TestServer) {
    for e in events {
        assert_no_token(fx, "an event", &e.to_json());
    }
    for r in model.requests() {
        assert_no_token(fx, "a request to the model", &r.body.to_string());
    }
}

#[tokio::test]
async fn client_credentials_sign_in_and_a_refused_token_is_replaced() {
    let fx = OAuthFixture::start(&[]);
    let server = model(vec![
        script::openai_tool_calls(&[("w", "sec__whoami", "{}"), ("l", "sec__leak", "{}")]),
        script::openai_text(&["done"]),
        script::openai_tool_calls(&[("w2", "sec__whoami", "{}")]),
        script::openai_text(&["again"]),
    ]);
    let store = Arc::new(MemoryStore::default());
    let mcp =
        McpServer::http(fx.url()).with_oauth(McpOAuth::client_credentials(CC_CLIENT, CC_SECRET));
    let agent = agent_with(
        &server,
        mcp,
        McpOAuthHooks {
            store: Some(store.clone()),
            open_url: None,
        },
    );
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap(), "done");
    let out = outputs(&events);
    // The token was asked for this server (RFC 8707), and the server took it.
    assert_eq!(
        out["w"],
        format!("client {CC_CLIENT} resource {}", fx.url())
    );
    // The server echoes the token it got: panto shows it redacted.
    assert_eq!(out["l"], "your token is [REDACTED]");
    assert_eq!(fx.grants(), ["client_credentials"]);
    let tokens = fx.tokens();
    assert_eq!(tokens.len(), 1);
    // The host's store keeps it, keyed by the server's URL.
    let saved = store.load(&fx.url()).expect("the token was saved");
    assert!(saved.contains(&tokens[0]));
    assert_nothing_shows_a_token(&fx, &events, &server);
    assert!(!format!("{:?}", agent.config()).contains(CC_SECRET));
    assert!(!agent.config().to_value().to_string().contains(CC_SECRET));

    // The server refuses the token from now on: panto gets a new one and the call works.
    fx.revoke_access();
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap(), "again");
    assert_eq!(
        outputs(&events)["w2"],
        format!("client {CC_CLIENT} resource {}", fx.url())
    );
    assert_eq!(fx.grants(), ["client_credentials", "client_credentials"]);
    assert_eq!(*store.saves.lock().unwrap(), 2);
    assert_nothing_shows_a_token(&fx, &events, &server);
}

#[tokio::test]
async fn the_authorization_code_flow_with_pkce_registers_signs_in_and_refreshes() {
    let fx = OAuthFixture::start(&[]);
    let server = model(vec![
        script::openai_tool_calls(&[("w", "sec__whoami", "{}"), ("l", "sec__leak", "{}")]),
        script::openai_text(&["signed in"]),
        script::openai_tool_calls(&[("w2", "sec__whoami", "{}")]),
        script::openai_text(&["refreshed"]),
        script::openai_tool_calls(&[("w3", "sec__whoami", "{}")]),
        script::openai_text(&["from the store"]),
    ]);
    let store = Arc::new(MemoryStore::default());
    let opened = Arc::new(Mutex::new(Vec::new()));
    let hooks = McpOAuthHooks {
        store: Some(store.clone()),
        open_url: Some(browser(opened.clone())),
    };
    let mcp = McpServer::http(fx.url()).with_oauth(McpOAuth::authorization_code());
    let agent = agent_with(&server, mcp.clone(), hooks.clone());
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap(), "signed in");
    let out = outputs(&events);
    // panto registered itself (RFC 7591): the token is a client of its own, not the
    // preregistered one.
    let client = out["w"]
        .strip_prefix("client ")
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .to_owned();
    assert_ne!(client, CC_CLIENT);
    assert_eq!(out["w"], format!("client {client} resource {}", fx.url()));
    assert_eq!(out["l"], "your token is [REDACTED]");
    assert_eq!(fx.grants(), ["authorization_code"]);
    // The one authorization URL: PKCE with S256, a state, the resource, a loopback
    // redirect.
    let urls = opened.lock().unwrap().clone();
    assert_eq!(urls.len(), 1);
    let url = reqwest::Url::parse(&urls[0]).unwrap();
    assert_eq!(url.path(), "/authorize");
    let q: HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], client);
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert!(q["state"].len() >= 16);
    assert_eq!(q["resource"], fx.url());
    assert!(
        q["redirect_uri"].starts_with("http://127.0.0.1:"),
        "{}",
        q["redirect_uri"]
    );
    assert_nothing_shows_a_token(&fx, &events, &server);

    // The access token is refused from now on: the refresh token gets another, with
    // no one signing in again.
    fx.revoke_access();
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap(), "refreshed");
    assert_eq!(
        outputs(&events)["w2"],
        format!("client {client} resource {}", fx.url())
    );
    assert_eq!(fx.grants(), ["authorization_code", "refresh_token"]);
    assert_eq!(opened.lock().unwrap().len(), 1);
    assert_nothing_shows_a_token(&fx, &events, &server);

    // A new agent (a new run of the host) uses the stored tokens: no grant, no browser.
    drop(agent);
    let agent = agent_with(&server, mcp, hooks);
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap(), "from the store");
    assert_eq!(
        outputs(&events)["w3"],
        format!("client {client} resource {}", fx.url())
    );
    assert_eq!(fx.grants(), ["authorization_code", "refresh_token"]);
    assert_eq!(opened.lock().unwrap().len(), 1);
    let saved = store.load(&fx.url()).unwrap();
    assert!(!saved.is_empty());
}

#[tokio::test]
async fn refused_credentials_are_authentication_errors_that_show_no_secret() {
    let fx = OAuthFixture::start(&[]);
    let server = model(vec![script::openai_text(&["never"])]);
    // A wrong client secret: the authorization server refuses it.
    let wrong = "wrong-secret-9876543210";
    let agent = agent_with(
        &server,
        McpServer::http(fx.url()).with_oauth(McpOAuth::client_credentials(CC_CLIENT, wrong)),
        McpOAuthHooks::default(),
    );
    let e = run(&agent).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert!(e.message.contains("MCP server \"sec\""), "{}", e.message);
    assert!(e.message.contains("invalid_client"), "{}", e.message);
    assert!(!format!("{e:?}").contains(wrong));

    // A stored token the server refuses, no refresh token, and no way to open a
    // browser: an authentication error that says so, without the token.
    let bogus = "bogus-token-0123456789abcdef";
    let store = Arc::new(MemoryStore::default());
    store.save(&fx.url(), &format!(r#"{{"access_token":"{bogus}"}}"#));
    let agent = agent_with(
        &server,
        McpServer::http(fx.url()).with_oauth(McpOAuth::authorization_code()),
        McpOAuthHooks {
            store: Some(store),
            open_url: None,
        },
    );
    let e = run(&agent).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert!(e.message.contains("sign in"), "{}", e.message);
    assert!(!format!("{e:?}").contains(bogus), "{e:?}");
    assert!(server.requests().is_empty());
    assert!(fx.grants().is_empty());
}

#[test]
fn the_configuration_reads_oauth_and_shows_no_secret() {
    let c = Config::from_json(
        r#"{"model":"m","mcp_servers":{"s":{"url":"http://127.0.0.1:1/mcp",
            "oauth":{"grant":"client_credentials","client_id":"id","client_secret":"the-secret-123456"}}}}"#,
    )
    .unwrap();
    assert_eq!(
        c.mcp_servers["s"].oauth,
        Some(McpOAuth::client_credentials("id", "the-secret-123456"))
    );
    assert!(!c.to_value().to_string().contains("the-secret-123456"));
    assert!(!format!("{c:?}").contains("the-secret-123456"));
    for (json, words) in [
        (
            r#"{"model":"m","mcp_servers":{"s":{"url":"http://h/mcp","oauth":{"grant":"client_credentials"}}}}"#,
            "needs client_id and client_secret",
        ),
        (
            r#"{"model":"m","mcp_servers":{"s":{"command":"x","oauth":{}}}}"#,
            "mcp_servers.s.oauth: only for a server with a url",
        ),
        (
            r#"{"model":"m","mcp_servers":{"s":{"url":"http://h/mcp","oauth":{"grant":"password"}}}}"#,
            "mcp_servers.s.oauth.grant",
        ),
        (
            r#"{"model":"m","mcp_servers":{"s":{"url":"http://h/mcp","headers":{"Authorization":"Bearer x"},"oauth":{}}}}"#,
            "give one of them",
        ),
    ] {
        let e = Config::from_json(json)
            .and_then(|c| Agent::new(c).map(|_| ()))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{json}");
        assert!(e.message.contains(words), "{json}: {}", e.message);
    }
}
