//! Owns how configuration keys are declared: the `config_keys!` macro, which writes a
//! configuration struct and its key table from one row per key, and [`KeyValue`], how one
//! key's Rust type reads and writes its JSON form. What the keys are is `config`'s; how
//! their description is rendered is `vocab`'s.
//!
//! One row gives the field, its Rust type, its default, its bounds, how it is read and
//! written when not the type's own way, and its documentation (the first `///` line is
//! the key's one line in the description; the rest is for rustdoc only):
//!
//! ```text
//! config_keys! {
//!     /// Retry policy for requests that fail before their first byte.
//!     #[derive(Clone, Copy, PartialEq, Eq)]
//!     pub struct RetryConfig in const RETRY_KEYS {
//!         /// Retries after the first attempt.
//!         pub max_retries: u32 = 2, key(max(100));
//!     }
//! }
//! ```
//!
//! From it: the struct with the field, `Debug` (a row's `debug f` shows `f(&field)`
//! instead: secrets), `defaults()` (the declared defaults), `read_keys` (what
//! `from_json` runs once the input has passed the table's checks: every key given, in
//! its [`KeyValue`] reading), `write_keys` (the `to_value` form: every key, `null` where
//! unset; a row's `write f` writes `f(&field)`), the key table with the default's JSON
//! written from the Rust default, and on request a `with_*` builder (`with set NAME`,
//! `with into NAME`, `with some NAME(ARG)`, `with push NAME(ARG)`,
//! `with insert NAME(VALUE)`). `key(...)` takes the table's modifiers: `min(n)`,
//! `max(n)`, `required()`, `unset()` (no default in the table: set by the caller, such
//! as the provider's base URL), `shown_as(KeyType)` (a `usize` shown as `u32`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::vocab::KeyType;

/// How a Rust type is read from and written to the JSON form of one configuration key.
pub trait KeyValue: Sized {
    /// The key's type in the description.
    const TYPE: KeyType;
    /// Reads a non-null value that passed [`crate::vocab::check`] against the key;
    /// `path` names the key in errors (a value of the wrong type is still an error, not
    /// a panic).
    fn read(v: &Value, path: &str) -> Result<Self>;
    /// The JSON form.
    fn write(&self) -> Value;
}

pub(crate) fn wrong_type(path: &str, want: &str) -> Error {
    Error::config(format!("{path}: must be {want}"))
}

fn unsigned(v: &Value, path: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| wrong_type(path, "a non-negative integer"))
}

impl KeyValue for bool {
    const TYPE: KeyType = KeyType::Bool;
    fn read(v: &Value, path: &str) -> Result<Self> {
        v.as_bool().ok_or_else(|| wrong_type(path, "a boolean"))
    }
    fn write(&self) -> Value {
        Value::Bool(*self)
    }
}

impl KeyValue for u32 {
    const TYPE: KeyType = KeyType::U32;
    fn read(v: &Value, path: &str) -> Result<Self> {
        Ok(u32::try_from(unsigned(v, path)?).unwrap_or(u32::MAX))
    }
    fn write(&self) -> Value {
        Value::from(*self)
    }
}

impl KeyValue for u64 {
    const TYPE: KeyType = KeyType::U64;
    fn read(v: &Value, path: &str) -> Result<Self> {
        unsigned(v, path)
    }
    fn write(&self) -> Value {
        Value::from(*self)
    }
}

impl KeyValue for usize {
    const TYPE: KeyType = KeyType::U64;
    fn read(v: &Value, path: &str) -> Result<Self> {
        Ok(usize::try_from(unsigned(v, path)?).unwrap_or(usize::MAX))
    }
    fn write(&self) -> Value {
        Value::from(*self)
    }
}

impl KeyValue for f64 {
    const TYPE: KeyType = KeyType::F64;
    fn read(v: &Value, path: &str) -> Result<Self> {
        v.as_f64().ok_or_else(|| wrong_type(path, "a number"))
    }
    fn write(&self) -> Value {
        // NaN and infinities have no JSON form: null, as serde_json writes them.
        serde_json::Number::from_f64(*self).map_or(Value::Null, Value::Number)
    }
}

impl KeyValue for String {
    const TYPE: KeyType = KeyType::String;
    fn read(v: &Value, path: &str) -> Result<Self> {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| wrong_type(path, "a string"))
    }
    fn write(&self) -> Value {
        Value::String(self.clone())
    }
}

/// Any JSON object (a JSON Schema).
impl KeyValue for Value {
    const TYPE: KeyType = KeyType::JsonObject;
    fn read(v: &Value, path: &str) -> Result<Self> {
        if v.is_object() {
            Ok(v.clone())
        } else {
            Err(wrong_type(path, "a JSON Schema object"))
        }
    }
    fn write(&self) -> Value {
        self.clone()
    }
}

/// Unset is `null` (or absent).
impl<T: KeyValue> KeyValue for Option<T> {
    const TYPE: KeyType = T::TYPE;
    fn read(v: &Value, path: &str) -> Result<Self> {
        if v.is_null() {
            return Ok(None);
        }
        T::read(v, path).map(Some)
    }
    fn write(&self) -> Value {
        self.as_ref().map_or(Value::Null, T::write)
    }
}

impl KeyValue for Vec<String> {
    const TYPE: KeyType = KeyType::StringArray;
    fn read(v: &Value, path: &str) -> Result<Self> {
        let items = v.as_array().ok_or_else(|| wrong_type(path, "an array"))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| String::read(item, &format!("{path}[{i}]")))
            .collect()
    }
    fn write(&self) -> Value {
        self.iter().cloned().map(Value::String).collect()
    }
}

impl KeyValue for BTreeMap<String, String> {
    const TYPE: KeyType = KeyType::StringMap;
    fn read(v: &Value, path: &str) -> Result<Self> {
        let o = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
        o.iter()
            .map(|(k, item)| Ok((k.clone(), String::read(item, &format!("{path}.{k}"))?)))
            .collect()
    }
    fn write(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    }
}

/// A type declared by `config_keys!` (an object of keys), so that a list of them is an
/// array of objects.
pub trait KeyObject: KeyValue {
    /// The object's keys.
    const KEYS: &'static [crate::vocab::Key];
}

impl<T: KeyObject> KeyValue for Vec<T> {
    const TYPE: KeyType = KeyType::Array(T::KEYS);
    fn read(v: &Value, path: &str) -> Result<Self> {
        let items = v.as_array().ok_or_else(|| wrong_type(path, "an array"))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| T::read(item, &format!("{path}[{i}]")))
            .collect()
    }
    fn write(&self) -> Value {
        self.iter().map(T::write).collect()
    }
}

/// A closed set of names read through the type's `parse` and written with its
/// `as_str`: `enum_key!(Compat: "auto", "openai", …)`.
macro_rules! enum_key {
    ($($t:ty: [$($name:literal),+ $(,)?];)+) => {
        $(impl $crate::config_keys::KeyValue for $t {
            const TYPE: $crate::vocab::KeyType = $crate::vocab::KeyType::Enum(&[$($name),+]);
            fn read(v: &serde_json::Value, path: &str) -> $crate::error::Result<Self> {
                v.as_str().and_then(<$t>::parse).ok_or_else(|| {
                    $crate::config_keys::wrong_type(path, concat!("one of ", $($name, " "),+))
                })
            }
            fn write(&self) -> serde_json::Value {
                serde_json::Value::from(self.as_str())
            }
        })+
    };
}
pub(crate) use enum_key;

/// Reads every key of `obj` that is given (not `null`) into `field` — the body of a
/// declared struct's `read_keys`.
pub(crate) fn read_key<T: KeyValue>(
    obj: &Map<String, Value>,
    name: &str,
    prefix: &str,
    field: &mut T,
) -> Result<()> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => {
            *field = T::read(v, &format!("{prefix}{name}"))?;
            Ok(())
        }
    }
}

/// See the module documentation.
macro_rules! config_keys {
    (
        $(#[$sattr:meta])*
        $vis:vis struct $name:ident in $kvis:vis const $KEYS:ident {
            $(
                #[doc = $doc:literal]
                $(#[$fattr:meta])*
                $fvis:vis $field:ident : $ty:ty = $default:expr
                $(, key($($kmod:ident($($karg:expr),*)),* $(,)?))?
                $(, with $wkind:ident $with:ident $(($($warg:tt)*))?)?
                $(, write $write:path)?
                $(, debug $debug:path)?
                ;
            )+
        }
    ) => {
        $(#[$sattr])*
        $vis struct $name {
            $( #[doc = $doc] $(#[$fattr])* $fvis $field: $ty, )+
        }

        #[doc = concat!("The keys of [`", stringify!($name), "`], from its declaration.")]
        $kvis const $KEYS: &[$crate::vocab::Key] = &[
            $(
                $crate::vocab::Key::new(
                    stringify!($field),
                    <$ty as $crate::config_keys::KeyValue>::TYPE,
                    {
                        fn default_json() -> serde_json::Value {
                            let v: $ty = $default;
                            $crate::config_keys::KeyValue::write(&v)
                        }
                        default_json
                    },
                    $doc,
                ) $($(.$kmod($($karg),*))*)?,
            )+
        ];

        impl $name {
            /// Every field at its declared default.
            #[allow(dead_code)]
            pub(crate) fn defaults() -> $name {
                $name { $( $field: $default, )+ }
            }

            /// Reads every key of `obj` that is given into `self`; `obj` has passed
            /// `vocab::check` against the key table, and `prefix` is its path
            /// (`retry.`).
            pub(crate) fn read_keys(
                &mut self,
                obj: &serde_json::Map<String, serde_json::Value>,
                prefix: &str,
            ) -> $crate::error::Result<()> {
                $( $crate::config_keys::read_key(obj, stringify!($field), prefix, &mut self.$field)?; )+
                Ok(())
            }

            /// The JSON form: every key, `null` where unset.
            pub(crate) fn write_keys(&self) -> serde_json::Value {
                let mut o = serde_json::Map::new();
                $( o.insert(
                    stringify!($field).into(),
                    config_keys!(@write self.$field $(, $write)?),
                ); )+
                serde_json::Value::Object(o)
            }

            $( $( config_keys!(@with $field $doc; $ty; $wkind $with $(($($warg)*))?); )? )+
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $( .field(stringify!($field), &config_keys!(@debug self.$field $(, $debug)?)) )+
                    .finish()
            }
        }

        impl $crate::config_keys::KeyValue for $name {
            const TYPE: $crate::vocab::KeyType = $crate::vocab::KeyType::Object($KEYS);
            fn read(v: &serde_json::Value, path: &str) -> $crate::error::Result<Self> {
                let o = v
                    .as_object()
                    .ok_or_else(|| $crate::config_keys::wrong_type(path, "an object"))?;
                let mut s = $name::defaults();
                s.read_keys(o, &format!("{path}."))?;
                Ok(s)
            }
            fn write(&self) -> serde_json::Value {
                self.write_keys()
            }
        }

        impl $crate::config_keys::KeyObject for $name {
            const KEYS: &'static [$crate::vocab::Key] = $KEYS;
        }
    };

    (@write $v:expr) => { $crate::config_keys::KeyValue::write(&$v) };
    (@write $v:expr, $write:path) => { serde_json::Value::from($write(&$v)) };
    (@debug $v:expr) => { $v };
    (@debug $v:expr, $debug:path) => { $debug(&$v) };

    (@with $field:ident $doc:literal; $ty:ty; set $with:ident) => {
        #[doc = concat!("Sets `", stringify!($field), "`:", $doc)]
        pub fn $with(mut self, v: $ty) -> Self {
            self.$field = v;
            self
        }
    };
    (@with $field:ident $doc:literal; $ty:ty; into $with:ident) => {
        #[doc = concat!("Sets `", stringify!($field), "`:", $doc)]
        pub fn $with(mut self, v: impl Into<$ty>) -> Self {
            self.$field = v.into();
            self
        }
    };
    (@with $field:ident $doc:literal; $ty:ty; some $with:ident($arg:ty)) => {
        #[doc = concat!("Sets `", stringify!($field), "`:", $doc)]
        pub fn $with(mut self, v: $arg) -> Self {
            self.$field = Some(v.into());
            self
        }
    };
    (@with $field:ident $doc:literal; $ty:ty; push $with:ident($arg:ty)) => {
        #[doc = concat!("Adds one to `", stringify!($field), "`:", $doc)]
        pub fn $with(mut self, v: $arg) -> Self {
            self.$field.push(v);
            self
        }
    };
    (@with $field:ident $doc:literal; $ty:ty; insert $with:ident($arg:ty)) => {
        #[doc = concat!("Adds one to `", stringify!($field), "` under `name`:", $doc)]
        pub fn $with(mut self, name: impl Into<String>, v: $arg) -> Self {
            self.$field.insert(name.into(), v.into());
            self
        }
    };
}
pub(crate) use config_keys;
