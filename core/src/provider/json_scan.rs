//! Owns a minimal, validating JSON scanner for the hot path of streaming decoders: the
//! OpenAI chunk decoder reads the common chunk shapes with it (one text fragment, ids,
//! a finish reason) at a fraction of serde's cost per chunk.
//!
//! It accepts a strict subset of JSON and answers `None` for anything else — a lone
//! surrogate escape, a key written with escapes, nesting deeper than [`MAX_DEPTH`], any
//! syntax error — so the caller falls back to the serde parse, which then decides
//! exactly as it always did (its error, its repairs). What it does accept, it reads as
//! serde_json would.

use std::borrow::Cow;

/// Deeper values are left to serde (whose own limit is 128).
const MAX_DEPTH: u32 = 64;

/// The bytes that end the plain run of a string: the closing quote, an escape, and the
/// control characters JSON forbids raw.
static STRING_STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

pub(crate) struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(text: &'a str) -> Scanner<'a> {
        Scanner {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Only whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Consumes `null` if it comes next; whether it did.
    pub(crate) fn null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.bytes.get(self.at..self.at + 4) == Some(b"null") {
            self.at += 4;
            return true;
        }
        false
    }

    /// A string value, borrowed when it holds no escape.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.at;
        // Strings in chunks are short: a table test per byte beats a vectorized search's
        // set-up.
        let len = self
            .bytes
            .get(start..)?
            .iter()
            .position(|&b| STRING_STOP[usize::from(b)])?;
        let end = start + len;
        self.at = end;
        match self.bytes.get(end) {
            Some(b'"') => {
                let s = self.text.get(start..end)?;
                self.at += 1;
                Some(Cow::Borrowed(s))
            }
            Some(b'\\') => self.escaped_string(start).map(Cow::Owned),
            _ => None, // a raw control character
        }
    }

    fn escaped_string(&mut self, start: usize) -> Option<String> {
        let mut out = String::with_capacity(self.at - start + 16);
        out.push_str(self.text.get(start..self.at)?);
        loop {
            let run = self.at;
            while let Some(&b) = self.bytes.get(self.at) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(self.text.get(run..self.at)?);
            match *self.bytes.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(out);
                }
                b'\\' => {
                    let escape = *self.bytes.get(self.at + 1)?;
                    self.at += 2;
                    out.push(match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    });
                }
                _ => return None, // a raw control character
            }
        }
    }

    /// The character of a `\u` escape whose `\u` was consumed; a surrogate pair must be
    /// whole (a lone surrogate is serde's to refuse, and panto's repair path's to mend).
    fn unicode_escape(&mut self) -> Option<char> {
        let unit = self.hex4()?;
        match unit {
            0xD800..=0xDBFF => {
                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                    return None;
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                let c = 0x1_0000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                char::from_u32(c)
            }
            0xDC00..=0xDFFF => None,
            _ => char::from_u32(u32::from(unit)),
        }
    }

    fn hex4(&mut self) -> Option<u16> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let mut unit = 0u16;
        for &d in digits {
            let v = (d as char).to_digit(16)?;
            unit = unit << 4 | v as u16;
        }
        self.at += 4;
        Some(unit)
    }

    /// An object key without escapes (a key with escapes is left to serde).
    fn key(&mut self) -> Option<&'a str> {
        match self.string()? {
            Cow::Borrowed(k) => Some(k),
            Cow::Owned(_) => None,
        }
    }

    /// Reads an object, calling `on_field` with each key; the callback reads its value.
    #[inline]
    pub(crate) fn object(
        &mut self,
        mut on_field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            on_field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Reads an array, calling `on_item` for each element; the callback reads it.
    #[inline]
    pub(crate) fn array(&mut self, mut on_item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            on_item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A `u32` written as a plain integer (what serde reads into a `u32`).
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.skip_whitespace();
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let digits = self.text.get(start..self.at)?;
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes.get(self.at) {
            return None;
        }
        digits.parse().ok()
    }

    /// Skips any one value, checking its syntax.
    pub(crate) fn skip_value(&mut self) -> Option<()> {
        self.skip_nested(0)
    }

    fn skip_nested(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|s, _| s.skip_nested(depth + 1)),
            b'[' => self.array(|s| s.skip_nested(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.null().then_some(()),
            _ => self.number(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            return Some(());
        }
        None
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let digits = |s: &mut Self| {
            let from = s.at;
            while s.bytes.get(s.at).is_some_and(u8::is_ascii_digit) {
                s.at += 1;
            }
            s.at - from
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        Some(())
    }
}
