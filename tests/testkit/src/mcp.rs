//! The MCP servers panto's tests talk to: the venv `tests/mcp/venv.sh` makes (pinned
//! `mcp` and `mcp-server-time` from PyPI, installed on first use), the fixture server
//! `tests/mcp/fixture_server.py`, and counting the processes of a server's process
//! group (Linux `/proc`), to prove none outlives its agent.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv with the MCP servers, made (once per process, and once per pin set on the
/// machine) by `tests/mcp/venv.sh`.
pub fn venv() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let out = std::process::Command::new("bash")
            .arg(root().join("tests/mcp/venv.sh"))
            .output()
            .expect("run tests/mcp/venv.sh");
        assert!(
            out.status.success(),
            "tests/mcp/venv.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The venv's Python.
pub fn python() -> String {
    venv().join("bin/python").to_string_lossy().into_owned()
}

/// The fixture server's path.
pub fn fixture() -> String {
    root()
        .join("tests/mcp/fixture_server.py")
        .canonicalize()
        .expect("tests/mcp/fixture_server.py")
        .to_string_lossy()
        .into_owned()
}

/// The fixture server over stdio, started with the flags `extra`
/// (`--cancel-marker PATH` and the rest: see the fixture's usage).
pub fn fixture_server(extra: &[&str]) -> panto::McpServer {
    let mut args = vec![fixture()];
    args.extend(extra.iter().map(|s| s.to_string()));
    panto::McpServer::stdio(python(), args)
}

/// A path in the temporary directory that no other test uses (`tag`, the process and a
/// counter): a marker file the fixture writes, and on a server's command line what tells
/// its processes apart from other tests'.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir()
        .join(format!(
            "panto-mcp-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ))
        .to_string_lossy()
        .into_owned()
}

/// `mcp-server-time`'s entry point in the venv.
pub fn time_server() -> String {
    venv()
        .join("bin/mcp-server-time")
        .to_string_lossy()
        .into_owned()
}

/// The pids of the processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

/// How many live (not zombie) processes are in process group `pgid`.
pub fn group_members(pgid: i32) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().parse::<i32>().is_err() {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp …": comm may hold anything, so read after its ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i32>() == Ok(pgid) && fields[0] != "Z" {
            n += 1;
        }
    }
    n
}

/// The OAuth-protected MCP server `tests/mcp/oauth_server.py` (the `mcp` package's
/// resource server and authorization server in one process on 127.0.0.1), stopped when
/// dropped.
pub struct OAuthFixture {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl OAuthFixture {
    /// Starts the server with these flags (`--token-ttl N`).
    pub fn start(extra: &[&str]) -> OAuthFixture {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python())
            .arg(
                root()
                    .join("tests/mcp/oauth_server.py")
                    .canonicalize()
                    .expect("tests/mcp/oauth_server.py"),
            )
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the OAuth fixture server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the OAuth fixture's port");
        let port = line
            .strip_prefix("PORT ")
            .unwrap_or_else(|| panic!("the OAuth fixture said {line:?}"))
            .trim()
            .to_owned();
        OAuthFixture {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The MCP endpoint (the protected resource).
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The grant types the token endpoint granted, in order.
    pub fn grants(&self) -> Vec<String> {
        serde_json::from_str(&self.call("GET", "/_grants")).expect("a JSON list")
    }

    /// Every access and refresh token issued so far.
    pub fn tokens(&self) -> Vec<String> {
        serde_json::from_str(&self.call("GET", "/_tokens")).expect("a JSON list")
    }

    /// Makes every access token issued so far invalid.
    pub fn revoke_access(&self) {
        self.call("POST", "/_revoke_access");
    }

    /// One request to a test endpoint: the body of the answer.
    fn call(&self, method: &str, path: &str) -> String {
        get_or_post(method, &self.base, path)
    }
}

impl Drop for OAuthFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 request with no body to `base` (`http://host:port`): the answer's
/// body. For the test endpoints of the fixtures, without an HTTP client of its own.
pub fn get_or_post(method: &str, base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(host).expect("connect to the fixture");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("a read timeout");
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).expect("read the answer");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {head}");
    body.to_owned()
}

/// The fixture server in Streamable HTTP mode (`--http`), on a port of its own choosing;
/// killed when dropped.
pub struct HttpFixture {
    child: std::process::Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl HttpFixture {
    /// Starts the fixture with `--http` and `extra`, and reads back its port.
    pub fn start(extra: &[&str]) -> HttpFixture {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python())
            .arg(fixture())
            .arg("--http")
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the fixture server");
        let stdout = child.stdout.take().expect("the fixture's stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the fixture's port");
        let Some(port) = line.strip_prefix("PORT ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the fixture said {line:?}");
        };
        HttpFixture {
            base: format!("http://127.0.0.1:{}", port.trim()),
            child,
        }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The requests the server got at /mcp (`GET /_log`): method, Accept,
    /// Mcp-Session-Id, MCP-Protocol-Version of each.
    pub fn log(&self) -> Vec<serde_json::Value> {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the fixture");
        write!(
            s,
            "GET /_log HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .expect("ask the fixture for its log");
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("the fixture's log");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or_else(|e| panic!("the log {body:?}: {e}"))
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
