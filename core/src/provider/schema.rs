//! Owns the output schema in the forms the providers' structured output takes:
//! OpenAI's strict mode (chat completions and Responses: every object closed, every
//! property required, an optional one made nullable, the keywords it refuses named) and
//! Anthropic's closed objects; and which form, and which way of asking (the native
//! field or a forced tool), each provider gets ([`shape`], from the seam). The schema's
//! checks and the reading of the answer are `output`'s.

use serde_json::{Map, Value};

use super::ProviderKind;
use crate::error::{Error, Result};
use crate::request::{OutputMode, WireMode};

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

/// An output schema as one provider is sent it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shaped {
    /// The schema on the wire.
    pub schema: Value,
    /// The provider's structured-output field, or the forced tool.
    pub mode: WireMode,
    /// Whether the wire schema made optional properties required-but-nullable (OpenAI
    /// strict): a null there is then taken as "absent".
    pub strips_nulls: bool,
}

/// `schema` as `provider` takes it when the answer is asked for in `mode`; `key` names
/// it in errors. A `config` error when `tool` mode is asked of a provider that has no
/// forced tool here, or when the provider refuses a keyword of the schema (naming it and
/// where it is).
pub(crate) fn shape(
    schema: &Value,
    provider: ProviderKind,
    mode: OutputMode,
    key: &str,
) -> Result<Shaped> {
    let wire = provider.wire();
    let mode = match mode {
        OutputMode::Auto | OutputMode::Native => WireMode::Native,
        OutputMode::Tool if wire.forces_output_tool() => WireMode::Tool,
        OutputMode::Tool => {
            return Err(Error::config(format!(
                "output_mode: \"tool\" is for the {} providers; {} has native structured \
                 output (use \"native\")",
                forced_tool_providers(),
                provider.as_str()
            )))
        }
    };
    let (schema, strips_nulls) = match mode {
        WireMode::Native => wire
            .native_output_schema(schema)
            .map_err(|(path, problem)| Error::config(format!("{key}{path}: {problem}")))?,
        WireMode::Tool => (schema.clone(), false),
    };
    Ok(Shaped {
        schema,
        mode,
        strips_nulls,
    })
}

/// The providers that take `output_mode: tool`, by name: "openai and anthropic".
fn forced_tool_providers() -> String {
    let names: Vec<&str> = ProviderKind::ALL
        .iter()
        .filter(|k| k.wire().forces_output_tool())
        .map(|k| k.as_str())
        .collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no".to_owned(),
    }
}

/// Whether a schema object says its instances are objects.
pub(crate) fn declares_object(o: &Map<String, Value>) -> bool {
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
pub(crate) fn closed_objects(schema: &Value) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_mode_names_the_providers_that_take_it() {
        assert_eq!(forced_tool_providers(), "openai and anthropic");
    }
}
