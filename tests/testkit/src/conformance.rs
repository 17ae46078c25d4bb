//! The command line every Rust conformance runner takes (`tests/conformance/README.md`,
//! "Runner arguments"), parsed once for the pull runner
//! (`pull-adapter/examples/conformance.rs`) and the push runner
//! (`core/examples/conformance_push.rs`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use panto::{Block, Input};

/// How the runner answers one host tool: after `delay`, or never when `None`; with
/// `parts` (text and images, from `--answer-parts`) when given, else with `output`.
pub struct Answer {
    pub delay: Option<Duration>,
    pub is_error: bool,
    pub output: String,
    pub parts: Option<Vec<Block>>,
}

/// When the runner takes the checkpoint it resumes from (`--resume AFTER ANSWERS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeAt {
    /// Once the first turn has ended (paused, or finished).
    End,
    /// Right after receiving event K (0-based) of the first turn, which is then
    /// abandoned (cancelled, its later events not printed).
    After(usize),
}

pub struct Args {
    pub config: String,
    /// The turn's input: `--prompt`'s text, or `--input`'s parts (the input form's JSON).
    pub input: Input,
    pub cancel_after: Option<usize>,
    pub answers: HashMap<String, Answer>,
    /// `--resume AFTER ANSWERS`: where to take the checkpoint, and the answers (the JSON
    /// form of `panto::Answers::from_json`) the new agent resumes with.
    pub resume: Option<(ResumeAt, String)>,
    /// `--steer-during NAME TEXT`: steer with TEXT when the first turn calls host tool
    /// NAME, before answering it.
    pub steer_during: Option<(String, String)>,
    /// `--after-resume NAME`: host tools not answered before the resume.
    pub after_resume: HashSet<String>,
}

pub fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut config = None;
    let mut input = None;
    let mut cancel_after = None;
    let mut answers = HashMap::new();
    let mut resume = None;
    let mut steer_during = None;
    let mut after_resume = HashSet::new();
    let value = |it: &mut dyn Iterator<Item = String>, flag: &str| {
        it.next().ok_or_else(|| format!("{flag} needs a value"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--config" => config = Some(value(&mut it, "--config")?),
            "--prompt" => input = Some(Input::from(value(&mut it, "--prompt")?)),
            "--input" => {
                let json = value(&mut it, "--input")?;
                input = Some(Input::from_json(&json).map_err(|e| format!("--input: {e}"))?);
            }
            "--cancel-after" => {
                let k = value(&mut it, "--cancel-after")?;
                cancel_after = Some(k.parse().map_err(|_| format!("bad --cancel-after {k}"))?);
            }
            "--resume" => {
                let after = value(&mut it, "--resume")?;
                let after = match after.as_str() {
                    "end" => ResumeAt::End,
                    k => ResumeAt::After(k.parse().map_err(|_| format!("bad --resume {k}"))?),
                };
                resume = Some((after, value(&mut it, "--resume")?));
            }
            "--steer-during" => {
                let name = value(&mut it, "--steer-during")?;
                steer_during = Some((name, value(&mut it, "--steer-during")?));
            }
            "--after-resume" => {
                after_resume.insert(value(&mut it, "--after-resume")?);
            }
            flag @ ("--answer" | "--answer-parts") => {
                let name = value(&mut it, flag)?;
                let delay: i64 = value(&mut it, flag)?
                    .parse()
                    .map_err(|_| format!("bad {flag} DELAY_MS"))?;
                let is_error = value(&mut it, flag)? == "true";
                let output = value(&mut it, flag)?;
                let delay = u64::try_from(delay).ok().map(Duration::from_millis);
                let parts = if flag == "--answer-parts" {
                    let input = Input::from_json(&output).map_err(|e| format!("{flag}: {e}"))?;
                    Some(input.into_parts())
                } else {
                    None
                };
                answers.insert(
                    name,
                    Answer {
                        delay,
                        is_error,
                        output,
                        parts,
                    },
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        config: config.ok_or("--config is required")?,
        input: input.ok_or("--prompt or --input is required")?,
        cancel_after,
        answers,
        resume,
        steer_during,
        after_resume,
    })
}
