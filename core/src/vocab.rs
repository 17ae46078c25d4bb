//! Owns the one description of panto's vocabulary: every event with its fields, the
//! closed string sets (block, delta and content kinds, stop reasons), the records events
//! carry (usage), every error kind with its stable code, and every configuration key
//! with its type, default, bounds and one line of documentation.
//!
//! The Rust types themselves are declared next to what they mean (`event.rs`,
//! `error.rs`, `message.rs`, `config.rs`), each through a macro that also writes its
//! entry here, so a type and its description cannot disagree. [`describe`] renders the
//! whole description as JSON; `scripts/gen.sh` feeds that to the generators of the Go
//! and Python bindings and to the checks of the C header and the docs (DESIGN.md,
//! "One vocabulary"). It does not own any behaviour: parsing the configuration against
//! [`CONFIG`] is [`check`]'s one job, and the rest stays with the types.

use serde_json::{json, Map, Value};

#[cfg(test)]
use crate::config::REASONING_KEYS;

use crate::error::{Error, Result};

/// How a field of an event or record is typed, as the bindings render it.
pub trait Describe {
    /// The type's name in the description (`u32`, `string`, `json`, `usage`, …).
    const TYPE: &'static str;
    /// Absent from the canonical JSON when it has no value.
    const OPTIONAL: bool = false;
}

macro_rules! describe_as {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl Describe for $t { const TYPE: &'static str = $name; })*
    };
}
describe_as! {
    bool => "bool", u16 => "u16", u32 => "u32", u64 => "u64", f64 => "f64",
    String => "string", Value => "json",
    crate::message::Block => "block",
}

macro_rules! describe_optional {
    ($($t:ty => $name:literal),* $(,)?) => {
        $(impl Describe for Option<$t> {
            const TYPE: &'static str = $name;
            const OPTIONAL: bool = true;
        })*
    };
}
describe_optional! { String => "string", u16 => "u16", u32 => "u32", u64 => "u64", f64 => "f64" }

/// A tool result's parts: absent from the canonical JSON when there are none.
impl Describe for Vec<crate::message::Block> {
    const TYPE: &'static str = "parts";
    const OPTIONAL: bool = true;
}

/// A structured output: JSON whose numbers are kept as written.
impl Describe for Option<crate::output::JsonText> {
    const TYPE: &'static str = "json_text";
}

/// `arguments` of a tool call: the parsed object, or JSON `null` — present either way.
impl Describe for Option<Value> {
    const TYPE: &'static str = "json";
}

/// Whether a field's attributes, as text, leave it out of the canonical JSON when it has
/// no value (`skip_serializing_if`): an optional field of the description, whatever its
/// type (`arguments` is an `Option<Value>` that is always present; `output` one that is
/// not). Const, for the `EVENTS` table.
pub const fn skipped_when_empty(attrs: &str) -> bool {
    let (hay, needle) = (attrs.as_bytes(), b"skip_serializing_if".as_slice());
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let mut j = 0;
        while j < needle.len() && hay[i + j] == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return true;
        }
        i += 1;
    }
    false
}

/// One field of an event or record.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    /// The field's name in the canonical JSON.
    pub name: &'static str,
    /// Its type, in the description's terms (`string`, `u32`, `usage`, …).
    pub ty: &'static str,
    /// Whether the field may be absent (`null` in the canonical JSON).
    pub optional: bool,
    /// One line of documentation (the field's first doc line in the core).
    pub doc: &'static str,
}

/// One event type.
#[derive(Debug, Clone, Copy)]
pub struct EventSpec {
    /// The event's type name in the canonical JSON (`content_delta`).
    pub name: &'static str,
    /// The Rust variant's name (`ContentDelta`), which the bindings' type names follow.
    pub variant: &'static str,
    /// The stable code (the C ABI's `PANTO_EV_*`).
    pub code: u32,
    /// One line of documentation.
    pub doc: &'static str,
    /// The event's fields, in order.
    pub fields: &'static [FieldSpec],
}

/// A named object type that fields use (`usage`).
#[derive(Debug, Clone, Copy)]
pub struct RecordSpec {
    /// The record's name (`usage`).
    pub name: &'static str,
    /// The Rust type's name.
    pub variant: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
    /// The record's fields, in order.
    pub fields: &'static [FieldSpec],
}

/// One value of a closed string set.
#[derive(Debug, Clone, Copy)]
pub struct ValueSpec {
    /// The value as written in JSON.
    pub name: &'static str,
    /// The Rust variant's name.
    pub variant: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
}

/// A closed set of strings (`block_kind`, …). `open` sets also take values outside the
/// list (`stop_reason`'s `other:<raw>`).
#[derive(Debug, Clone, Copy)]
pub struct EnumSpec {
    /// The set's name (`block_kind`).
    pub name: &'static str,
    /// The Rust type's name.
    pub variant: &'static str,
    /// One line of documentation.
    pub doc: &'static str,
    /// Whether values outside the list are also taken.
    pub open: bool,
    /// The values, in order.
    pub values: &'static [ValueSpec],
}

/// One error kind.
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    /// The kind's name in JSON (`rate_limited`).
    pub name: &'static str,
    /// The Rust variant's name (`RateLimited`).
    pub variant: &'static str,
    /// The stable code (the C ABI's `PANTO_ERR_*`).
    pub code: u32,
    /// One line of documentation.
    pub doc: &'static str,
}

/// The type of a configuration key.
#[derive(Debug, Clone, Copy)]
pub enum KeyType {
    /// `true` or `false`.
    Bool,
    /// An unsigned 32-bit integer.
    U32,
    /// An unsigned 64-bit integer.
    U64,
    /// A number.
    F64,
    /// A string.
    String,
    /// A string from a fixed list.
    Enum(&'static [&'static str]),
    /// Any JSON object (a tool's JSON Schema).
    JsonObject,
    /// Any JSON value; the key's reader checks it (a turn's `output_schema`: an object
    /// or `false`).
    Any,
    /// An object with these keys.
    Object(&'static [Key]),
    /// An array of objects with these keys.
    Array(&'static [Key]),
    /// An object of strings under any names (`headers`).
    StringMap,
    /// An array of strings.
    StringArray,
    /// An object under any names whose values are objects with these keys
    /// (`mcp_servers`).
    ObjectMap(&'static [Key]),
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// The key's name (one level: `max_retries`, not `retry.max_retries`).
    pub name: &'static str,
    /// Its type.
    pub ty: KeyType,
    /// Its default's JSON form (`null`: unset unless given), written from the Rust
    /// default of the key's declaration.
    pub default: fn() -> Value,
    /// Whether the key must be given.
    pub required: bool,
    /// The least value a number may take.
    pub min: Option<u64>,
    /// The greatest value a number may take.
    pub max: Option<u64>,
    /// One line of documentation.
    pub doc: &'static str,
}

fn no_default() -> Value {
    Value::Null
}

impl Key {
    /// A key of type `ty` whose default's JSON form `default` returns.
    pub const fn new(
        name: &'static str,
        ty: KeyType,
        default: fn() -> Value,
        doc: &'static str,
    ) -> Key {
        Key {
            name,
            ty,
            default,
            required: false,
            min: None,
            max: None,
            doc,
        }
    }
    /// The least value a number may take.
    pub const fn min(mut self, min: u64) -> Key {
        self.min = Some(min);
        self
    }
    /// The greatest value a number may take.
    pub const fn max(mut self, max: u64) -> Key {
        self.max = Some(max);
        self
    }
    /// The key must be given (it has no default).
    pub const fn required(mut self) -> Key {
        self.required = true;
        self.default = no_default;
        self
    }
    /// No default in the description: the Rust side sets the value itself (the
    /// provider's base URL, the API key from the environment).
    pub const fn unset(mut self) -> Key {
        self.default = no_default;
        self
    }
    /// Described with this type instead of the Rust type's (a `usize` bounded as a
    /// `u32`).
    pub const fn shown_as(mut self, ty: KeyType) -> Key {
        self.ty = ty;
        self
    }
}

pub use crate::config::CONFIG;
pub use crate::error::ERROR_KINDS;
pub use crate::event::{BLOCK_KIND, DELTA_KIND, EVENTS};
pub use crate::message::{CONTENT_TYPE, RECORDS, STOP_REASON};

/// Every closed string set, in the order the description lists them.
pub fn enums() -> [&'static EnumSpec; 4] {
    [&BLOCK_KIND, &DELTA_KIND, &CONTENT_TYPE, &STOP_REASON]
}

/// Version of the description's own shape (not of panto): bumped when a generator
/// would have to change to read it.
pub const DESCRIPTION_VERSION: u32 = 1;

/// The whole vocabulary as JSON (its shape is documented in DESIGN.md, "One
/// vocabulary"): what `panto-gen` prints for `scripts/gen.sh`.
pub fn describe() -> Value {
    let fields = |fs: &[FieldSpec]| -> Value {
        fs.iter()
            .map(|f| json!({"name": f.name, "type": f.ty, "optional": f.optional, "doc": clean(f.doc)}))
            .collect()
    };
    let events: Vec<Value> = EVENTS
        .iter()
        .map(|e| {
            json!({"name": e.name, "variant": e.variant, "code": e.code,
                   "terminal": e.name == "message_complete", "doc": clean(e.doc),
                   "fields": fields(e.fields)})
        })
        .collect();
    let records: Vec<Value> = RECORDS
        .iter()
        .map(|r| json!({"name": r.name, "variant": r.variant, "doc": clean(r.doc), "fields": fields(r.fields)}))
        .collect();
    let enums: Vec<Value> = enums()
        .iter()
        .map(|e| {
            let values: Vec<Value> = e
                .values
                .iter()
                .map(|v| json!({"name": v.name, "variant": v.variant, "doc": clean(v.doc)}))
                .collect();
            json!({"name": e.name, "variant": e.variant, "doc": clean(e.doc), "open": e.open, "values": values})
        })
        .collect();
    let kinds: Vec<Value> = ERROR_KINDS
        .iter()
        .map(|k| json!({"name": k.name, "variant": k.variant, "code": k.code, "doc": clean(k.doc)}))
        .collect();
    json!({
        "version": DESCRIPTION_VERSION,
        "events": events,
        "records": records,
        "enums": enums,
        "error_kinds": kinds,
        "config": keys_json(CONFIG),
    })
}

/// Doc comments as one line: `///` lines joined, each without its leading space.
fn clean(doc: &str) -> String {
    doc.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn keys_json(keys: &[Key]) -> Value {
    keys.iter()
        .map(|k| {
            let mut o = Map::new();
            o.insert("name".into(), k.name.into());
            match k.ty {
                KeyType::Bool => o.insert("type".into(), "bool".into()),
                KeyType::U32 => o.insert("type".into(), "u32".into()),
                KeyType::U64 => o.insert("type".into(), "u64".into()),
                KeyType::F64 => o.insert("type".into(), "f64".into()),
                KeyType::String => o.insert("type".into(), "string".into()),
                KeyType::Enum(values) => {
                    o.insert("values".into(), json!(values));
                    o.insert("type".into(), "enum".into())
                }
                KeyType::JsonObject => o.insert("type".into(), "json_object".into()),
                KeyType::Any => o.insert("type".into(), "json".into()),
                KeyType::Object(keys) => {
                    o.insert("keys".into(), keys_json(keys));
                    o.insert("type".into(), "object".into())
                }
                KeyType::Array(keys) => {
                    o.insert(
                        "items".into(),
                        json!({"type": "object", "keys": keys_json(keys)}),
                    );
                    o.insert("type".into(), "array".into())
                }
                KeyType::StringMap => {
                    o.insert("values".into(), "string".into());
                    o.insert("type".into(), "map".into())
                }
                KeyType::StringArray => {
                    o.insert("items".into(), json!({"type": "string"}));
                    o.insert("type".into(), "array".into())
                }
                KeyType::ObjectMap(keys) => {
                    o.insert("values".into(), "object".into());
                    o.insert("keys".into(), keys_json(keys));
                    o.insert("type".into(), "map".into())
                }
            };
            // An object that is there by default shows `{}`: its keys carry their own
            // defaults.
            let default = match (k.ty, (k.default)()) {
                (KeyType::Object(_), Value::Object(_)) => json!({}),
                (_, v) => v,
            };
            o.insert("default".into(), default);
            if k.required {
                o.insert("required".into(), true.into());
            }
            if let Some(m) = k.min {
                o.insert("min".into(), m.into());
            }
            if let Some(m) = k.max {
                o.insert("max".into(), m.into());
            }
            o.insert("doc".into(), k.doc.trim().into());
            Value::Object(o)
        })
        .collect()
}

/// Checks a configuration object against `keys`: unknown keys, types, allowed values,
/// bounds and required keys, each a `config` error that starts with the key's path
/// (`retry.max_retries: …`). `null` is the same as an absent key.
///
/// Every agent made checks its whole configuration (a few dozen keys) once or twice, and
/// a process holding thousands of streams makes an agent per stream: so the check looks
/// each key of the table up once, and spells a key's path only for an error or a nested
/// object, not for every key it passes.
pub fn check(keys: &[Key], obj: &Map<String, Value>, prefix: &str) -> Result<()> {
    // The table's names are distinct (a test holds every table to it), so `obj` has a key
    // outside the table exactly when fewer of the table's keys are in `obj` than `obj`
    // has keys; only then is the first such key searched for, to name it.
    let known = keys.iter().filter(|key| obj.contains_key(key.name)).count();
    if known < obj.len() {
        if let Some(k) = obj
            .keys()
            .find(|k| !keys.iter().any(|key| key.name == k.as_str()))
        {
            let known: Vec<&str> = keys.iter().map(|key| key.name).collect();
            return Err(Error::config(format!(
                "{prefix}{k}: unknown key (known: {})",
                known.join(", ")
            )));
        }
    }
    for key in keys {
        let path = KeyPath {
            prefix,
            name: key.name,
        };
        match obj.get(key.name) {
            None | Some(Value::Null) => {
                if key.required {
                    return Err(Error::config(format!("{path}: required")));
                }
            }
            Some(v) => check_value(key, v, path)?,
        }
    }
    Ok(())
}

/// A key's path (`retry.max_retries`), spelled out only when it is shown.
#[derive(Clone, Copy)]
struct KeyPath<'a> {
    prefix: &'a str,
    name: &'a str,
}

impl std::fmt::Display for KeyPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.prefix, self.name)
    }
}

fn wrong_type(path: impl std::fmt::Display, want: &str) -> Error {
    Error::config(format!("{path}: must be {want}"))
}

fn check_value(key: &Key, v: &Value, path: KeyPath<'_>) -> Result<()> {
    match key.ty {
        KeyType::Bool => {
            v.as_bool().ok_or_else(|| wrong_type(path, "a boolean"))?;
        }
        KeyType::U32 | KeyType::U64 => {
            let n = v
                .as_u64()
                .ok_or_else(|| wrong_type(path, "a non-negative integer"))?;
            if matches!(key.ty, KeyType::U32) && n > u64::from(u32::MAX) {
                return Err(Error::config(format!("{path}: too large")));
            }
            if let Some(min) = key.min {
                if n < min {
                    return Err(Error::config(format!("{path}: must be at least {min}")));
                }
            }
            if let Some(max) = key.max {
                if n > max {
                    return Err(Error::config(format!("{path}: at most {max} (got {n})")));
                }
            }
        }
        KeyType::F64 => {
            v.as_f64().ok_or_else(|| wrong_type(path, "a number"))?;
        }
        KeyType::String => {
            v.as_str().ok_or_else(|| wrong_type(path, "a string"))?;
        }
        KeyType::Enum(values) => {
            let s = v.as_str().ok_or_else(|| wrong_type(path, "a string"))?;
            if !values.contains(&s) {
                let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
                let allowed = match quoted.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => quoted.join(""),
                };
                return Err(Error::config(format!(
                    "{path}: must be {allowed} (got {s:?})"
                )));
            }
        }
        KeyType::JsonObject => {
            v.as_object()
                .ok_or_else(|| wrong_type(path, "a JSON Schema object"))?;
        }
        KeyType::Any => {}
        KeyType::Object(keys) => {
            let o = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
            check(keys, o, &format!("{path}."))?;
        }
        KeyType::Array(keys) => {
            let items = v.as_array().ok_or_else(|| wrong_type(path, "an array"))?;
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                let o = item
                    .as_object()
                    .ok_or_else(|| wrong_type(&item_path, "an object"))?;
                check(keys, o, &format!("{item_path}."))?;
            }
        }
        KeyType::StringMap => {
            let o = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
            for (name, item) in o {
                item.as_str()
                    .ok_or_else(|| wrong_type(format!("{path}.{name}"), "a string"))?;
            }
        }
        KeyType::StringArray => {
            let items = v.as_array().ok_or_else(|| wrong_type(path, "an array"))?;
            for (i, item) in items.iter().enumerate() {
                item.as_str()
                    .ok_or_else(|| wrong_type(format!("{path}[{i}]"), "a string"))?;
            }
        }
        KeyType::ObjectMap(keys) => {
            let o = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
            for (name, item) in o {
                let item_path = format!("{path}.{name}");
                let io = item
                    .as_object()
                    .ok_or_else(|| wrong_type(&item_path, "an object"))?;
                check(keys, io, &format!("{item_path}."))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_is_complete_and_consistent() {
        let d = describe();
        let events = d["events"].as_array().unwrap();
        assert_eq!(events.len(), crate::Event::TYPES.len());
        let mut last = 0;
        for e in events {
            let code = e["code"].as_u64().unwrap();
            assert!(
                code > last,
                "event codes are 1-based and increasing: {code}"
            );
            last = code;
        }
        let kinds = d["error_kinds"].as_array().unwrap();
        assert_eq!(kinds.len(), crate::ErrorKind::ALL.len());
        // Every field type names a scalar, a record or an enum of the description.
        let mut named: Vec<&str> = vec![
            "bool",
            "u16",
            "u32",
            "u64",
            "f64",
            "string",
            "json",
            "json_text",
            "block",
            "parts",
            "deferred_calls",
        ];
        named.extend(RECORDS.iter().map(|r| r.name));
        named.extend(enums().iter().map(|e| e.name));
        for f in EVENTS
            .iter()
            .flat_map(|e| e.fields)
            .chain(RECORDS.iter().flat_map(|r| r.fields))
        {
            assert!(named.contains(&f.ty), "{}: unknown type {}", f.name, f.ty);
            assert!(!f.doc.is_empty(), "{} has no doc", f.name);
        }
        fn defaults_parse(keys: &[Key]) {
            for k in keys {
                assert!(!k.doc.trim().is_empty(), "{} has no doc", k.name);
                if let KeyType::Object(sub) | KeyType::Array(sub) | KeyType::ObjectMap(sub) = k.ty {
                    defaults_parse(sub);
                }
            }
        }
        defaults_parse(CONFIG);
    }

    /// The serde form of a sample of every event lists exactly the described fields,
    /// in the described order, optional ones absent when unset.
    #[test]
    fn events_serialize_as_described() {
        use crate::message::{Block, StopReason, Usage};
        use crate::{BlockKind, DeltaKind, Event};
        let samples = vec![
            Event::MessageStart {
                message: 0,
                model: "m".into(),
                response_id: Some("r".into()),
                queued_ms: Some(3),
            },
            Event::BlockStart {
                message: 0,
                block: 0,
                kind: BlockKind::Text,
            },
            Event::ContentDelta {
                message: 0,
                block: 0,
                kind: DeltaKind::Text,
                text: "t".into(),
            },
            Event::ToolDetails {
                message: 0,
                block: 0,
                call_id: "c".into(),
                name: "n".into(),
            },
            Event::BlockComplete {
                message: 0,
                block: 0,
                content: Block::text("t"),
            },
            Event::MessageEnd {
                message: 0,
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
            Event::ToolCallStart {
                message: 0,
                call_id: "c".into(),
                name: "n".into(),
                arguments: None,
                arguments_raw: Some("x".into()),
                host: false,
            },
            Event::ToolResult {
                message: 0,
                call_id: "c".into(),
                name: "n".into(),
                output: "o".into(),
                is_error: false,
                parts: vec![Block::text("p")],
            },
            Event::ProviderRetry {
                message: 0,
                attempt: 2,
                max_attempts: 3,
                delay_ms: 1,
                reason: "r".into(),
                status: Some(500),
            },
            Event::MessageComplete {
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
                messages: 1,
                text: "t".into(),
                output: Some(crate::output::JsonText::from_value(
                    &serde_json::json!({"a": 1}),
                )),
                deferred: vec![crate::DeferredCall {
                    call_id: "c".into(),
                    name: "n".into(),
                    arguments: serde_json::json!({}),
                    reason: crate::DeferReason::Approval,
                }],
                model: "m".into(),
            },
            Event::HistoryCompacted {
                messages_before: 1,
                messages_after: 1,
                tokens_before: 1,
                tokens_after: 1,
            },
            Event::OutputRepair {
                message: 0,
                attempt: 1,
                max_attempts: 1,
                error: "e".into(),
            },
            Event::SteeringDelivered {
                message: 1,
                text: "t".into(),
            },
            Event::ToolProgress {
                message: 0,
                call_id: "c".into(),
                name: "n".into(),
                progress: 0.5,
                total: Some(1.0),
                text: Some("t".into()),
            },
            Event::ServerLog {
                server: "s".into(),
                level: "warning".into(),
                logger: Some("l".into()),
                data: "d".into(),
            },
            Event::McpSamplingRequest {
                server: "s".into(),
                summary: "q".into(),
                max_tokens: 10,
                outcome: "answered".into(),
            },
            Event::McpElicitationRequest {
                server: "s".into(),
                message: "m".into(),
                outcome: "decline".into(),
            },
            Event::ProviderFallback {
                message: 0,
                from_provider: "openai".into(),
                from_model: "a".into(),
                to_provider: "anthropic".into(),
                to_model: "b".into(),
                error_kind: "server".into(),
                error_message: "HTTP 503".into(),
                status: Some(503),
            },
        ];
        assert_eq!(samples.len(), EVENTS.len(), "a sample for every event");
        for (ev, spec) in samples.iter().zip(EVENTS) {
            assert_eq!(ev.type_name(), spec.name);
            let v = serde_json::to_value(ev).unwrap();
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            let mut want = vec!["type"];
            want.extend(spec.fields.iter().map(|f| f.name));
            let mut keys_sorted = keys.clone();
            keys_sorted.sort_unstable();
            want.sort_unstable();
            assert_eq!(keys_sorted, want, "{}", spec.name);
        }
        // Optional fields are omitted when unset.
        let bare = Event::MessageStart {
            message: 0,
            model: "m".into(),
            response_id: None,
            queued_ms: None,
        };
        assert!(serde_json::to_value(&bare)
            .unwrap()
            .get("response_id")
            .is_none());
        let usage = serde_json::to_value(Usage::default()).unwrap();
        let mut got: Vec<&str> = usage
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut want: Vec<&str> = RECORDS[0].fields.iter().map(|f| f.name).collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "usage");
    }

    #[test]
    fn enums_match_their_types() {
        use crate::message::{Block, StopReason};
        for v in STOP_REASON.values {
            let r = StopReason::parse(v.name);
            assert!(!matches!(r, StopReason::Other(_)), "{}", v.name);
            assert_eq!(r.as_string(), v.name);
        }
        let blocks = [
            Block::text("t"),
            Block::Reasoning {
                text: "t".into(),
                signature: None,
            },
            Block::RedactedReasoning { data: "d".into() },
            Block::ToolCall {
                call_id: "c".into(),
                name: "n".into(),
                arguments: None,
                arguments_raw: None,
            },
            Block::ToolResult {
                call_id: "c".into(),
                name: "n".into(),
                output: "o".into(),
                is_error: false,
                parts: Vec::new(),
            },
            Block::Opaque {
                provider: "p".into(),
                block: Value::Null,
            },
            Block::Image(crate::media::Media::url("u")),
            Block::Document(crate::media::Media::url("u")),
        ];
        let types: Vec<String> = blocks
            .iter()
            .map(|b| {
                serde_json::to_value(b).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let described: Vec<&str> = CONTENT_TYPE.values.iter().map(|v| v.name).collect();
        assert_eq!(types, described);
        for v in BLOCK_KIND.values {
            let k: crate::BlockKind = serde_json::from_value(Value::from(v.name)).unwrap();
            assert_eq!(k.as_str(), v.name);
        }
        for v in DELTA_KIND.values {
            let k: crate::DeltaKind = serde_json::from_value(Value::from(v.name)).unwrap();
            assert_eq!(k.as_str(), v.name);
        }
    }

    /// The schema and `Config` agree: a default configuration shows exactly the
    /// schema's keys, each at the schema's default.
    #[test]
    fn config_defaults_are_the_schema_defaults() {
        fn compare(keys: &[Key], got: &Map<String, Value>, prefix: &str) {
            let mut names: Vec<&str> = keys.iter().map(|k| k.name).collect();
            let mut have: Vec<&str> = got.keys().map(String::as_str).collect();
            names.sort_unstable();
            have.sort_unstable();
            assert_eq!(have, names, "keys under {prefix:?}");
            for k in keys {
                let path = format!("{prefix}{}", k.name);
                if matches!(k.name, "model" | "base_url" | "api_key") {
                    continue; // given by Config::new / the environment
                }
                let want: Value = (k.default)();
                match (k.ty, &got[k.name]) {
                    (KeyType::Object(sub), Value::Object(o)) => {
                        compare(sub, o, &format!("{path}."))
                    }
                    (_, v) => assert_eq!(v, &want, "default of {path}"),
                }
            }
        }
        // The configuration's default provider, as the schema's default names it.
        let c = crate::Config::new(crate::ProviderKind::default(), "m");
        compare(CONFIG, c.to_value().as_object().unwrap(), "");
        // Keys whose default is unset show their sub-keys' defaults once given.
        let r = crate::Reasoning::new(crate::Effort::Medium).to_value();
        let want: Value = (REASONING_KEYS[0].default)();
        assert_eq!(r["effort"], want);
        let k = crate::Config::from_json(r#"{"model":"m","compaction":{"threshold_tokens":5}}"#)
            .unwrap()
            .to_value();
        assert_eq!(k["compaction"]["keep_last"], 6);
        let t = crate::Config::from_json(r#"{"model":"m","tools":[{"name":"t"}]}"#)
            .unwrap()
            .to_value();
        let tool = t["tools"][0].as_object().unwrap();
        for key in TOOL_KEYS_FOR_TEST() {
            if key.name != "name" {
                let want: Value = (key.default)();
                assert_eq!(tool[key.name], want, "tools[].{}", key.name);
            }
        }
    }

    #[allow(non_snake_case)]
    fn TOOL_KEYS_FOR_TEST() -> &'static [Key] {
        match CONFIG.iter().find(|k| k.name == "tools").map(|k| k.ty) {
            Some(KeyType::Array(keys)) => keys,
            _ => panic!("tools is an array of objects"),
        }
    }

    #[test]
    fn check_names_the_path() {
        let cases = [
            (
                r#"{"tools":[{"name":"a","x":1}]}"#,
                "tools[0].x: unknown key",
            ),
            (r#"{"tools":[3]}"#, "tools[0]: must be an object"),
            (r#"{"headers":{"a":1}}"#, "headers.a: must be a string"),
            (
                r#"{"provider":"x"}"#,
                "provider: must be \"openai\", \"anthropic\", \"gemini\" or \"openai-responses\"",
            ),
            (r#"{"max_tokens":0}"#, "max_tokens: must be at least 1"),
            (r#"{"max_tokens":5000000000}"#, "max_tokens: too large"),
            (
                r#"{"compaction":{}}"#,
                "compaction.threshold_tokens: required",
            ),
            (
                r#"{"reasoning":{"effort":"max"}}"#,
                "reasoning.effort: must be",
            ),
        ];
        for (json, want) in cases {
            let v: Value = serde_json::from_str(json).unwrap();
            let mut o = v.as_object().unwrap().clone();
            o.insert("model".into(), "m".into());
            let e = check(CONFIG, &o, "").unwrap_err();
            assert!(e.message.starts_with(want), "{json}: {}", e.message);
        }
    }

    /// `check` finds an unknown key by counting the table's keys present, which holds
    /// only if no table names a key twice.
    #[test]
    fn every_key_table_has_distinct_names() {
        fn walk(keys: &'static [Key], path: &str, tables: &mut usize) {
            *tables += 1;
            let mut names: Vec<&str> = keys.iter().map(|k| k.name).collect();
            names.sort_unstable();
            let before = names.len();
            names.dedup();
            assert_eq!(names.len(), before, "{path}: a key named twice");
            for k in keys {
                match k.ty {
                    KeyType::Object(inner) | KeyType::Array(inner) | KeyType::ObjectMap(inner) => {
                        walk(inner, &format!("{path}{}.", k.name), tables)
                    }
                    _ => {}
                }
            }
        }
        let mut tables = 0;
        walk(CONFIG, "", &mut tables);
        walk(crate::config::REASONING_KEYS, "reasoning.", &mut tables);
        walk(
            crate::config::MCP_SERVER_KEYS,
            "mcp_servers.*.",
            &mut tables,
        );
        walk(crate::options::TURN_OPTION_KEYS, "options.", &mut tables);
        walk(crate::options::COMPACT_OPTION_KEYS, "compact.", &mut tables);
        assert!(tables > 5, "nested tables are walked too ({tables})");
    }

    /// `Config::from_json` and `Agent::from_json` leave out the schema check of the
    /// configuration they read (its JSON was checked): what they read must pass it.
    #[test]
    fn a_configuration_read_from_json_passes_the_whole_validation() {
        for json in [
            r#"{"model":"m"}"#,
            r#"{"model":"m","base_url":"http://127.0.0.1:1/v1","api_key":"k","max_steps":1,"retry":{"max_retries":0}}"#,
            r#"{"provider":"anthropic","model":"m","max_tokens":100,"compaction":{"threshold_tokens":5},"tools":[{"name":"t"}],"reasoning":{"effort":"low"},"headers":{"x-a":"b"},"timeouts":{"idle_ms":5}}"#,
        ] {
            let c =
                crate::Config::from_json(json).unwrap_or_else(|e| panic!("{json}: {}", e.message));
            c.validate()
                .unwrap_or_else(|e| panic!("{json}: {}", e.message));
            crate::Agent::from_json(json).unwrap_or_else(|e| panic!("{json}: {}", e.message));
        }
    }

    #[test]
    fn an_unknown_key_is_named_among_known_ones() {
        // Every key of the table present (as `validate` checks it), plus one unknown: the
        // count of known keys falls short of the object's by one, and the unknown is named.
        let mut full = crate::Config::from_json(r#"{"model":"m"}"#)
            .unwrap()
            .to_value();
        assert!(check(CONFIG, full.as_object().unwrap(), "").is_ok());
        full["colour"] = 1.into();
        let e = check(CONFIG, full.as_object().unwrap(), "").unwrap_err();
        assert!(
            e.message
                .starts_with("colour: unknown key (known: provider, model, "),
            "{}",
            e.message
        );
        // The first unknown in the object's key order, with known keys on either side.
        let o: Value =
            serde_json::from_str(r#"{"a_unknown":1,"model":"m","zz_unknown":2}"#).unwrap();
        let e = check(CONFIG, o.as_object().unwrap(), "").unwrap_err();
        assert!(
            e.message.starts_with("a_unknown: unknown key"),
            "{}",
            e.message
        );
        // A nested table's unknown key, with its path.
        let o: Value =
            serde_json::from_str(r#"{"model":"m","retry":{"max_retries":1,"x":1}}"#).unwrap();
        let e = check(CONFIG, o.as_object().unwrap(), "").unwrap_err();
        assert!(
            e.message.starts_with("retry.x: unknown key"),
            "{}",
            e.message
        );
    }
}
