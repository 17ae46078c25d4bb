//! The command line every Rust conformance runner takes (`tests/conformance/README.md`,
//! "Runner arguments"), parsed once for the pull runner
//! (`pull-adapter/examples/conformance.rs`) and the push runner
//! (`core/examples/conformance_push.rs`).

use std::collections::HashMap;
use std::time::Duration;

/// How the runner answers one host tool: after `delay`, or never when `None`.
pub struct Answer {
    pub delay: Option<Duration>,
    pub is_error: bool,
    pub output: String,
}

pub struct Args {
    pub config: String,
    pub prompt: String,
    pub cancel_after: Option<usize>,
    pub answers: HashMap<String, Answer>,
}

pub fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut config = None;
    let mut prompt = None;
    let mut cancel_after = None;
    let mut answers = HashMap::new();
    let value = |it: &mut dyn Iterator<Item = String>, flag: &str| {
        it.next().ok_or_else(|| format!("{flag} needs a value"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--config" => config = Some(value(&mut it, "--config")?),
            "--prompt" => prompt = Some(value(&mut it, "--prompt")?),
            "--cancel-after" => {
                let k = value(&mut it, "--cancel-after")?;
                cancel_after = Some(k.parse().map_err(|_| format!("bad --cancel-after {k}"))?);
            }
            "--answer" => {
                let name = value(&mut it, "--answer")?;
                let delay: i64 = value(&mut it, "--answer")?
                    .parse()
                    .map_err(|_| "bad --answer DELAY_MS".to_string())?;
                let is_error = value(&mut it, "--answer")? == "true";
                let output = value(&mut it, "--answer")?;
                let delay = u64::try_from(delay).ok().map(Duration::from_millis);
                answers.insert(
                    name,
                    Answer {
                        delay,
                        is_error,
                        output,
                    },
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        config: config.ok_or("--config is required")?,
        prompt: prompt.ok_or("--prompt is required")?,
        cancel_after,
        answers,
    })
}
