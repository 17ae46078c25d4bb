//! Owns the CLI's MCP servers: which ones a run uses (the profile's `mcp_servers`
//! table, then `--mcp` flags, which replace a server of the same name) and
//! `panto mcp list`, which starts them and prints each one's tools or its error.

use std::collections::BTreeMap;

use panto::{Error, McpServer, McpServers};

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
