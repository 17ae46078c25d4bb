//! Owns what the CLI answers when an MCP server asks something of it: an elicitation
//! (`elicitation` enabled for the server) is asked on the terminal (`/dev/tty`, so it
//! works while stdin is piped and stdout redirected), field by field; without a
//! terminal it is declined. A sampling request (`sampling` enabled) is asked about on
//! the terminal when there is one; without one, enabling `sampling` in the
//! configuration is the consent. One dialog holds the terminal at a time
//! (`confirm::hold_terminal`), so concurrent calls ask one after the other.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;

use panto::{
    McpClientHooks, McpElicitationAnswer, McpElicitationRequest, McpSamplingRequest, McpServers,
};
use serde_json::{Map, Value};

use crate::sanitize::clean;

/// Lends `set`'s servers the terminal's hooks, when one of them enables sampling or
/// elicitation and there is a terminal.
pub fn lend(set: &McpServers) {
    let sampling = set.configs().values().any(|s| s.sampling);
    let elicitation = set.configs().values().any(|s| s.elicitation);
    if !(sampling || elicitation) || !crate::confirm::terminal_available() {
        return;
    }
    set.set_client_hooks(McpClientHooks {
        approve_sampling: sampling.then(|| {
            Arc::new(|r: &McpSamplingRequest| approve(r).unwrap_or(false))
                as panto::McpApproveSampling
        }),
        elicit: elicitation.then(|| {
            Arc::new(|r: &McpElicitationRequest| elicit(r).unwrap_or(McpElicitationAnswer::Cancel))
                as panto::McpElicit
        }),
    });
}

/// One question and answer on the terminal.
struct Tty {
    file: File,
    reader: BufReader<File>,
}

impl Tty {
    fn open() -> std::io::Result<Tty> {
        let file = OpenOptions::new().read(true).write(true).open("/dev/tty")?;
        let reader = BufReader::new(file.try_clone()?);
        Ok(Tty { file, reader })
    }

    fn ask(&mut self, question: &str) -> std::io::Result<String> {
        self.file.write_all(question.as_bytes())?;
        self.file.flush()?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(answer.trim().to_owned())
    }
}

fn approve(r: &McpSamplingRequest) -> std::io::Result<bool> {
    let _terminal = crate::confirm::hold_terminal();
    let mut tty = Tty::open()?;
    let answer = tty.ask(&format!(
        "the MCP server {} asks the model: {} (at most {} tokens). Allow? [y/N] ",
        clean(&r.server),
        clean(&r.summary),
        r.max_tokens
    ))?;
    Ok(matches!(answer.to_ascii_lowercase().as_str(), "y" | "yes"))
}

fn elicit(r: &McpElicitationRequest) -> std::io::Result<McpElicitationAnswer> {
    let _terminal = crate::confirm::hold_terminal();
    let mut tty = Tty::open()?;
    let choice = tty.ask(&format!(
        "the MCP server {} asks: {}\nanswer it? [y]es / [N]o (decline) / [c]ancel ",
        clean(&r.server),
        clean(&r.message)
    ))?;
    match choice.to_ascii_lowercase().as_str() {
        "y" | "yes" => {}
        "c" | "cancel" => return Ok(McpElicitationAnswer::Cancel),
        _ => return Ok(McpElicitationAnswer::Decline),
    }
    let empty = Map::new();
    let properties = r
        .requested_schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = r
        .requested_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, prop) in properties {
        let must = required.contains(&name.as_str());
        loop {
            let answer = tty.ask(&field_question(name, prop, must))?;
            if answer.is_empty() {
                if let Some(default) = prop.get("default") {
                    content.insert(name.clone(), default.clone());
                    break;
                }
                if !must {
                    break;
                }
                continue;
            }
            match read_field(prop, &answer) {
                Some(v) => {
                    content.insert(name.clone(), v);
                    break;
                }
                None => tty.file.write_all(b"  not a valid answer; again\n")?,
            }
        }
    }
    Ok(McpElicitationAnswer::Accept(content))
}

/// The question for one field: its title or name, what it is, its choices and default.
fn field_question(name: &str, prop: &Value, required: bool) -> String {
    let title = prop.get("title").and_then(Value::as_str).unwrap_or(name);
    let mut q = format!("  {}", clean(title));
    if let Some(d) = prop.get("description").and_then(Value::as_str) {
        q.push_str(&format!(" ({})", clean(d)));
    }
    let ty = prop.get("type").and_then(Value::as_str).unwrap_or("string");
    q.push_str(&format!(" [{ty}"));
    let choices = choices(prop);
    if !choices.is_empty() {
        q.push_str(&format!(": {}", clean(&choices.join(", "))));
    }
    q.push(']');
    if let Some(d) = prop.get("default") {
        q.push_str(&format!(" default {}", clean(&d.to_string())));
    } else if !required {
        q.push_str(" (empty: skip)");
    }
    q.push_str(": ");
    q
}

/// The values a string or its array items may take, if the schema lists them.
fn choices(prop: &Value) -> Vec<String> {
    let of = prop.get("items").unwrap_or(prop);
    if let Some(e) = of.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(a) = of.get(key).and_then(Value::as_array) {
            return a
                .iter()
                .filter_map(|o| o.get("const").and_then(Value::as_str))
                .map(str::to_owned)
                .collect();
        }
    }
    Vec::new()
}

/// A typed answer to one field, `None` if it cannot be one of its type.
fn read_field(prop: &Value, answer: &str) -> Option<Value> {
    match prop.get("type").and_then(Value::as_str).unwrap_or("string") {
        "boolean" => match answer.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Some(Value::Bool(true)),
            "n" | "no" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        "integer" => answer.parse::<i64>().ok().map(Value::from),
        "number" => answer
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        "array" => Some(Value::Array(
            answer
                .split(',')
                .map(|s| Value::from(s.trim()))
                .filter(|v| v.as_str() != Some(""))
                .collect(),
        )),
        _ => Some(Value::from(answer)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_read_by_the_fields_type() {
        assert_eq!(
            read_field(&json!({"type": "boolean"}), "y"),
            Some(json!(true))
        );
        assert_eq!(read_field(&json!({"type": "boolean"}), "maybe"), None);
        assert_eq!(
            read_field(&json!({"type": "integer"}), "42"),
            Some(json!(42))
        );
        assert_eq!(read_field(&json!({"type": "integer"}), "4.2"), None);
        assert_eq!(
            read_field(&json!({"type": "number"}), "4.5"),
            Some(json!(4.5))
        );
        assert_eq!(
            read_field(&json!({"type": "array"}), "a, b,"),
            Some(json!(["a", "b"]))
        );
        assert_eq!(
            read_field(&json!({"type": "string"}), "x"),
            Some(json!("x"))
        );
        let q = field_question(
            "pick",
            &json!({"type": "string", "title": "Pick", "enum": ["a", "b"], "default": "a"}),
            false,
        );
        assert_eq!(q, "  Pick [string: a, b] default \"a\": ");
        let q = field_question(
            "many",
            &json!({"type": "array", "items": {"anyOf": [{"const": "f1"}, {"const": "f2"}]}}),
            true,
        );
        assert_eq!(q, "  many [array: f1, f2]: ");
    }
}
