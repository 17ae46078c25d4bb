//! Owns structured output: checking an output schema, rewriting it into what each
//! provider takes (OpenAI's strict mode, Anthropic's closed objects), and reading the
//! model's answer back — parse, remove the nulls strict mode added, validate against
//! the schema as the user wrote it. The turn loop (`agent`) decides when an answer is
//! final and what a failure becomes (a repair request or an error); the providers put
//! [`OutputRequest`] on the wire.
//!
//! The original schema stays the contract: every provider's answer is validated against
//! it locally (the `jsonschema` crate), whatever the provider promised.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::request::{OutputMode, ProviderKind};

/// The name the schema goes by on the wire when its `title` is not a usable one.
pub const DEFAULT_NAME: &str = "output";

/// At most this many bytes of validation errors go back to the model and into
/// `output_repair` events and error messages.
pub const MAX_ERROR_BYTES: usize = 1024;

/// At most this many validation errors are listed in one message.
const MAX_ERRORS: usize = 3;

/// Keywords OpenAI's strict mode refuses (its Structured Outputs guide: composition
/// other than `anyOf`, and the object and array keywords it does not enforce). A schema
/// holding one is a `config` error naming it, rather than a 400 at the first request.
const STRICT_UNSUPPORTED: &[&str] = &[
    "allOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "prefixItems",
    "additionalItems",
];

/// Annotations strict mode does not take; they are left out of what is sent (the local
/// validation still reads the original).
const STRICT_DROPPED: &[&str] = &["default", "$schema", "$id", "examples"];

/// The string formats strict mode knows; another `format` (schemars' `uint32`, …) is left
/// out of what is sent, and still checked locally where the validator knows it.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// How the answer is asked for on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireMode {
    /// The provider's structured-output field.
    Native,
    /// One forced call of a tool named after the schema; its arguments are the answer.
    Tool,
}

/// What a request carries to ask for structured output (see `provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputRequest<'a> {
    /// `json_schema.name`, the Responses format's `name`, or the forced tool's name.
    pub name: &'a str,
    /// The schema as this provider takes it (strict for OpenAI, closed objects for
    /// Anthropic, as written for Gemini and for the forced tool).
    pub schema: &'a Value,
    /// The provider's field, or the forced tool.
    pub mode: WireMode,
}

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub String);

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
        let mode = match (mode, provider) {
            (OutputMode::Auto | OutputMode::Native, _) => WireMode::Native,
            (OutputMode::Tool, ProviderKind::OpenAi | ProviderKind::Anthropic) => WireMode::Tool,
            (OutputMode::Tool, other) => {
                return Err(Error::config(format!(
                    "output_mode: \"tool\" is for the openai and anthropic providers; {} has \
                     native structured output (use \"native\")",
                    other.as_str()
                )))
            }
        };
        let (wire, strips_nulls) = match (mode, provider) {
            (WireMode::Native, ProviderKind::OpenAi | ProviderKind::OpenAiResponses) => {
                let strict = strict_schema(schema, "")
                    .map_err(|(path, problem)| Error::config(format!("{key}{path}: {problem}")))?;
                (strict, true)
            }
            (WireMode::Native, ProviderKind::Anthropic) => (closed_objects(schema), false),
            _ => (schema.clone(), false),
        };
        Ok(OutputSpec {
            name: wire_name(schema),
            original: schema.clone(),
            wire,
            mode,
            strips_nulls,
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
    /// optional property, and validates the result against the original schema.
    pub fn accept(&self, text: &str) -> std::result::Result<Value, Rejection> {
        let body = strip_fence(text.trim());
        let mut value: Value = serde_json::from_str(body).map_err(|e| {
            Rejection(one_line(
                &format!("the answer is not valid JSON ({e})"),
                MAX_ERROR_BYTES,
            ))
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
            Ok(value)
        } else {
            Err(Rejection(one_line(&problems.join("; "), MAX_ERROR_BYTES)))
        }
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

/// Whether a schema object says its instances are objects.
fn declares_object(o: &Map<String, Value>) -> bool {
    match o.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => false,
    }
}

/// Whether a schema object is about objects (declares the type or lists properties).
fn is_object_schema(o: &Map<String, Value>) -> bool {
    declares_object(o) || o.contains_key("properties")
}

/// The schema rewritten to OpenAI's strict rules: every object closed
/// (`additionalProperties: false`) with every property required, a property that was
/// optional made nullable, annotations strict mode refuses left out. `Err((path,
/// problem))` names the first keyword it cannot take, `path` as a JSON-pointer-like
/// suffix (`.properties.tags.uniqueItems`).
pub fn strict_schema(schema: &Value, path: &str) -> std::result::Result<Value, (String, String)> {
    let Some(o) = schema.as_object() else {
        // `true` / `false` schemas and non-objects are left to the provider.
        return Ok(schema.clone());
    };
    let mut out = Map::new();
    for (k, v) in o {
        if STRICT_UNSUPPORTED.contains(&k.as_str()) {
            return Err((
                format!("{path}.{k}"),
                format!("OpenAI strict mode does not support the keyword {k:?}"),
            ));
        }
        if STRICT_DROPPED.contains(&k.as_str())
            || (k == "format" && !v.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f)))
        {
            continue;
        }
        let here = format!("{path}.{k}");
        let rewritten = match k.as_str() {
            "properties" => {
                let props = v
                    .as_object()
                    .ok_or_else(|| (here.clone(), "must be an object".to_owned()))?;
                let required: Vec<&str> = o
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let mut p = Map::new();
                for (name, sub) in props {
                    let strict = strict_schema(sub, &format!("{here}.{name}"))?;
                    let strict = if required.contains(&name.as_str()) {
                        strict
                    } else {
                        nullable(strict)
                    };
                    p.insert(name.clone(), strict);
                }
                Value::Object(p)
            }
            "items" => match v {
                Value::Array(_) => {
                    return Err((
                        here,
                        "OpenAI strict mode does not support tuple items (an array of schemas)"
                            .to_owned(),
                    ))
                }
                other => strict_schema(other, &here)?,
            },
            "anyOf" => {
                let items = v
                    .as_array()
                    .ok_or_else(|| (here.clone(), "must be an array".to_owned()))?;
                let mut list = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    list.push(strict_schema(item, &format!("{here}[{i}]"))?);
                }
                Value::Array(list)
            }
            "$defs" | "definitions" => {
                let defs = v
                    .as_object()
                    .ok_or_else(|| (here.clone(), "must be an object".to_owned()))?;
                let mut d = Map::new();
                for (name, sub) in defs {
                    d.insert(name.clone(), strict_schema(sub, &format!("{here}.{name}"))?);
                }
                Value::Object(d)
            }
            "additionalProperties" => {
                if v != &Value::Bool(false) {
                    return Err((
                        here,
                        "OpenAI strict mode takes only \"additionalProperties\": false (every \
                         object is closed)"
                            .to_owned(),
                    ));
                }
                v.clone()
            }
            _ => v.clone(),
        };
        out.insert(k.clone(), rewritten);
    }
    if is_object_schema(o) {
        out.insert("additionalProperties".into(), Value::Bool(false));
        let names: Vec<Value> = o
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(|k| Value::String(k.clone())).collect())
            .unwrap_or_default();
        out.insert("required".into(), Value::Array(names));
        if !out.contains_key("properties") {
            out.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    Ok(Value::Object(out))
}

/// `schema` made to accept `null` too: a `"type"` gains `"null"`, or (with `enum`,
/// `const`, a `$ref` or no type) it becomes `anyOf: [schema, {"type": "null"}]`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut o) = schema else {
        return schema;
    };
    let simple = !o.contains_key("enum") && !o.contains_key("const") && !o.contains_key("$ref");
    match o.get_mut("type") {
        Some(Value::String(t)) if simple => {
            if t != "null" {
                let t = std::mem::take(t);
                o.insert(
                    "type".into(),
                    Value::Array(vec![Value::String(t), "null".into()]),
                );
            }
            Value::Object(o)
        }
        Some(Value::Array(ts)) if simple => {
            if !ts.iter().any(|t| t == "null") {
                ts.push("null".into());
            }
            Value::Object(o)
        }
        _ => {
            let mut wrapped = Map::new();
            wrapped.insert(
                "anyOf".into(),
                Value::Array(vec![Value::Object(o), serde_json::json!({"type": "null"})]),
            );
            Value::Object(wrapped)
        }
    }
}

/// The schema with `additionalProperties: false` on every object schema that does not
/// say otherwise (Anthropic's structured output takes only closed objects). Optional
/// properties stay optional there.
fn closed_objects(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => {
            let mut out: Map<String, Value> = o
                .iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "properties" | "$defs" | "definitions" => match v {
                            Value::Object(m) => Value::Object(
                                m.iter()
                                    .map(|(n, s)| (n.clone(), closed_objects(s)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        },
                        "items" | "anyOf" | "allOf" | "oneOf" => match v {
                            Value::Array(a) => Value::Array(a.iter().map(closed_objects).collect()),
                            other => closed_objects(other),
                        },
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect();
            if is_object_schema(o) && !o.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        other => other.clone(),
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

/// `text` on one line (line breaks as spaces), cut at a character boundary to at most
/// `max` bytes with "…" marking the cut.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if flat.len() <= max {
        return flat;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !flat.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &flat[..end])
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

    fn spec(schema: Value, provider: ProviderKind) -> Result<OutputSpec> {
        OutputSpec::new(&schema, provider, OutputMode::Auto, "output_schema")
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
        let s = spec(schema, ProviderKind::OpenAi).unwrap();
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
            let e = spec(schema.clone(), ProviderKind::OpenAiResponses).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Config);
            assert!(e.message.starts_with(path), "{}", e.message);
            // Anthropic and Gemini take it as written.
            spec(schema.clone(), ProviderKind::Anthropic).unwrap();
            spec(schema, ProviderKind::Gemini).unwrap();
        }
    }

    #[test]
    fn the_root_must_be_an_object_schema() {
        for schema in [
            json!({"type": "string"}),
            json!({"anyOf": [{"type": "object"}]}),
            json!(3),
        ] {
            let e = spec(schema, ProviderKind::Anthropic).unwrap_err();
            assert!(e.message.starts_with("output_schema:"), "{}", e.message);
        }
        let e = spec(
            json!({"type": "object", "properties": {"a": {"type": 5}}}),
            ProviderKind::Gemini,
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
        for p in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
            let s = OutputSpec::new(&schema, p, OutputMode::Tool, "output_schema").unwrap();
            assert_eq!(s.mode(), WireMode::Tool);
            assert_eq!(
                s.wire_schema(),
                &schema,
                "the forced tool takes the schema as written"
            );
        }
        for p in [ProviderKind::Gemini, ProviderKind::OpenAiResponses] {
            let e = OutputSpec::new(&schema, p, OutputMode::Tool, "output_schema").unwrap_err();
            assert!(e.message.starts_with("output_mode"), "{}", e.message);
        }
    }

    #[test]
    fn anthropic_gets_closed_objects_with_optional_properties_kept() {
        let s = spec(
            json!({"type": "object", "properties": {"a": {"type": "object"}}, "required": []}),
            ProviderKind::Anthropic,
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
            ProviderKind::OpenAi,
        )
        .unwrap();
        assert_eq!(
            s.accept(r#"{"name":"Ada","age":null,"pets":[{"kind":null}]}"#),
            Ok(json!({"name": "Ada", "pets": [{}]}))
        );
        assert_eq!(
            s.accept("```json\n{\"name\":\"Ada\"}\n```"),
            Ok(json!({"name": "Ada"}))
        );
        // A required property's null is not removed: it fails as the user's schema says.
        let Err(Rejection(e)) = s.accept(r#"{"name":null}"#) else {
            panic!("accepted")
        };
        assert!(e.contains("at /name") && e.contains("null"), "{e}");
        let Err(Rejection(e)) = s.accept("{\"name\":\n") else {
            panic!("accepted")
        };
        assert!(
            e.starts_with("the answer is not valid JSON") && !e.contains('\n'),
            "{e}"
        );
        // Without strict mode a null stays and is judged by the schema.
        let g = spec(
            json!({"type": "object", "properties": {"age": {"type": "integer"}}}),
            ProviderKind::Gemini,
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
            ProviderKind::OpenAi,
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
            ProviderKind::Anthropic,
        )
        .unwrap();
        let long = format!("{{\"a\":\"{}\"}}", "x\u{e9}".repeat(3000));
        let Err(Rejection(e)) = s.accept(&long) else {
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
}
