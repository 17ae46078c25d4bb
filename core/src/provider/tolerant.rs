//! Owns the repairs that keep a sloppy server's answer: parsing an event strictly first
//! and, only when that fails, again from a repaired copy. Does not decide what an event
//! means (the decoders do) nor what a failed request means (`wire_error`).
//!
//! The strict, borrowing serde parse is the fast path and runs first. Only when it fails
//! is the event repaired and parsed again: JSON gateways written in JavaScript split a
//! UTF-16 surrogate pair across two events (`"\ud83d"`, then `"\ude00"`), which the
//! official SDKs accept and serde_json refuses; some servers repeat a key, which serde's
//! derived structs refuse. Neither should throw away an answer already streamed. Usage
//! figures that are not counts, and objects that are not objects, count as absent
//! ([`Count`], [`Obj`]).

use std::borrow::Cow;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

/// Parses `data` as `T`, strictly if possible, else from a repaired copy kept in
/// `scratch`: lone surrogate escapes rewritten (see [`repair_surrogates`]), duplicate
/// keys resolved — the last one wins, as in a `serde_json::Value`. Returns whether the
/// repaired copy was used: its strings may then carry surrogate markers, which
/// [`resolve_markers`] (for deltas) and [`clean`] (for other strings) turn back into
/// text. An event that stays malformed fails with the strict parse's error.
pub(crate) fn parse_tolerant<'a, T: Deserialize<'a>>(
    data: &'a str,
    scratch: &'a mut String,
    what: &str,
) -> Result<(T, bool)> {
    let strict = match serde_json::from_str::<T>(data) {
        Ok(v) => return Ok((v, false)),
        Err(e) => e,
    };
    let repaired = repair_surrogates(data, true);
    let Ok(value) = serde_json::from_str::<Value>(repaired.as_deref().unwrap_or(data)) else {
        return Err(protocol_json_error(what, strict));
    };
    *scratch = value.to_string();
    let scratch: &'a String = scratch;
    serde_json::from_str::<T>(scratch)
        .map(|v| (v, true))
        .map_err(|_| protocol_json_error(what, strict))
}

/// Parses JSON text into a `Value`, lone surrogates decoded as U+FFFD; `None` if it is
/// not JSON.
pub(crate) fn parse_value_lossy(text: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Some(v),
        Err(_) => serde_json::from_str(&repair_surrogates(text, false)?).ok(),
    }
}

/// Lead of a marker standing for a lone high (leading) surrogate.
const HIGH_MARK: char = '\u{FFFE}';
/// Lead of a marker standing for a lone low (trailing) surrogate.
const LOW_MARK: char = '\u{FFFF}';
/// Marker payload digits: the noncharacters U+FDD0..=U+FDEF, 5 bits each.
const MARK_DIGIT0: u32 = 0xFDD0;

/// Rewrites the lone UTF-16 surrogate escapes of JSON text (a `\uD800`–`\uDBFF` not
/// followed by a `\uDC00`–`\uDFFF`, or such a low one alone) so that serde_json accepts
/// it. With `mark`, a lone high surrogate ending a string and a lone low one starting a
/// string — the halves of a pair split across two events — become a marker (a lead
/// noncharacter and two payload noncharacters encoding the surrogate) so the decoder can
/// join them; every other lone surrogate becomes U+FFFD. The noncharacters U+FFFE and
/// U+FFFF already in the text become U+FFFD, so that every lead in the result is a
/// marker. `None` when there is nothing to rewrite.
fn repair_surrogates(data: &str, mark: bool) -> Option<String> {
    let b = data.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut in_string = false;
    let mut string_start = 0;
    while i < b.len() {
        let replace: Option<(usize, [char; 3], usize)> = match b[i] {
            b'"' => {
                in_string = !in_string;
                string_start = i + 1;
                i += 1;
                continue;
            }
            b'\\' if in_string => {
                let (Some(b'u'), Some(unit)) = (b.get(i + 1), hex4(b, i + 2)) else {
                    i += 2; // a one-character escape, `\"` and `\\` included
                    continue;
                };
                let end = i + 6;
                match unit {
                    0xD800..=0xDBFF => {
                        let low = (b.get(end) == Some(&b'\\') && b.get(end + 1) == Some(&b'u'))
                            .then(|| hex4(b, end + 2))
                            .flatten()
                            .filter(|l| (0xDC00..=0xDFFF).contains(l));
                        if low.is_some() {
                            i = end + 6;
                            continue;
                        }
                        if mark && b.get(end) == Some(&b'"') {
                            Some((i, marker(HIGH_MARK, unit), end))
                        } else {
                            Some((i, replacement(), end))
                        }
                    }
                    0xDC00..=0xDFFF => {
                        if mark && i == string_start {
                            Some((i, marker(LOW_MARK, unit), end))
                        } else {
                            Some((i, replacement(), end))
                        }
                    }
                    0xFFFE | 0xFFFF => Some((i, replacement(), end)),
                    _ => {
                        i = end;
                        continue;
                    }
                }
            }
            // U+FFFE / U+FFFF written as raw UTF-8.
            0xEF if b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF)) => {
                Some((i, replacement(), i + 3))
            }
            _ => {
                i += 1;
                continue;
            }
        };
        if let Some((at, chars, next)) = replace {
            let o = out.get_or_insert_with(|| String::with_capacity(data.len() + 16));
            // `at` is an ASCII backslash or the lead byte of a char: a char boundary.
            o.push_str(data.get(copied..at).unwrap_or(""));
            for c in chars.into_iter().filter(|c| *c != '\0') {
                o.push(c);
            }
            copied = next;
            i = next;
        }
    }
    let mut o = out?;
    o.push_str(data.get(copied..).unwrap_or(""));
    Some(o)
}

fn hex4(b: &[u8], at: usize) -> Option<u16> {
    let digits = b.get(at..at.checked_add(4)?)?;
    let s = std::str::from_utf8(digits).ok()?;
    if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

fn replacement() -> [char; 3] {
    [char::REPLACEMENT_CHARACTER, '\0', '\0']
}

fn marker(lead: char, unit: u16) -> [char; 3] {
    let digit = |bits: u16| char::from_u32(MARK_DIGIT0 + u32::from(bits & 0x1F)).unwrap_or('\0');
    [lead, digit(unit >> 5), digit(unit)]
}

/// Reads a marker at the start of `s`: (is high, surrogate, rest).
fn take_marker(s: &str) -> Option<(bool, u16, &str)> {
    let mut it = s.chars();
    let high = match it.next()? {
        HIGH_MARK => true,
        LOW_MARK => false,
        _ => return None,
    };
    let digit = |c: char| {
        let v = u32::from(c).checked_sub(MARK_DIGIT0).filter(|v| *v < 32)?;
        Some(v as u16)
    };
    let hi = digit(it.next()?)?;
    let lo = digit(it.next()?)?;
    let base: u16 = if high { 0xD800 } else { 0xDC00 };
    Some((high, base | (hi << 5) | lo, it.as_str()))
}

fn join_surrogates(high: u16, low: u16) -> char {
    let c = 0x1_0000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
    char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Appends `text` to `out`. A high surrogate left `pending` by the previous delta joins
/// a low-surrogate marker starting `text` into one character, or becomes U+FFFD. With
/// `marked` (text from a repaired event), a high-surrogate marker ending `text` is left
/// pending for the next delta, and every other marker becomes U+FFFD.
pub(super) fn resolve_markers(
    text: &str,
    marked: bool,
    pending: &mut Option<u16>,
    out: &mut String,
) {
    let mut rest = text;
    if let Some(high) = pending.take() {
        match take_marker(rest).filter(|_| marked) {
            Some((false, low, after)) => {
                out.push(join_surrogates(high, low));
                rest = after;
            }
            _ => out.push(char::REPLACEMENT_CHARACTER),
        }
    }
    if !marked {
        out.push_str(rest);
        return;
    }
    while let Some(at) = rest.find([HIGH_MARK, LOW_MARK]) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match take_marker(tail) {
            Some((true, high, "")) => {
                *pending = Some(high);
                return;
            }
            Some((_, _, after)) => {
                out.push(char::REPLACEMENT_CHARACTER);
                rest = after;
            }
            None => {
                // Not a marker after all (cannot happen in repaired text): keep it.
                let lead_len = tail.chars().next().map_or(tail.len(), char::len_utf8);
                out.push_str(&tail[..lead_len]);
                rest = &tail[lead_len..];
            }
        }
    }
    out.push_str(rest);
}

/// A string from a repaired event that is not a delta (an id, a name, a model): its
/// markers become U+FFFD.
pub(crate) fn clean(s: &str, marked: bool) -> Cow<'_, str> {
    if !marked || !s.contains([HIGH_MARK, LOW_MARK]) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut pending = None;
    resolve_markers(s, true, &mut pending, &mut out);
    if pending.is_some() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
    Cow::Owned(out)
}

/// A token count as a server reports it. Anything that is not a non-negative integer
/// within `u64` (a negative or fractional number, a string, an object) counts as absent:
/// a bad usage figure is no reason to fail an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a token count")
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Count, E> {
        Ok(Count(Some(v)))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Count, E> {
        Ok(Count(u64::try_from(v).ok()))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Count, E> {
        // 2^64 is exactly representable; every smaller integral float fits in u64.
        let fits =
            v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0;
        Ok(Count(fits.then_some(v as u64)))
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_unit<E>(self) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_none<E>(self) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
}

/// An object field that counts as absent when it is not an object (`"usage": "n/a"`),
/// instead of failing the event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Obj<T>(pub(crate) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Obj<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|t| Obj(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Obj<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Obj(None))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_unit<E>(self) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_none<E>(self) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The `protocol` error of an event `what` that is not JSON even after the repairs.
fn protocol_json_error(what: &str, e: serde_json::Error) -> Error {
    Error::protocol(format!("malformed {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surrogate_repair_touches_only_lone_surrogate_escapes() {
        // Pairs, escaped backslashes and other escapes stay; nothing to repair.
        for fine in [
            r#""\ud83d\ude00""#,
            r#""a\\ud83d""#,
            r#""\\\ud83d\ude00""#,
            r#""\u00e9\n\"""#,
            r#"{"k":"v"}"#,
        ] {
            assert_eq!(repair_surrogates(fine, true), None, "{fine}");
        }
        let fixed = |s: &str, mark: bool| repair_surrogates(s, mark).unwrap_or_default();
        assert_eq!(fixed(r#""a\ud83db""#, true), "\"a\u{FFFD}b\"");
        assert_eq!(fixed(r#""\\\ud83d""#, false), "\"\\\\\u{FFFD}\"");
        // With markers, only the halves at a string's edges are marked.
        let high = fixed(r#"["x\ud83d","\ude00y"]"#, true);
        assert!(
            high.starts_with("[\"x\u{FFFE}") && high.contains(",\"\u{FFFF}"),
            "{high}"
        );
        assert_eq!(fixed(r#"["x\ud83d"]"#, false), "[\"x\u{FFFD}\"]");
        // Truncated or malformed escapes are left for the strict parse to reject.
        for broken in [r#""\ud8"#, r#""\u"#, r#""\"#, r#""\uzzzz\ud800"#] {
            let _ = repair_surrogates(broken, true);
        }
    }

    #[test]
    fn markers_join_across_deltas_and_never_leak() {
        let marked = |s: &str| {
            let v: String = serde_json::from_str(&repair_surrogates(s, true).unwrap()).unwrap();
            v
        };
        let (a, b) = (marked(r#""x\ud83d""#), marked(r#""\ude00y""#));
        let mut pending = None;
        let mut out = String::new();
        resolve_markers(&a, true, &mut pending, &mut out);
        assert_eq!((out.as_str(), pending), ("x", Some(0xD83D)));
        resolve_markers(&b, true, &mut pending, &mut out);
        assert_eq!((out.as_str(), pending), ("x😀y", None));
        assert_eq!(clean(&a, true), "x\u{FFFD}");
        assert_eq!(clean(&b, true), "\u{FFFD}y");
        assert_eq!(clean(&a, false), a);
    }

    #[test]
    fn counts_accept_only_non_negative_integers() {
        let count = |s: &str| serde_json::from_str::<Count>(s).map(|c| c.0).ok().flatten();
        assert_eq!(count("7"), Some(7));
        assert_eq!(count("12.0"), Some(12));
        assert_eq!(count("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "-1",
            "2.5",
            "1e30",
            "18446744073709551616",
            "\"3\"",
            "null",
            "[1]",
            "{\"n\":1}",
            "true",
        ] {
            assert_eq!(count(bad), None, "{bad}");
        }
    }
}
