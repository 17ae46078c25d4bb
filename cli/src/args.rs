//! Owns the command line: subcommands, options and their help text (clap derive). It
//! only parses; turning options into an agent is `setup`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::exit::EXIT_CODES_HELP;

#[derive(Debug, Parser)]
#[command(
    name = "panto",
    version,
    about = "An LLM agent on the command line: streams a turn, runs your shell tools, repeats until the model is done.",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one turn: send PROMPT (or stdin), stream the answer, run tools, exit.
    #[command(after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Interactive conversation: one turn per line of input (/clear, /exit, /help).
    #[command(after_help = EXIT_CODES_HELP)]
    Chat(AgentArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The prompt; read from stdin when absent.
    pub prompt: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Provider {
    /// OpenAI Chat Completions and compatible servers (Ollama, vLLM, Groq, …).
    #[value(name = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// Options shared by `run` and `chat`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Provider wire format.
    #[arg(long, value_enum, default_value_t = Provider::OpenAi)]
    pub provider: Provider,

    /// Model name [default: gpt-4o-mini (openai), claude-sonnet-4-5 (anthropic)].
    #[arg(long)]
    pub model: Option<String>,

    /// Base URL as in the provider's SDK: OpenAI's includes /v1
    /// (http://localhost:11434/v1 for Ollama), Anthropic's does not.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,

    /// API key [default: $OPENAI_API_KEY or $ANTHROPIC_API_KEY]. Prefer the variable:
    /// command lines are visible to other users of the machine.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,

    /// System prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,

    /// Cap on output tokens per response.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,

    /// Cap on assistant messages (model calls) per turn [default: 16].
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u32>,

    /// Retries of a request that fails before its first byte [default: 2].
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,

    /// Longest wait for stream progress, in milliseconds [default: 120000].
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,

    /// Longest time for one request, from send to last byte, in milliseconds
    /// [default: 600000].
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,

    /// A tool backed by a shell command, run with `sh -c COMMAND`: the call's arguments
    /// JSON on stdin, stdout is the result, a non-zero exit makes it an error result.
    /// It runs in its own process group, killed as a whole when the call ends, times out
    /// or is cancelled (a daemon it must leave behind needs `setsid`). Repeatable.
    #[arg(long = "tool", value_name = "NAME=COMMAND", value_parser = parse_tool)]
    pub tools: Vec<ToolArg>,

    /// JSON array of [{"name","description","parameters"}] describing --tool names
    /// (without an entry a tool gets an empty description and {"type":"object"}).
    #[arg(long = "tools", value_name = "FILE")]
    pub tools_file: Option<PathBuf>,

    /// Longest run of one tool command, in milliseconds; it is then killed and the
    /// model gets an error result [default: 120000].
    #[arg(long, value_name = "MS")]
    pub tool_timeout_ms: Option<u64>,

    /// Cap on what is read from one tool command, stdout and stderr together: past it
    /// the command is killed and its result cut, ending with an "[output truncated: …]"
    /// line.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::shell_tool::DEFAULT_MAX_OUTPUT_BYTES as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_tool_output_bytes: u64,

    /// Conversation file: loaded if it exists, saved after every turn (also after a
    /// failed or cancelled one), written atomically with mode 0600 for a new file. A
    /// symlink is followed to its target. Locked while panto runs (FILE.lock): a second
    /// panto on the same file fails with exit code 2.
    #[arg(long, value_name = "FILE")]
    pub session: Option<PathBuf>,

    /// Print every event as one line of canonical JSON (and a final error line on
    /// failure) instead of human output. Text is kept exact there (JSON escapes control
    /// characters); human output removes escape sequences coming from the model, the
    /// server or tools, and shows other control characters as symbols (␀, ␇, ␡, …).
    #[arg(long)]
    pub json: bool,
}

/// One `--tool NAME=COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolArg {
    pub name: String,
    pub command: String,
}

fn parse_tool(s: &str) -> Result<ToolArg, String> {
    let Some((name, command)) = s.split_once('=') else {
        return Err("expected NAME=COMMAND".to_owned());
    };
    let name = name.trim();
    if name.is_empty() {
        return Err("the tool NAME is empty (expected NAME=COMMAND)".to_owned());
    }
    if command.trim().is_empty() {
        return Err(format!("the command of tool {name:?} is empty"));
    }
    Ok(ToolArg {
        name: name.to_owned(),
        command: command.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn tool_splits_at_the_first_equals_sign() {
        let t = parse_tool("weather=jq -r '.city == \"x\"'").unwrap();
        assert_eq!(t.name, "weather");
        assert_eq!(t.command, "jq -r '.city == \"x\"'");
        assert!(parse_tool("weather").is_err());
        assert!(parse_tool("=cmd").is_err());
        assert!(parse_tool("w=  ").is_err());
    }
}
