//! Owns the CLI's MCP servers: which ones a run uses (the profile's `mcp_servers`
//! table, then `--mcp` flags, which replace a server of the same name) and
//! `panto mcp list`, which starts them and prints each one's tools or its error; and
//! what the CLI lends the servers' OAuth: the token file and the browser.

use std::collections::BTreeMap;
use std::sync::Arc;

use panto::{Error, McpOAuthHooks, McpServer, McpServers, McpTokenFile};

use crate::args::McpListArgs;
use crate::exit::{exit_code, OK};
use crate::profile::{self, Profile};

/// The servers of this run: the profile's, then the flags'.
pub fn servers(
    profile: Option<&Profile>,
    flags: &[(String, McpServer)],
) -> Result<BTreeMap<String, McpServer>, Error> {
    let mut out = BTreeMap::new();
    if let Some(p) = profile {
        for (name, value) in &p.mcp_servers {
            out.insert(name.clone(), McpServer::from_value(name, value)?);
        }
    }
    for (name, server) in flags {
        out.insert(name.clone(), server.clone());
    }
    Ok(out)
}

/// Lends the OAuth of `set`'s servers, if any signs in with it, the CLI's hooks: tokens
/// kept in `$XDG_STATE_HOME/panto/mcp-tokens.json` (mode 0600, keyed by the server's
/// URL), and the authorization URL printed on stderr and opened with `$BROWSER` (its
/// words, the URL last or in place of `%s`), else `xdg-open` (`open` on macOS).
pub fn lend_oauth(set: &McpServers) {
    if !set.configs().values().any(|s| s.oauth.is_some()) {
        return;
    }
    set.set_oauth_hooks(McpOAuthHooks {
        store: Some(Arc::new(McpTokenFile::new(
            crate::paths::state_dir().join("mcp-tokens.json"),
        ))),
        open_url: Some(Arc::new(|url: &str| {
            eprintln!("panto: an MCP server asks you to sign in; opening {url}");
            open_in_browser(url);
            Ok(())
        })),
    });
}

/// Starts the user's browser on `url`, without waiting for it (a thread reaps it).
/// Nothing happens if none can start: the URL was printed.
fn open_in_browser(url: &str) {
    let words: Vec<String> = match std::env::var("BROWSER") {
        Ok(b) if !b.trim().is_empty() => {
            let mut w: Vec<String> = b
                .split_whitespace()
                .map(|p| {
                    if p == "%s" {
                        url.to_owned()
                    } else {
                        p.to_owned()
                    }
                })
                .collect();
            if !b.contains("%s") {
                w.push(url.to_owned());
            }
            w
        }
        _ if cfg!(target_os = "macos") => vec!["open".into(), url.to_owned()],
        _ => vec!["xdg-open".into(), url.to_owned()],
    };
    let started = std::process::Command::new(&words[0])
        .args(&words[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = started {
        std::thread::spawn(move || {
            let _ = child.wait();
        });
    }
}

/// `panto mcp list`: one block per server, its tools as the model sees them; a server
/// that cannot start prints its error, and the exit code is that error's.
pub fn list(args: &McpListArgs) -> u8 {
    let result = (|| -> Result<u8, Error> {
        let chosen = profile::choose(args.config.as_deref(), args.profile.as_deref())?;
        let servers = servers(chosen.as_ref().map(|c| &c.profile), &args.mcp)?;
        if servers.is_empty() {
            return Err(Error::config(
                "no MCP servers: add --mcp NAME=COMMAND|URL or a profile's [mcp_servers]",
            ));
        }
        let set = McpServers::new(servers)?;
        lend_oauth(&set);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("cannot start a runtime: {e}")))?;
        let listed = runtime.block_on(set.list(&Default::default()));
        let mut code = OK;
        for (name, tools) in listed {
            match tools {
                Ok(tools) => {
                    println!("{name}: {} tools", tools.len());
                    for t in tools {
                        let first = t.description.lines().next().unwrap_or("").trim();
                        if first.is_empty() {
                            println!("  {}", t.name);
                        } else {
                            println!("  {}  {first}", t.name);
                        }
                    }
                }
                Err(e) => {
                    println!("{name}: error ({}): {}", e.kind.as_str(), e.message);
                    if code == OK {
                        code = exit_code(e.kind);
                    }
                }
            }
        }
        // The servers stop before the runtime that drives their pipes goes.
        drop(set);
        Ok(code)
    })();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("panto: {}", e.message);
            exit_code(e.kind)
        }
    }
}
