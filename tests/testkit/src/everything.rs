//! The MCP reference server, `@modelcontextprotocol/server-everything`, pinned in
//! `tests/mcp/everything/` and installed from npm by `tests/mcp/everything.sh` into the
//! target dir (once per machine and pin set): its entry point, and the server started
//! over Streamable HTTP on a port of its own. Without node or npm the tests that need
//! it skip, except in CI (`CI=true`), where they must run.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use crate::mcp::root;

/// The installed server's entry point (`dist/index.js`), or `None` when node or npm is
/// missing outside CI (the caller skips, saying so). In CI a missing node is a failure.
pub fn entry() -> Option<String> {
    static ENTRY: OnceLock<Option<String>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            let out = Command::new("bash")
                .arg(root().join("tests/mcp/everything.sh"))
                .output()
                .expect("run tests/mcp/everything.sh");
            let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
            if out.status.code() == Some(3) && !in_ci {
                eprintln!("skipped: node and npm are needed for the server-everything tests");
                return None;
            }
            assert!(
                out.status.success(),
                "tests/mcp/everything.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .clone()
}

/// The arguments that start the server over stdio: `node <entry> stdio`.
pub fn stdio_args(entry: &str) -> Vec<String> {
    vec![entry.to_owned(), "stdio".to_owned()]
}

/// The server over Streamable HTTP, killed when dropped.
pub struct HttpEverything {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl HttpEverything {
    /// Starts the server on a port the system picks (tests/mcp/everything_http.mjs
    /// prints it) and returns once it listens.
    pub fn start(entry: &str) -> HttpEverything {
        let launcher: PathBuf = root().join("tests/mcp/everything_http.mjs");
        let mut child = Command::new("node")
            .arg(launcher)
            .arg(entry)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server-everything over HTTP");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read its port");
        let port = line
            .strip_prefix("PORT ")
            .unwrap_or_else(|| panic!("server-everything said {line:?}"))
            .trim()
            .to_owned();
        HttpEverything {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
