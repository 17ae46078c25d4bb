//! Owns the options of one turn ([`TurnOptions`]) and of one compaction
//! ([`CompactOptions`]): their declarations, one row per key as the configuration's
//! (`config_keys!`), and the JSON form the C ABI and the bindings pass (`from_json`).
//! What the options do is the agent's and the compaction's.

use serde_json::Value;

use crate::config::DEFAULT_KEEP_LAST;
use crate::config_keys::{config_keys, wrong_type, KeyValue};
use crate::error::{Error, Result};
use crate::request::Reasoning;
use crate::vocab::KeyType;

/// Which output schema a turn uses (`TurnOptions::output_schema`; in JSON: absent or
/// `null`, a schema object, or `false`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TurnSchema {
    /// The agent's `output_schema`, if it has one.
    #[default]
    Agent,
    /// This JSON Schema for this turn only.
    Schema(Value),
    /// No schema for this turn: a plain text answer.
    Off,
}

impl KeyValue for TurnSchema {
    const TYPE: KeyType = KeyType::Any;
    fn read(v: &Value, path: &str) -> Result<Self> {
        match v {
            Value::Null => Ok(TurnSchema::Agent),
            Value::Bool(false) => Ok(TurnSchema::Off),
            Value::Object(_) => Ok(TurnSchema::Schema(v.clone())),
            _ => Err(wrong_type(
                path,
                "a JSON Schema object, null (the agent's) or false (none)",
            )),
        }
    }
    fn write(&self) -> Value {
        match self {
            TurnSchema::Agent => Value::Null,
            TurnSchema::Schema(schema) => schema.clone(),
            TurnSchema::Off => Value::Bool(false),
        }
    }
}

config_keys! {
    /// Options for one turn.
    #[derive(Clone)]
    pub struct TurnOptions in pub(crate) const TURN_OPTION_KEYS {
        /// Use this model for this turn only.
        pub model: Option<String> = None;
        /// Reasoning control for this turn only (replaces the configuration's).
        pub reasoning: Option<Reasoning> = None;
        /// The output schema of this turn (default: the agent's).
        pub output_schema: TurnSchema = TurnSchema::Agent;
        /// Defer every tool call: the turn pauses with them (stop reason deferred) instead of running them, for an engine that runs each call as its own step and resumes the turn with the results.
        pub defer_tools: bool = false;
        /// Most tool calls the model may ask for in this turn (replaces the configuration's max_tool_calls); past it the turn fails with kind tool.
        pub max_tool_calls: Option<u32> = None, key(min(1));
        /// The caller's span as a W3C `traceparent` (`00-{32 hex trace id}-{16 hex span id}-{2 hex flags}`): the turn's `invoke_agent` span is its child where panto exports the spans itself (the CLI, the C library's OTLP export, docs/observability.md).
        pub traceparent: Option<String> = None;
    }
}

impl Default for TurnOptions {
    fn default() -> Self {
        TurnOptions::defaults()
    }
}

impl TurnOptions {
    /// Parses the JSON form the C ABI takes: `{"model"?: string, "reasoning"?:
    /// {effort, budget_tokens?}, "output_schema"?: object | false, "defer_tools"?:
    /// bool, "max_tool_calls"?: n, "traceparent"?: string}`; unknown keys, and a
    /// traceparent that is not one, are `config` errors.
    pub fn from_json(json: &str) -> Result<TurnOptions> {
        let v: Value = serde_json::from_str(json).map_err(|e| {
            Error::config(format!(
                "options: {}",
                crate::output::json_problem(json, &e)
            ))
        })?;
        TurnOptions::from_value(&v)
    }

    /// The JSON form of these options, as [`TurnOptions::from_json`] reads it (every
    /// key, `null` where unset).
    pub fn to_value(&self) -> Value {
        self.write_keys()
    }

    /// [`TurnOptions::from_json`] of a parsed value.
    pub fn from_value(v: &Value) -> Result<TurnOptions> {
        let obj = v
            .as_object()
            .ok_or_else(|| Error::config("options: must be a JSON object"))?;
        crate::vocab::check(TURN_OPTION_KEYS, obj, "options.")?;
        let mut options = TurnOptions::default();
        options.read_keys(obj, "options.")?;
        if let Some(traceparent) = &options.traceparent {
            crate::telemetry::check_traceparent(traceparent, "options.traceparent")?;
        }
        Ok(options)
    }
}

config_keys! {
    /// Options of one compaction.
    #[derive(Clone, PartialEq, Eq)]
    pub struct CompactOptions in pub(crate) const COMPACT_OPTION_KEYS {
        /// Messages kept verbatim at the end of the history.
        ///
        /// They are moved earlier when needed so a tool call and its results stay
        /// together.
        pub keep_last: usize = DEFAULT_KEEP_LAST, key(min(1));
        /// The model that writes the summary (default: the agent's model).
        pub model: Option<String> = None;
        /// Replaces the summarization instructions.
        ///
        /// The default is [`crate::compaction::DEFAULT_PROMPT`].
        pub prompt: Option<String> = None;
    }
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions::defaults()
    }
}

impl CompactOptions {
    /// Parses the JSON form the C ABI takes: `{"keep_last"?, "model"?, "prompt"?}`.
    pub fn from_json(json: &str) -> Result<CompactOptions> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("compact options: not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::config("compact options: must be a JSON object"))?;
        crate::vocab::check(COMPACT_OPTION_KEYS, obj, "")?;
        let mut options = CompactOptions::default();
        options.read_keys(obj, "")?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turn_options_parse_and_name_the_key() {
        let o = TurnOptions::from_json(
            r#"{"model":"m","reasoning":{"effort":"low"},"output_schema":false}"#,
        )
        .unwrap();
        assert_eq!(o.model.as_deref(), Some("m"));
        assert_eq!(o.reasoning, Some(Reasoning::new(crate::Effort::Low)));
        assert_eq!(o.output_schema, TurnSchema::Off);
        let o =
            TurnOptions::from_json(r#"{"output_schema":{"type":"object"},"model":null}"#).unwrap();
        assert_eq!(
            o.output_schema,
            TurnSchema::Schema(serde_json::json!({"type": "object"}))
        );
        assert_eq!(o.model, None);
        assert_eq!(
            TurnOptions::from_json("{}").unwrap().output_schema,
            TurnSchema::Agent
        );
        for (json, want) in [
            (r#"{"colour":1}"#, "options.colour: unknown key (known: model, reasoning, output_schema, defer_tools, max_tool_calls, traceparent)"),
            (r#"{"model":3}"#, "options.model: must be a string"),
            (r#"{"reasoning":{"effort":"max"}}"#, "options.reasoning.effort: must be"),
            (
                r#"{"output_schema":true}"#,
                "options.output_schema: must be a JSON Schema object, null (the agent's) or false (none)",
            ),
            (r#"{"traceparent":"00-abc"}"#, "options.traceparent: must be a W3C traceparent"),
            (
                r#"{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}"#,
                "options.traceparent: must be a W3C traceparent",
            ),
            ("[]", "options: must be a JSON object"),
            ("{", "options: not valid JSON"),
        ] {
            let e = TurnOptions::from_json(json).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Config);
            assert!(e.message.starts_with(want), "{json}: {}", e.message);
        }
    }

    #[test]
    fn compact_options_parse_and_name_the_key() {
        let o = CompactOptions::from_json(r#"{"keep_last":2,"model":"s","prompt":"p"}"#).unwrap();
        assert_eq!(
            o,
            CompactOptions {
                keep_last: 2,
                model: Some("s".into()),
                prompt: Some("p".into())
            }
        );
        assert_eq!(
            CompactOptions::from_json("{}").unwrap(),
            CompactOptions::default()
        );
        assert_eq!(CompactOptions::default().keep_last, DEFAULT_KEEP_LAST);
        for (json, want) in [
            (
                r#"{"keep":1}"#,
                "keep: unknown key (known: keep_last, model, prompt)",
            ),
            (r#"{"keep_last":0}"#, "keep_last: must be at least 1"),
            (
                r#"{"keep_last":"2"}"#,
                "keep_last: must be a non-negative integer",
            ),
            (r#"{"model":1}"#, "model: must be a string"),
            ("3", "compact options: must be a JSON object"),
        ] {
            let e = CompactOptions::from_json(json).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Config);
            assert!(e.message.starts_with(want), "{json}: {}", e.message);
        }
    }
}
