//! Owns `panto mcp resources`, `mcp read URI`, `mcp prompts` and `mcp prompt NAME
//! [ARG=VALUE…]`: they start the servers of the profile and the --mcp flags (as `mcp
//! list` does), ask them, print the answer (human text, or JSON with --json), and stop
//! them before exiting (an HTTP session is ended with its DELETE). Which servers a
//! command uses is `mcp::servers`'s; what the answers are is the core's
//! (`McpServers::resources` and the rest).

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};

use panto::{CancellationToken, Error, McpResourceBody, McpServers};
use serde_json::{json, Value};

use crate::args::{McpListArgs, McpPromptArgs, McpReadArgs, McpResourcesArgs};
use crate::exit::{exit_code, OK, STDOUT_CLOSED};
use crate::profile;

/// Why a command stopped: an error of the core, or stdout closed by its reader.
enum Stop {
    Failed(Error),
    StdoutClosed,
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Stop::StdoutClosed
        } else {
            Stop::Failed(Error::internal(format!("cannot write to stdout: {e}")))
        }
    }
}

/// Starts the servers of `args`, runs `work` on a runtime of this thread, and stops the
/// servers before the runtime that drives their pipes goes; the exit code of the first
/// failure (printed on stderr), else `work`'s.
fn with_servers(
    args: &McpListArgs,
    work: impl AsyncFnOnce(&McpServers, &mut io::StdoutLock<'static>) -> Result<u8, Stop>,
) -> u8 {
    let result = (|| -> Result<u8, Stop> {
        let chosen = profile::choose(args.config.as_deref(), args.profile.as_deref())?;
        let servers = crate::mcp::servers(chosen.as_ref().map(|c| &c.profile), &args.mcp)?;
        if servers.is_empty() {
            return Err(Error::config(
                "no MCP servers: add --mcp NAME=COMMAND|URL or a profile's [mcp_servers]",
            )
            .into());
        }
        let set = McpServers::new(servers)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("cannot start a runtime: {e}")))?;
        let mut out = io::stdout().lock();
        let result = runtime.block_on(work(&set, &mut out));
        let flushed = out.flush();
        drop(set);
        drop(runtime);
        let code = result?;
        flushed?;
        Ok(code)
    })();
    match result {
        Ok(code) => code,
        Err(Stop::StdoutClosed) => STDOUT_CLOSED,
        Err(Stop::Failed(e)) => {
            eprintln!("panto: {}", e.message);
            exit_code(e.kind)
        }
    }
}

/// The servers a listing asks: `--server`, else all of them.
fn chosen(set: &McpServers, server: &Option<String>) -> Vec<String> {
    match server {
        Some(name) => vec![name.clone()],
        None => set.names(),
    }
}

/// A server's failure in a listing: a line (human) or an object (JSON); the exit code
/// of the first one is kept in `code`.
fn print_failure(
    out: &mut impl Write,
    json: bool,
    server: &str,
    e: &Error,
    code: &mut u8,
) -> io::Result<()> {
    if *code == OK {
        *code = exit_code(e.kind);
    }
    if json {
        let error: Value = serde_json::from_str(&e.to_json()).unwrap_or(Value::Null);
        writeln!(out, "{}", json!({"server": server, "error": error}))
    } else {
        writeln!(out, "{server}: error ({}): {}", e.kind.as_str(), e.message)
    }
}

/// `text` on one line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    if first.chars().count() > max {
        let cut: String = first.chars().take(max).collect();
        format!("{cut}…")
    } else {
        first.to_owned()
    }
}

/// `panto mcp resources`: each server's resources, then its resource templates.
pub fn resources(args: &McpResourcesArgs) -> u8 {
    with_servers(&args.servers, async |set, out| {
        let cancel = CancellationToken::new();
        let mut code = OK;
        for name in chosen(set, &args.server) {
            let listed = match set.resources(&name, &cancel).await {
                Ok(r) => r,
                Err(e) => {
                    print_failure(out, args.json, &name, &e, &mut code)?;
                    continue;
                }
            };
            let templates = match set.resource_templates(&name, &cancel).await {
                Ok(t) => t,
                Err(e) => {
                    print_failure(out, args.json, &name, &e, &mut code)?;
                    continue;
                }
            };
            if args.json {
                for r in &listed {
                    writeln!(out, "{}", r.to_value())?;
                }
                for t in &templates {
                    writeln!(out, "{}", t.to_value())?;
                }
                continue;
            }
            writeln!(out, "{name}: {} resources", listed.len())?;
            for r in &listed {
                let mut line = format!("  {}", r.uri);
                if r.name != r.uri {
                    line.push_str(&format!("  {}", r.name));
                }
                if let Some(t) = &r.mime_type {
                    line.push_str(&format!(" ({t})"));
                }
                if let Some(d) = r.description.as_deref().or(r.title.as_deref()) {
                    line.push_str(&format!("  {}", one_line(d, 100)));
                }
                writeln!(out, "{line}")?;
            }
            if !templates.is_empty() {
                writeln!(out, "{name}: {} resource templates", templates.len())?;
                for t in &templates {
                    let about = t.description.as_deref().or(t.title.as_deref());
                    match about {
                        Some(d) => writeln!(out, "  {}  {}", t.uri_template, one_line(d, 100))?,
                        None => writeln!(out, "  {}", t.uri_template)?,
                    }
                }
            }
        }
        Ok(code)
    })
}

/// `panto mcp read URI`: text contents as they are; bytes raw when stdout is not a
/// terminal, else a line naming them.
pub fn read(args: &McpReadArgs) -> u8 {
    with_servers(&args.servers, async |set, out| {
        let cancel = CancellationToken::new();
        let server = set
            .server_of_resource(args.server.as_deref(), &args.uri, &cancel)
            .await?;
        let contents = set.read_resource(&server, &args.uri, &cancel).await?;
        if args.json {
            writeln!(out, "{}", panto::mcp::resource_contents_to_value(&contents))?;
            return Ok(OK);
        }
        let terminal = io::stdout().is_terminal();
        for c in &contents {
            match &c.body {
                McpResourceBody::Text(text) => {
                    out.write_all(text.as_bytes())?;
                    if terminal && !text.ends_with('\n') {
                        writeln!(out)?;
                    }
                }
                McpResourceBody::Blob(bytes) if !terminal => out.write_all(bytes)?,
                McpResourceBody::Blob(bytes) => writeln!(
                    out,
                    "[{}: {}, {} bytes; redirect stdout to a file to save them]",
                    c.uri,
                    c.mime_type.as_deref().unwrap_or("binary"),
                    bytes.len()
                )?,
            }
        }
        Ok(OK)
    })
}

/// `panto mcp prompts`: each server's prompts and their arguments.
pub fn prompts(args: &McpResourcesArgs) -> u8 {
    with_servers(&args.servers, async |set, out| {
        let cancel = CancellationToken::new();
        let mut code = OK;
        for name in chosen(set, &args.server) {
            let listed = match set.prompts(&name, &cancel).await {
                Ok(p) => p,
                Err(e) => {
                    print_failure(out, args.json, &name, &e, &mut code)?;
                    continue;
                }
            };
            if args.json {
                for p in &listed {
                    writeln!(out, "{}", p.to_value())?;
                }
                continue;
            }
            writeln!(out, "{name}: {} prompts", listed.len())?;
            for p in &listed {
                match p.description.as_deref().or(p.title.as_deref()) {
                    Some(d) => writeln!(out, "  {}  {}", p.name, one_line(d, 100))?,
                    None => writeln!(out, "  {}", p.name)?,
                }
                for a in &p.arguments {
                    let required = if a.required { " (required)" } else { "" };
                    match &a.description {
                        Some(d) => writeln!(out, "    {}{required}  {}", a.name, one_line(d, 100))?,
                        None => writeln!(out, "    {}{required}", a.name)?,
                    }
                }
            }
        }
        Ok(code)
    })
}

/// `panto mcp prompt NAME [ARG=VALUE…]`: the prompt's messages, each headed by its role.
pub fn prompt(args: &McpPromptArgs) -> u8 {
    with_servers(&args.servers, async |set, out| {
        let cancel = CancellationToken::new();
        let server = set
            .server_of_prompt(args.server.as_deref(), &args.name, &cancel)
            .await?;
        let arguments: BTreeMap<String, String> = args.arguments.iter().cloned().collect();
        let got = set
            .get_prompt(&server, &args.name, &arguments, &cancel)
            .await?;
        if args.json {
            writeln!(out, "{}", got.to_value())?;
        } else {
            out.write_all(got.text().as_bytes())?;
        }
        Ok(OK)
    })
}
