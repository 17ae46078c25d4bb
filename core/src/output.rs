//! Owns structured output: checking an output schema, with the form each provider takes
//! from the provider seam (`provider::schema`: OpenAI's strict mode, Anthropic's closed
//! objects), and reading the model's answer back — parse, remove the nulls strict mode added, validate against
//! the schema as the user wrote it. The turn loop (`agent`) decides when an answer is
//! final and what a failure becomes (a repair request or an error); the providers put
//! [`OutputRequest`] on the wire.
//!
//! The original schema stays the contract: every provider's answer is validated against
//! it locally (the `jsonschema` crate), whatever the provider promised.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
pub use crate::provider::schema::strict_schema;
use crate::provider::schema::{self, declares_object};
use crate::provider::ProviderKind;
use crate::request::OutputMode;
pub use crate::request::{OutputRequest, WireMode};
use crate::text::one_line;

/// The name the schema goes by on the wire when its `title` is not a usable one.
pub const DEFAULT_NAME: &str = "output";

/// At most this many bytes of validation errors go back to the model and into
/// `output_repair` events and error messages.
pub const MAX_ERROR_BYTES: usize = 1024;

/// At most this many validation errors are listed in one message.
const MAX_ERRORS: usize = 3;

/// A checked output schema for one provider: what to send, and how to read the answer.
#[derive(Clone)]
pub struct OutputSpec {
    name: String,
    original: Value,
    wire: Value,
    mode: WireMode,
    /// Whether the wire schema made optional properties required-but-nullable (OpenAI
    /// strict): a null there is then taken as "absent".
    strips_nulls: bool,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for OutputSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSpec")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("schema", &self.original)
            .finish_non_exhaustive()
    }
}

/// Why an answer was not accepted; the text is one line, at most [`MAX_ERROR_BYTES`].
/// The second field says whether asking the model again can help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub String, pub Repair);

/// Whether a rejected answer is worth a repair request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// The model can fix it: the error goes back to it.
    Possible,
    /// The answer is beyond what panto reads (nested deeper than [`MAX_JSON_DEPTH`]);
    /// the turn fails at once rather than asking for what cannot come back.
    Useless,
}

/// The deepest nesting of arrays and objects panto reads in JSON — answers, schemas,
/// configuration — (serde_json's recursion limit, which keeps parsing off the end of
/// the stack). Deeper JSON is reported as such, never as invalid JSON.
pub const MAX_JSON_DEPTH: usize = 128;

/// What is wrong with JSON `text` that serde_json refused with `e`: `nests N levels
/// deep, more than the 128 panto reads` when that is why, else `not valid JSON: <e>`.
pub fn json_problem(text: &str, e: &serde_json::Error) -> String {
    match nesting_depth(text) {
        depth if depth > MAX_JSON_DEPTH => format!(
            "nests {depth} levels deep, more than the {MAX_JSON_DEPTH} panto reads (valid \
             JSON, but too deep)"
        ),
        _ => format!("not valid JSON: {e}"),
    }
}

/// The deepest nesting of `[` and `{` in JSON text, outside strings; a loop, not a
/// recursion, so any depth is measured.
pub fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

impl OutputSpec {
    /// Checks `schema` for `provider` and `mode`; `key` names it in errors
    /// (`output_schema`, `options.output_schema`). A `config` error when the root is not
    /// an object schema, when the schema is not a valid JSON Schema (or names a remote
    /// `$ref`), when OpenAI's strict mode cannot take it (naming the keyword and where it
    /// is), or when `tool` mode is asked of a provider that has no forced tool here.
    pub fn new(
        schema: &Value,
        provider: ProviderKind,
        mode: OutputMode,
        key: &str,
    ) -> Result<Self> {
        let root = schema
            .as_object()
            .ok_or_else(|| Error::config(format!("{key}: must be a JSON Schema object")))?;
        if !declares_object(root) {
            return Err(Error::config(format!(
                "{key}: the root must be an object schema (\"type\": \"object\"): providers' \
                 structured output answers with an object"
            )));
        }
        let validator = jsonschema::validator_for(schema).map_err(|e| {
            Error::config(format!(
                "{key}: not a valid JSON Schema: {}",
                one_line(&e.to_string(), MAX_ERROR_BYTES)
            ))
        })?;
        let shaped = schema::shape(schema, provider, mode, key)?;
        Ok(OutputSpec {
            name: wire_name(schema),
            original: schema.clone(),
            wire: shaped.schema,
            mode: shaped.mode,
            strips_nulls: shaped.strips_nulls,
            validator: Arc::new(validator),
        })
    }

    /// The name on the wire: the schema's `title` when it matches
    /// `^[A-Za-z0-9_-]{1,64}$`, else [`DEFAULT_NAME`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema as the user wrote it (what answers are validated against).
    pub fn schema(&self) -> &Value {
        &self.original
    }

    /// The schema as this provider is sent it.
    pub fn wire_schema(&self) -> &Value {
        &self.wire
    }

    /// How the answer is asked for.
    pub fn mode(&self) -> WireMode {
        self.mode
    }

    /// What a request carries for this schema.
    pub fn request(&self) -> OutputRequest<'_> {
        OutputRequest {
            name: &self.name,
            schema: &self.wire,
            mode: self.mode,
        }
    }

    /// Reads an answer: parses `text` as JSON (a Markdown code fence around it is
    /// tolerated), removes the nulls strict mode put where the original schema had an
    /// optional property, and validates the result against the original schema. The
    /// output keeps every number as the model wrote it ([`JsonText`]), and whether a
    /// number is an integer is read from its digits: `12345678901234567890.5` is not one,
    /// although its nearest `f64` is whole.
    pub fn accept(&self, text: &str) -> std::result::Result<JsonText, Rejection> {
        let body = strip_fence(text.trim());
        let mut value: Value = serde_json::from_str(body).map_err(|e| {
            let depth = nesting_depth(body);
            if depth > MAX_JSON_DEPTH {
                return Rejection(
                    format!(
                        "the answer nests {depth} levels deep, more than the \
                         {MAX_JSON_DEPTH} panto reads"
                    ),
                    Repair::Useless,
                );
            }
            Rejection(
                one_line(
                    &format!("the answer is not valid JSON ({e})"),
                    MAX_ERROR_BYTES,
                ),
                Repair::Possible,
            )
        })?;
        if self.strips_nulls {
            strip_optional_nulls(&mut value, &self.original, &self.original, 0);
        }
        let mut problems = Vec::new();
        for e in self.validator.iter_errors(&value).take(MAX_ERRORS) {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            problems.push(format!("at {at}: {e}"));
        }
        if problems.is_empty() {
            problems = self.fractions_as_integers(&value, body);
        }
        if problems.is_empty() {
            Ok(JsonText::exact(&value, body))
        } else {
            Err(Rejection(
                one_line(&problems.join("; "), MAX_ERROR_BYTES),
                Repair::Possible,
            ))
        }
    }
}

/// A structured output as JSON text: compact, keys in the order `serde_json` writes
/// them (as the canonical JSON of every event), and each number exactly as the model
/// wrote it — `123456789012345678901234567890` and `0.12345678901234567890123` stay
/// what they are, where a [`Value`] holds at most an `f64` (which would print
/// `1.2345678901234568e29`). It serializes as that JSON (not as a string), so an
/// event's canonical JSON carries the numbers unchanged; each binding reads them with
/// its own exact types (Python `int`, Go `json.Number`, [`JsonText::parse`] into a Rust
/// type such as `u128`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct JsonText(String);

impl JsonText {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Deserializes it into `T`, from the text: a number reaches a `u128`, an `i128` or
    /// a decimal type whole.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(&self.0)
    }

    /// It as a [`Value`]: a number past what an `i64`, a `u64` or an `f64` holds
    /// exactly is rounded to the nearest `f64`.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// Reads JSON text, keeping its numbers as written (made compact, keys in
    /// `serde_json`'s order).
    pub fn from_json(text: &str) -> serde_json::Result<JsonText> {
        let value: Value = serde_json::from_str(text)?;
        Ok(JsonText::exact(&value, text))
    }

    /// The text of `value` (its numbers as `serde_json` writes them).
    pub fn from_value(value: &Value) -> JsonText {
        // A Value always serializes.
        JsonText(serde_json::to_string(value).unwrap_or_default())
    }

    /// Removes secrets from its strings (an event's redaction); its numbers stay.
    pub(crate) fn redact_strings(&mut self, secrets: &crate::secret::Secrets) {
        let mut value = self.to_value();
        let before = value.clone();
        crate::event::redact_value(&mut value, secrets);
        if value != before {
            *self = JsonText::exact(&value, &self.0);
        }
    }

    /// The text of `value` with the numbers of `source`, the JSON text it was parsed
    /// from, as written there (see [`exact_text`]).
    fn exact(value: &Value, source: &str) -> JsonText {
        JsonText(exact_text(value, source))
    }
}

impl std::fmt::Debug for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Display for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<Value> for JsonText {
    fn eq(&self, other: &Value) -> bool {
        &self.to_value() == other
    }
}

impl serde::Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match serde_json::value::RawValue::from_string(self.0.clone()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => Value::Null.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // Through a Value: an event is an internally tagged enum, which serde buffers
        // without the text, so an event read back from its JSON holds a number past
        // what an f64 holds as the nearest f64. Parse the text itself
        // (`serde_json::from_str::<JsonText>`) to keep it.
        let value = Value::deserialize(d)?;
        Ok(JsonText::from_value(&value))
    }
}

/// `value` as compact JSON text, each of its numbers written as in `source` (the JSON
/// text `value` was parsed from, after which only whole object members may have been
/// removed): numbers are found by their place (a JSON pointer), so a removed member
/// moves none. A number `source` does not hold at its place is written as
/// `serde_json` writes it.
pub fn exact_text(value: &Value, source: &str) -> String {
    let numbers = number_literals(source);
    let mut out = String::with_capacity(source.len());
    let mut path = String::new();
    write_exact(value, &numbers, &mut path, &mut out);
    out
}

fn write_exact(
    value: &Value,
    numbers: &std::collections::HashMap<String, &str>,
    path: &mut String,
    out: &mut String,
) {
    let string = |s: &str, out: &mut String| {
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    };
    match value {
        Value::Number(n) => match numbers.get(path.as_str()) {
            Some(literal) => out.push_str(literal),
            None => out.push_str(&n.to_string()),
        },
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                write_exact(item, numbers, path, out);
                path.truncate(len);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                let len = path.len();
                push_pointer_token(path, k);
                write_exact(item, numbers, path, out);
                path.truncate(len);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Appends `/key` to a JSON pointer, escaped (`~` as `~0`, `/` as `~1`).
fn push_pointer_token(path: &mut String, key: &str) {
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// Every number literal of valid JSON `text`, by its JSON pointer (a member given twice
/// keeps the last, as `serde_json` does). A loop over the bytes with a stack of places,
/// no recursion.
fn number_literals(text: &str) -> std::collections::HashMap<String, &str> {
    enum Place {
        /// In an array: the index of the next element.
        Array(usize),
        /// In an object: the pointer length before the current key.
        Object,
    }
    let bytes = text.as_bytes();
    let mut out = std::collections::HashMap::new();
    let mut stack: Vec<(Place, usize)> = Vec::new();
    let mut path = String::new();
    // In an object, whether the next string is a key.
    let mut expect_key = false;
    let mut i = 0;
    // Before a value inside an array: its index goes on the path.
    let enter_value = |stack: &mut Vec<(Place, usize)>, path: &mut String| {
        if let Some((Place::Array(next), base)) = stack.last_mut() {
            path.truncate(*base);
            path.push('/');
            path.push_str(&next.to_string());
            *next += 1;
        }
    };
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                enter_value(&mut stack, &mut path);
                stack.push((Place::Object, path.len()));
                expect_key = true;
                i += 1;
            }
            b'[' => {
                enter_value(&mut stack, &mut path);
                stack.push((Place::Array(0), path.len()));
                i += 1;
            }
            b'}' | b']' => {
                if let Some((_, base)) = stack.pop() {
                    path.truncate(base);
                }
                // The container itself was a value: its place leaves the path.
                if let Some((_, base)) = stack.last() {
                    path.truncate(*base);
                }
                expect_key = false;
                i += 1;
            }
            b',' => {
                if let Some((Place::Object, base)) = stack.last() {
                    path.truncate(*base);
                    expect_key = true;
                }
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                let literal = &text[start..i.min(text.len())];
                if expect_key {
                    expect_key = false;
                    let key: String = if literal.contains('\\') {
                        serde_json::from_str(literal).unwrap_or_default()
                    } else {
                        literal[1..literal.len().saturating_sub(1)].to_owned()
                    };
                    if let Some((_, base)) = stack.last() {
                        path.truncate(*base);
                    }
                    push_pointer_token(&mut path, &key);
                } else {
                    enter_value(&mut stack, &mut path);
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                enter_value(&mut stack, &mut path);
                out.insert(path.clone(), &text[start..i]);
            }
            b't' | b'f' | b'n' => {
                enter_value(&mut stack, &mut path);
                while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            _ => i += 1, // whitespace and ':'
        }
    }
    out
}

/// Whether a JSON number literal is an integer (its value has no fractional part, as
/// JSON Schema's `integer` means): from the digits, not from an `f64` that may have
/// rounded `12345678901234567890.5` to a whole number.
fn is_integer_literal(literal: &str) -> bool {
    let unsigned = literal.trim_start_matches('-');
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
        None => (unsigned, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let significant = digits.trim_end_matches('0');
    if significant.trim_start_matches('0').is_empty() {
        return true; // zero
    }
    let exponent: i64 = match exponent.trim_start_matches('+').parse() {
        Ok(e) => e,
        // Past i64: a huge positive exponent makes any mantissa whole.
        Err(_) => return !exponent.starts_with('-'),
    };
    (significant.len() as i64) <= (int.len() as i64).saturating_add(exponent)
}

impl OutputSpec {
    /// The type problems of numbers whose `f64` rounded a fraction away
    /// (`12345678901234567890.5` reads as a whole `f64`): validated again with a
    /// fraction in their place, so `"type": "integer"` refuses them as it should. Only
    /// `type` errors count: the stand-in says nothing about a number's size.
    fn fractions_as_integers(&self, value: &Value, source: &str) -> Vec<String> {
        let rounded: Vec<String> = number_literals(source)
            .into_iter()
            .filter(|(path, literal)| {
                !is_integer_literal(literal)
                    && value
                        .pointer(path)
                        .and_then(Value::as_f64)
                        .is_some_and(|f| f.fract() == 0.0)
            })
            .map(|(path, _)| path)
            .collect();
        if rounded.is_empty() {
            return Vec::new();
        }
        let mut probe = value.clone();
        for path in &rounded {
            if let Some(n) = probe.pointer_mut(path) {
                *n = serde_json::json!(0.5);
            }
        }
        self.validator
            .iter_errors(&probe)
            .filter(|e| {
                matches!(
                    e.kind(),
                    jsonschema::error::ValidationErrorKind::Type { .. }
                )
            })
            .take(MAX_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let shown = number_literals(source)
                    .get(&at)
                    .map_or_else(String::new, |l| format!("{l} "));
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {shown}is not of type \"integer\"")
            })
            .collect()
    }
}

/// The wire name of a schema (see [`OutputSpec::name`]).
fn wire_name(schema: &Value) -> String {
    match schema.get("title").and_then(Value::as_str) {
        Some(t)
            if !t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
        {
            t.to_owned()
        }
        _ => DEFAULT_NAME.to_owned(),
    }
}

/// The deepest schema nesting followed when removing nulls (a recursive `$ref` ends
/// here rather than looping).
const MAX_DEPTH: usize = 64;

/// Removes, in `value`, every `null` of a property that `schema` (the original) lists as
/// optional: strict mode made the model write it; the user's schema means "absent".
/// Follows `properties`, `items`, local `$ref`s and the `anyOf` branch whose properties
/// cover the object's keys: one path through the schema per value, so the work is
/// bounded by the value's size times [`MAX_DEPTH`], whatever the schema.
fn strip_optional_nulls(value: &mut Value, schema: &Value, root: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(s) = schema.as_object() else {
        return;
    };
    if let Some(target) = s
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| local_ref(root, r))
    {
        strip_optional_nulls(value, target, root, depth + 1);
    }
    if let Some(branches) = s.get("anyOf").and_then(Value::as_array) {
        if let Value::Object(obj) = &*value {
            let fits = branches.iter().find(|b| {
                let b = resolve(b, root);
                b.get("properties")
                    .and_then(Value::as_object)
                    .is_some_and(|p| obj.keys().all(|k| p.contains_key(k)))
            });
            // One branch at most: following several would multiply with every level of
            // a recursive schema.
            if let Some(b) = fits {
                strip_optional_nulls(value, b, root, depth + 1);
            }
        }
    }
    match value {
        Value::Object(obj) => {
            let Some(props) = s.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            obj.retain(|k, v| {
                !(v.is_null() && props.contains_key(k) && !required.contains(&k.as_str()))
            });
            for (k, v) in obj.iter_mut() {
                if let Some(sub) = props.get(k) {
                    strip_optional_nulls(v, sub, root, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.get("items").filter(|i| i.is_object()) {
                for item in items {
                    strip_optional_nulls(item, item_schema, root, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// A schema, or the target of its local `$ref`.
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| local_ref(root, r))
        .unwrap_or(schema)
}

/// The target of a local `$ref` (`#`, `#/$defs/X`, `#/definitions/X`, any JSON pointer).
fn local_ref<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

/// `text` without a surrounding Markdown code fence (```json … ```), which some
/// compatible servers add around a JSON answer.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return text;
    };
    // The info string (`json`) runs to the first line break.
    match body.find('\n') {
        Some(i) => body[i + 1..].trim(),
        None => body.trim(),
    }
}

/// The JSON Schema of `T`, as schemars derives it (feature `schemars`): what
/// `Agent::run_typed` asks for. Its `title` (the type's name) names it on the wire.
#[cfg(feature = "schemars")]
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// The user message that asks for a repair.
pub fn repair_prompt(error: &str) -> String {
    format!(
        "Your answer did not match the required JSON schema: {error}. Answer again with only \
         the JSON."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The provider of a configuration name (`"openai"`, …).
    fn kind(name: &str) -> ProviderKind {
        ProviderKind::parse(name).expect("a registered provider")
    }

    fn spec(schema: Value, provider: &str) -> Result<OutputSpec> {
        OutputSpec::new(&schema, kind(provider), OutputMode::Auto, "output_schema")
    }

    #[test]
    fn strict_normalization_closes_objects_and_makes_optional_nullable() {
        let schema = json!({
            "title": "Person", "type": "object",
            "properties": {
                "name": {"type": "string", "default": "x"},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "object",
                         "properties": {"k": {"type": "string"}}}},
                "kind": {"enum": ["a", "b"]},
                "home": {"$ref": "#/$defs/Place"}
            },
            "required": ["name"],
            "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}
        });
        let s = spec(schema, "openai").unwrap();
        assert_eq!(s.name(), "Person");
        assert_eq!(
            s.wire_schema(),
            &json!({
                "title": "Person", "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": ["integer", "null"]},
                    "tags": {"type": ["array", "null"], "items": {"type": "object",
                             "properties": {"k": {"type": ["string", "null"]}},
                             "additionalProperties": false, "required": ["k"]}},
                    "kind": {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]},
                    "home": {"anyOf": [{"$ref": "#/$defs/Place"}, {"type": "null"}]}
                },
                "required": ["age", "home", "kind", "name", "tags"],
                "additionalProperties": false,
                "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"], "additionalProperties": false}}
            })
        );
    }

    #[test]
    fn strict_mode_names_the_keyword_it_refuses() {
        for (schema, path) in [
            (
                json!({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}}),
                "output_schema.properties.a.oneOf",
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
                "output_schema.additionalProperties",
            ),
            (
                json!({"type": "object", "properties": {"t": {"type": "array", "uniqueItems": true}}}),
                "output_schema.properties.t.uniqueItems",
            ),
        ] {
            let e = spec(schema.clone(), "openai-responses").unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Config);
            assert!(e.message.starts_with(path), "{}", e.message);
            // Anthropic and Gemini take it as written.
            spec(schema.clone(), "anthropic").unwrap();
            spec(schema, "gemini").unwrap();
        }
    }

    #[test]
    fn the_root_must_be_an_object_schema() {
        for schema in [
            json!({"type": "string"}),
            json!({"anyOf": [{"type": "object"}]}),
            json!(3),
        ] {
            let e = spec(schema, "anthropic").unwrap_err();
            assert!(e.message.starts_with("output_schema:"), "{}", e.message);
        }
        let e = spec(
            json!({"type": "object", "properties": {"a": {"type": 5}}}),
            "gemini",
        )
        .unwrap_err();
        assert!(
            e.message.contains("not a valid JSON Schema"),
            "{}",
            e.message
        );
    }

    #[test]
    fn tool_mode_is_for_openai_and_anthropic() {
        let schema = json!({"type": "object"});
        for p in ["openai", "anthropic"] {
            let s = OutputSpec::new(&schema, kind(p), OutputMode::Tool, "output_schema").unwrap();
            assert_eq!(s.mode(), WireMode::Tool);
            assert_eq!(
                s.wire_schema(),
                &schema,
                "the forced tool takes the schema as written"
            );
        }
        for p in ["gemini", "openai-responses"] {
            let e =
                OutputSpec::new(&schema, kind(p), OutputMode::Tool, "output_schema").unwrap_err();
            assert!(e.message.starts_with("output_mode"), "{}", e.message);
        }
    }

    #[test]
    fn anthropic_gets_closed_objects_with_optional_properties_kept() {
        let s = spec(
            json!({"type": "object", "properties": {"a": {"type": "object"}}, "required": []}),
            "anthropic",
        )
        .unwrap();
        assert_eq!(
            s.wire_schema(),
            &json!({"type": "object", "required": [], "additionalProperties": false,
                    "properties": {"a": {"type": "object", "additionalProperties": false}}})
        );
    }

    #[test]
    fn answers_are_parsed_stripped_and_validated_against_the_original() {
        let s = spec(
            json!({"type": "object",
                   "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                  "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}}},
                   "required": ["name"],
                   "$defs": {"Pet": {"type": "object", "properties": {"kind": {"type": "string"}}}}}),
            "openai",
        )
        .unwrap();
        assert_eq!(
            s.accept(r#"{"name":"Ada","age":null,"pets":[{"kind":null}]}"#)
                .map(|o| o.to_value()),
            Ok(json!({"name": "Ada", "pets": [{}]}))
        );
        assert_eq!(
            s.accept("```json\n{\"name\":\"Ada\"}\n```")
                .map(|o| o.to_value()),
            Ok(json!({"name": "Ada"}))
        );
        // A required property's null is not removed: it fails as the user's schema says.
        let Err(Rejection(e, _)) = s.accept(r#"{"name":null}"#) else {
            panic!("accepted")
        };
        assert!(e.contains("at /name") && e.contains("null"), "{e}");
        let Err(Rejection(e, _)) = s.accept("{\"name\":\n") else {
            panic!("accepted")
        };
        assert!(
            e.starts_with("the answer is not valid JSON") && !e.contains('\n'),
            "{e}"
        );
        // Without strict mode a null stays and is judged by the schema.
        let g = spec(
            json!({"type": "object", "properties": {"age": {"type": "integer"}}}),
            "gemini",
        )
        .unwrap();
        assert!(g.accept(r#"{"age":null}"#).is_err());
    }

    #[test]
    fn a_recursive_schema_does_not_multiply_the_work() {
        // Every level offers two branches back to the root: following both would be
        // 2^64 steps.
        let s = spec(
            json!({"type": "object", "properties": {"a": {"type": "array"}},
                   "anyOf": [{"$ref": "#"}, {"$ref": "#"}]}),
            "openai",
        )
        .unwrap();
        let started = std::time::Instant::now();
        let _ = s.accept(r#"{"a":[[[[]]]]}"#);
        let _ = s.accept("[[[[[[[[[[]]]]]]]]]]");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn errors_are_bounded_and_on_one_line() {
        let s = spec(
            json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
            "anthropic",
        )
        .unwrap();
        let long = format!("{{\"a\":\"{}\"}}", "x\u{e9}".repeat(3000));
        let Err(Rejection(e, _)) = s.accept(&long) else {
            panic!("accepted")
        };
        assert!(
            e.len() <= MAX_ERROR_BYTES && e.ends_with('…') && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn the_wire_name_comes_from_a_usable_title() {
        assert_eq!(
            wire_name(&json!({"title": "weather_report-2"})),
            "weather_report-2"
        );
        assert_eq!(wire_name(&json!({"title": "Weather report"})), "output");
        assert_eq!(wire_name(&json!({"title": "x".repeat(65)})), "output");
        assert_eq!(wire_name(&json!({})), "output");
    }

    /// The model's numbers come out as written, and integer-ness is read from the
    /// digits (issue: 123456789012345678901234567890 came out as 1.2345678901234568e29,
    /// and a rounded fraction passed "integer").
    #[test]
    fn numbers_stay_as_the_model_wrote_them() {
        let s = spec(
            json!({"type": "object",
                   "properties": {"a": {"type": "integer"}, "b": {"type": "number"},
                                  "list": {"type": "array", "items": {"type": "integer"}},
                                  "skip": {"type": "integer"}},
                   "required": ["a", "b"]}),
            "openai",
        )
        .unwrap();
        let out = s
            .accept(
                r#"{ "b": 0.12345678901234567890123, "a": 123456789012345678901234567890,
                     "list": [1, 2.0, 1e2, -0, 18446744073709551616], "skip": null }"#,
            )
            .unwrap();
        // Compact, keys in serde_json's order, every number as written; the null strict
        // mode asked for is gone.
        assert_eq!(
            out.as_str(),
            r#"{"a":123456789012345678901234567890,"b":0.12345678901234567890123,"list":[1,2.0,1e2,-0,18446744073709551616]}"#
        );
        // A Rust type reads the integer whole.
        #[derive(serde::Deserialize)]
        struct Big {
            a: u128,
        }
        assert_eq!(
            out.parse::<Big>().unwrap().a,
            123456789012345678901234567890
        );
        // Its serde form is the JSON itself, not a string.
        assert_eq!(
            serde_json::to_string(&Some(out.clone())).unwrap(),
            out.as_str()
        );
        let back: JsonText = serde_json::from_str(r#"{"a": 1}"#).unwrap();
        assert_eq!(back.as_str(), r#"{"a":1}"#);
        // A fraction an f64 rounds to a whole number is not an integer.
        let Err(Rejection(e, Repair::Possible)) =
            s.accept(r#"{"a": 12345678901234567890.5, "b": 1}"#)
        else {
            panic!("a fraction passed as an integer")
        };
        assert_eq!(
            e,
            r#"at /a: 12345678901234567890.5 is not of type "integer""#
        );
        let Err(Rejection(e, _)) = s.accept(r#"{"a": 1, "b": 1, "list": [3, 1e-400]}"#) else {
            panic!("1e-400 passed as an integer")
        };
        assert!(e.starts_with("at /list/1: 1e-400 is not"), "{e}");
        // Whole numbers written with a fraction or an exponent are integers.
        assert!(s
            .accept(r#"{"a": 1.0, "b": 2, "list": [1.5e3, 10E-1]}"#)
            .is_ok());
    }

    #[test]
    fn integer_literals_are_read_from_their_digits() {
        for (literal, integer) in [
            ("0", true),
            ("-0.0", true),
            ("12", true),
            ("1.0", true),
            ("1.50", false),
            ("0.5", false),
            ("1e2", true),
            ("1.5e1", true),
            ("1.25e1", false),
            ("15e-1", false),
            ("10E-1", true),
            ("12345678901234567890.5", false),
            ("1e99999999999999999999", true),
            ("1e-99999999999999999999", false),
            ("0e-99999999999999999999", true),
        ] {
            assert_eq!(is_integer_literal(literal), integer, "{literal}");
        }
    }

    #[test]
    fn number_literals_are_found_by_their_place() {
        let text = r#"{"a~b/c": [1, {"x": 2.50, "y": [true, null, "s\"]", 3e0]}], "d": -7,
                       "a~b/c": [9]}"#;
        let found = number_literals(text);
        // The repeated member keeps its last value, as serde_json does.
        assert_eq!(found.get("/a~0b~1c/0"), Some(&"9"));
        assert_eq!(found.get("/a~0b~1c/1/x"), Some(&"2.50"));
        assert_eq!(found.get("/a~0b~1c/1/y/3"), Some(&"3e0"));
        assert_eq!(found.get("/d"), Some(&"-7"));
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(exact_text(&value, text), r#"{"a~b/c":[9],"d":-7}"#);
    }
}
